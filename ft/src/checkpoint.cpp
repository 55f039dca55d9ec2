#include "flashrec/ft/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "flashrec/ft/checksum.hpp"
#include "flashrec/ft/h5.hpp"

namespace flashrec::ft {
namespace fs = std::filesystem;
namespace {

// ordered_json keeps the manifest's keys in the order written, which reads better.
using Json = nlohmann::ordered_json;

constexpr std::int64_t format_version = 1;
constexpr std::string_view format_name = "flashrec-checkpoint";
constexpr std::string_view checksum_algorithm = "xxh3-64";
constexpr std::string_view manifest_file_name = "manifest.json";
// The "buffer" of a CorruptState about a file or manifest as a whole.
constexpr std::string_view whole_file = "(whole file)";

// ---------------------------------------------------------------------------------------
// Element types

struct DtypeTraits {
    std::string_view name;
    std::size_t size;
};
// Indexed by Dtype.
constexpr std::array<DtypeTraits, 5> dtype_traits{{
    {"float32", 4}, {"float64", 8}, {"int32", 4}, {"int64", 8}, {"uint8", 1}}};
static_assert(dtype_traits[static_cast<std::size_t>(Dtype::uint8)].name == "uint8");

Dtype parse_dtype(std::string_view name) {
    for (std::size_t i = 0; i < dtype_traits.size(); ++i)
        if (dtype_traits[i].name == name) return static_cast<Dtype>(i);
    throw Error("unknown dtype '" + std::string(name) + "'");
}

// Files are little-endian whatever the writer's host, so they read the same everywhere; on
// little-endian hosts the memory type is the same and HDF5 copies no byte.
struct Hdf5Types {
    hid_t file;
    hid_t memory;
};

Hdf5Types hdf5_types(Dtype dtype) {
    switch (dtype) {
        case Dtype::float32: return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
        case Dtype::float64: return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE};
        case Dtype::int32: return {H5T_STD_I32LE, H5T_NATIVE_INT32};
        case Dtype::int64: return {H5T_STD_I64LE, H5T_NATIVE_INT64};
        case Dtype::uint8: return {H5T_STD_U8LE, H5T_NATIVE_UINT8};
    }
    throw Error("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

// ---------------------------------------------------------------------------------------
// Names: role keys and attempt tags become parts of file names, buffer names HDF5 links.

bool is_name_of(std::string_view text, std::string_view allowed_punctuation) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [&](char c) {
               return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      allowed_punctuation.find(c) != std::string_view::npos;
           });
}

void require_valid_role(std::string_view role) {
    if (!is_name_of(role, "._-"))
        throw Error("role key '" + std::string(role) + "' must be letters, digits, '.', '-' or '_'");
}

void require_valid_buffer_name(std::string_view name) {
    if (name.empty() || name == "." || name.find_first_of(std::string_view("/\0", 2)) != name.npos)
        throw Error("buffer name '" + std::string(name) + "' must be non-empty, not '.', without '/'");
}

std::string step_dir_name(std::int64_t step) {
    char text[32];
    std::snprintf(text, sizeof text, "step-%08lld", static_cast<long long>(step));
    return text;
}

std::string staging_dir_name(std::int64_t step, std::string_view attempt) {
    return "." + step_dir_name(step) + ".tmp-" + std::string(attempt);
}

std::string rank_file_name(std::string_view role) { return "rank-" + std::string(role) + ".h5"; }

std::optional<std::int64_t> parse_step(std::string_view digits) {
    std::int64_t step = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (digits.empty() || digits.front() == '-' || error != std::errc() ||
        end != digits.data() + digits.size())
        return std::nullopt;
    return step;
}

// "step-<N>" → N
std::optional<std::int64_t> parse_step_dir_name(std::string_view name) {
    constexpr std::string_view prefix = "step-";
    if (!name.starts_with(prefix)) return std::nullopt;
    return parse_step(name.substr(prefix.size()));
}

// ".step-<N>.tmp-<attempt>" → N
std::optional<std::int64_t> parse_staging_dir_name(std::string_view name) {
    constexpr std::string_view prefix = ".step-";
    constexpr std::string_view separator = ".tmp-";
    const std::size_t at = name.find(separator);
    if (!name.starts_with(prefix) || at == name.npos || !is_name_of(name.substr(at + separator.size()), "-_"))
        return std::nullopt;
    return parse_step(name.substr(prefix.size(), at - prefix.size()));
}

std::optional<std::uint64_t> parse_checksum_hex(std::string_view hex) {
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(hex.data(), hex.data() + hex.size(), value, 16);
    if (hex.size() != 16 || error != std::errc() || end != hex.data() + hex.size()) return std::nullopt;
    return value;
}

fs::path without_trailing_separator(fs::path path) {
    path = path.lexically_normal();
    return path.has_filename() ? path : path.parent_path();
}

// ---------------------------------------------------------------------------------------
// Files and durability

[[noreturn]] void throw_errno(const std::string& operation) {
    throw Error(operation + ": " + std::generic_category().message(errno));
}

class FileDescriptor {
public:
    explicit FileDescriptor(int fd) : fd_(fd) {}
    FileDescriptor(const FileDescriptor&) = delete;
    FileDescriptor& operator=(const FileDescriptor&) = delete;
    ~FileDescriptor() {
        if (fd_ >= 0) ::close(fd_);
    }
    int get() const { return fd_; }
    // Closing can report a failed write-back (NFS): do it explicitly where that matters.
    void close(const std::string& operation) {
        if (::close(std::exchange(fd_, -1)) != 0) throw_errno(operation);
    }

private:
    int fd_;
};

// fsync of a file makes its data durable; of a directory, the names in it (a new file, a rename).
void fsync_path(const fs::path& path) {
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) throw_errno("opening " + path.string() + " to fsync it");
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + path.string());
}

void write_file_durably(const fs::path& path, std::string_view text) {
    FileDescriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) throw_errno("creating " + path.string());
    while (!text.empty()) {
        const ssize_t written = ::write(fd.get(), text.data(), text.size());
        if (written < 0 && errno == EINTR) continue;
        if (written < 0) throw_errno("writing " + path.string());
        text.remove_prefix(static_cast<std::size_t>(written));
    }
    if (::fsync(fd.get()) != 0) throw_errno("fsync " + path.string());
    fd.close("closing " + path.string());
}

std::uint64_t size_of_file(const fs::path& path) {
    std::error_code error;
    const std::uintmax_t bytes = fs::file_size(path, error);
    if (error) throw Error(path.string() + ": " + error.message());
    return bytes;
}

void remove_tree(const fs::path& path) {
    std::error_code error;
    fs::remove_all(path, error);
    if (error) throw Error("removing " + path.string() + ": " + error.message());
}

// Names of the directories directly under `root`; none if root does not exist.
std::vector<fs::path> subdirectories(const fs::path& root) {
    std::vector<fs::path> found;
    std::error_code error;
    for (auto it = fs::directory_iterator(root, error); !error && it != fs::directory_iterator();
         it.increment(error))
        if (std::error_code type_error; it->is_directory(type_error)) found.push_back(it->path());
    return found;
}

// ---------------------------------------------------------------------------------------
// Manifest

std::string join_buffer_names(const RankFileEntry& entry) {
    std::string names;
    for (const StoredBuffer& buffer : entry.buffers) names += (names.empty() ? "" : ", ") + buffer.name;
    return names.empty() ? "none" : names;
}

// Everything the manifest promises about one rank file that can be checked without it.
void check_entry(const RankFileEntry& entry) {
    require_valid_role(entry.role);
    if (entry.file != rank_file_name(entry.role))
        throw Error("file '" + entry.file + "' of role " + entry.role + " should be named '" +
                    rank_file_name(entry.role) + "'");
    std::set<std::string_view> names;
    for (const StoredBuffer& buffer : entry.buffers) {
        require_valid_buffer_name(buffer.name);
        if (!names.insert(buffer.name).second)
            throw Error("buffer '" + buffer.name + "' listed twice for role " + entry.role);
        if (buffer.bytes % dtype_size(buffer.dtype) != 0)
            throw Error("buffer '" + buffer.name + "': " + std::to_string(buffer.bytes) +
                        " bytes is not a whole number of " + std::string(dtype_name(buffer.dtype)));
    }
}

void check_manifest(const Manifest& manifest) {
    const CheckpointInfo& info = manifest.info;
    const CheckpointTopology& shape = info.topology;
    if (info.step < 0) throw Error("negative step " + std::to_string(info.step));
    if (shape.dp < 1 || shape.tp < 1 || shape.pp < 1) throw Error("topology dp, tp, pp must be >= 1");
    const std::int64_t roles = std::int64_t{shape.dp} * shape.tp * shape.pp;
    if (static_cast<std::int64_t>(manifest.files.size()) != roles)
        throw Error("topology dp" + std::to_string(shape.dp) + " tp" + std::to_string(shape.tp) + " pp" +
                    std::to_string(shape.pp) + " has " + std::to_string(roles) + " roles, but " +
                    std::to_string(manifest.files.size()) + " rank files are listed");
    std::set<std::string_view> seen;
    for (const RankFileEntry& entry : manifest.files) {
        check_entry(entry);
        if (!seen.insert(entry.role).second) throw Error("role " + entry.role + " listed twice");
    }
}

Json to_json(const RankFileEntry& entry) {
    Json buffers = Json::array();
    for (const StoredBuffer& buffer : entry.buffers)
        buffers.push_back(Json{{"name", buffer.name},
                           {"dtype", std::string(dtype_name(buffer.dtype))},
                           {"elements", buffer.bytes / dtype_size(buffer.dtype)},
                           {"bytes", buffer.bytes},
                           {"checksum", checksum_hex(buffer.checksum)}});
    return {{"role", entry.role}, {"file", entry.file}, {"file_bytes", entry.file_bytes},
            {"buffers", std::move(buffers)}};
}

// Throws nlohmann::json::exception for a wrong shape, flashrec::Error for wrong values.
RankFileEntry entry_from_json(const Json& json) {
    RankFileEntry entry;
    entry.role = json.at("role").get<std::string>();
    entry.file = json.at("file").get<std::string>();
    entry.file_bytes = json.at("file_bytes").get<std::uint64_t>();
    for (const Json& item : json.at("buffers")) {
        StoredBuffer buffer;
        buffer.name = item.at("name").get<std::string>();
        buffer.dtype = parse_dtype(item.at("dtype").get<std::string>());
        buffer.bytes = item.at("bytes").get<std::uint64_t>();
        const auto checksum = parse_checksum_hex(item.at("checksum").get<std::string>());
        if (!checksum) throw Error("buffer '" + buffer.name + "': checksum is not 16 hex digits");
        buffer.checksum = *checksum;
        if (item.at("elements").get<std::uint64_t>() * dtype_size(buffer.dtype) != buffer.bytes)
            throw Error("buffer '" + buffer.name + "': elements and bytes disagree");
        entry.buffers.push_back(std::move(buffer));
    }
    check_entry(entry);
    return entry;
}

Json to_json(const Manifest& manifest) {
    const CheckpointInfo& info = manifest.info;
    Json roles = Json::array();
    Json files = Json::array();
    for (const RankFileEntry& entry : manifest.files) {
        roles.push_back(entry.role);
        files.push_back(to_json(entry));
    }
    return {{"format", format_name},
            {"format_version", format_version},
            {"checksum", checksum_algorithm},
            {"library_version", info.library_version},
            {"job", info.job},
            {"step", info.step},
            {"topology_epoch", info.topology_epoch},
            {"topology", {{"dp", info.topology.dp}, {"tp", info.topology.tp}, {"pp", info.topology.pp}}},
            {"roles", std::move(roles)},
            {"files", std::move(files)}};
}

Manifest manifest_from_json(const Json& json) {
    if (json.at("format").get<std::string>() != format_name) throw Error("not a flashrec checkpoint manifest");
    if (const auto version = json.at("format_version").get<std::int64_t>(); version != format_version)
        throw Error("format_version " + std::to_string(version) + ", this reader knows " +
                    std::to_string(format_version));
    if (json.at("checksum").get<std::string>() != checksum_algorithm)
        throw Error("checksum algorithm is not " + std::string(checksum_algorithm));
    Manifest manifest;
    CheckpointInfo& info = manifest.info;
    info.library_version = json.at("library_version").get<std::string>();
    info.job = json.value("job", std::string());  // absent before the field existed
    info.step = json.at("step").get<std::int64_t>();
    info.topology_epoch = json.at("topology_epoch").get<std::int64_t>();
    const Json& topology = json.at("topology");
    info.topology = {topology.at("dp").get<int>(), topology.at("tp").get<int>(), topology.at("pp").get<int>()};
    for (const Json& file : json.at("files")) manifest.files.push_back(entry_from_json(file));
    std::vector<std::string> file_roles;
    for (const RankFileEntry& entry : manifest.files) file_roles.push_back(entry.role);
    if (json.at("roles").get<std::vector<std::string>>() != file_roles)
        throw Error("'roles' and the roles of 'files' disagree");
    check_manifest(manifest);
    return manifest;
}

// Reads <dir>/manifest.json, which must record `expected_step`. Throws CorruptState naming it.
Manifest load_manifest(const fs::path& dir, std::int64_t expected_step) {
    const fs::path path = dir / manifest_file_name;
    const auto corrupt = [&](const std::string& detail) {
        return CorruptState(path.string(), std::string(whole_file), detail);
    };
    if (std::error_code error; !fs::is_regular_file(path, error)) throw corrupt("missing");
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw corrupt("cannot be read");
    Manifest manifest;
    try {
        manifest = manifest_from_json(Json::parse(text.str()));
    } catch (const Json::exception& e) {
        throw corrupt(std::string("malformed: ") + e.what());
    } catch (const Error& e) {
        throw corrupt(e.what());
    }
    if (manifest.info.step != expected_step)
        throw corrupt("records step " + std::to_string(manifest.info.step) + " in the directory of step " +
                      std::to_string(expected_step));
    return manifest;
}

bool manifest_opens(const StepDir& checkpoint) {
    try {
        load_manifest(checkpoint.path, checkpoint.step);
        return true;
    } catch (const Error&) {
        return false;
    }
}

const StoredBuffer& find_stored(const fs::path& file, const RankFileEntry& entry, std::string_view name) {
    for (const StoredBuffer& stored : entry.buffers)
        if (stored.name == name) return stored;
    throw CheckpointMismatch(file.string(), std::string(name),
                             "not in this checkpoint (role " + entry.role + " holds: " +
                                 join_buffer_names(entry) + ")");
}

// ---------------------------------------------------------------------------------------
// One rank file, opened for reading and checked against its manifest entry. Whatever is
// wrong with it is a CorruptState naming the file and, where one is concerned, the buffer.

class RankFileReader {
public:
    RankFileReader(const fs::path& step_dir, const CheckpointInfo& info, const RankFileEntry& entry)
        : path_(step_dir / entry.file) {
        std::error_code error;
        if (!fs::is_regular_file(path_, error)) corrupt(whole_file, "missing");
        if (const std::uint64_t bytes = size_of_file(path_); bytes != entry.file_bytes)
            corrupt(whole_file, std::to_string(bytes) + " bytes, the manifest records " +
                                    std::to_string(entry.file_bytes));
        as_corrupt(whole_file, [&] {
            file_ = h5::open_file_read_only(path_);
            const hid_t file = file_.get();
            expect_equal("format_version", h5::read_attribute<std::int64_t>(file, "format_version"), format_version);
            expect_equal("step", h5::read_attribute<std::int64_t>(file, "step"), info.step);
            expect_equal("role", h5::read_attribute<std::string>(file, "role"), entry.role);
            expect_equal("topology_epoch", h5::read_attribute<std::int64_t>(file, "topology_epoch"),
                         info.topology_epoch);
            expect_equal("library_version", h5::read_attribute<std::string>(file, "library_version"),
                         info.library_version);
            if (!info.job.empty()) expect_equal("job", h5::read_attribute<std::string>(file, "job"), info.job);
        });
    }

    // After each listed dataset was found: nothing else hides in the file.
    void check_nothing_unlisted(const RankFileEntry& entry) const {
        const hsize_t datasets = as_corrupt(whole_file, [&] { return h5::root_link_count(file_.get()); });
        if (datasets != entry.buffers.size())
            corrupt(whole_file, "holds " + std::to_string(datasets) + " datasets, the manifest lists " +
                                    std::to_string(entry.buffers.size()));
    }

    // Opens a buffer's dataset after checking its type, shape and attributes.
    h5::Dataset open_dataset(const StoredBuffer& stored) const {
        return as_corrupt(stored.name, [&] {
            if (!h5::has_link(file_.get(), stored.name)) corrupt(stored.name, "no such dataset");
            h5::Dataset dataset = h5::open_dataset(file_.get(), stored.name);
            const h5::Datatype type = h5::type_of(dataset.get());
            if (h5::check(H5Tequal(type.get(), hdf5_types(stored.dtype).file), "H5Tequal") <= 0)
                corrupt(stored.name, "not stored as little-endian " + std::string(dtype_name(stored.dtype)) +
                                         " as the manifest records");
            const std::uint64_t bytes = h5::element_count_1d(dataset.get()) * dtype_size(stored.dtype);
            if (bytes != stored.bytes)
                corrupt(stored.name, "holds " + std::to_string(bytes) + " bytes, the manifest records " +
                                         std::to_string(stored.bytes));
            const std::string checksum_attribute = h5::read_attribute<std::string>(dataset.get(), "checksum");
            if (checksum_attribute != checksum_hex(stored.checksum))
                corrupt(stored.name, "checksum attribute " + checksum_attribute + ", the manifest records " +
                                         checksum_hex(stored.checksum));
            if (h5::read_attribute<std::uint64_t>(dataset.get(), "bytes") != stored.bytes)
                corrupt(stored.name, "bytes attribute disagrees with the manifest");
            return dataset;
        });
    }

    // Reads a buffer into `out` (stored.bytes long) and verifies its checksum.
    void read_verified(const StoredBuffer& stored, void* out) const {
        const h5::Dataset dataset = open_dataset(stored);
        if (stored.bytes > 0)
            as_corrupt(stored.name, [&] {
                h5::check(H5Dread(dataset.get(), hdf5_types(stored.dtype).memory, H5S_ALL, H5S_ALL,
                                  H5P_DEFAULT, out),
                          "reading dataset '" + stored.name + "'");
            });
        if (const std::uint64_t computed = checksum(out, stored.bytes); computed != stored.checksum)
            corrupt(stored.name, "checksum mismatch: the data hashes to " + checksum_hex(computed) +
                                     ", the manifest records " + checksum_hex(stored.checksum));
    }

    // Byte offset of a buffer's data in the file; 0 for an empty buffer (no storage).
    std::uint64_t data_offset(const StoredBuffer& stored) const {
        const h5::Dataset dataset = open_dataset(stored);
        const haddr_t offset = H5Dget_offset(dataset.get());
        if (offset != HADDR_UNDEF) return offset;
        if (stored.bytes == 0) return 0;
        corrupt(stored.name, "has no contiguous storage");
    }

private:
    [[noreturn]] void corrupt(std::string_view buffer, const std::string& detail) const {
        throw CorruptState(path_.string(), std::string(buffer), detail);
    }

    template <class Body>
    auto as_corrupt(std::string_view buffer, Body&& body) const -> decltype(body()) {
        try {
            return body();
        } catch (const h5::Error& e) {
            corrupt(buffer, e.what());
        }
    }

    template <class T>
    void expect_equal(const char* what, const T& stored, const T& expected) const {
        if (stored != expected) {
            std::ostringstream detail;
            detail << "file attribute " << what << " is " << stored << ", the manifest records " << expected;
            corrupt(whole_file, detail.str());
        }
    }

    fs::path path_;
    h5::File file_;
};

}  // namespace

// ---------------------------------------------------------------------------------------

std::string_view dtype_name(Dtype dtype) { return dtype_traits.at(static_cast<std::size_t>(dtype)).name; }

std::size_t dtype_size(Dtype dtype) { return dtype_traits.at(static_cast<std::size_t>(dtype)).size; }

std::string RankFileEntry::to_json_text() const { return to_json(*this).dump(); }

RankFileEntry RankFileEntry::from_json_text(std::string_view text) {
    try {
        return entry_from_json(Json::parse(text));
    } catch (const Json::exception& e) {
        throw Error(std::string("malformed rank file entry: ") + e.what());
    }
}

CheckpointMismatch::CheckpointMismatch(std::string where, std::string buffer, const std::string& detail)
    : Error(where + ": buffer '" + buffer + "': " + detail), where_(std::move(where)), buffer_(std::move(buffer)) {}

// ---------------------------------------------------------------------------------------
// Writer

CheckpointWriter::CheckpointWriter(fs::path root) : root_(without_trailing_separator(std::move(root))) {}

std::string CheckpointWriter::new_attempt_tag() {
    std::random_device device;
    const std::uint64_t value = (std::uint64_t{device()} << 32) ^ device();
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
    return text;
}

fs::path CheckpointWriter::create_staging_dir(std::int64_t step, std::string_view attempt) const {
    if (step < 0) throw Error("negative step " + std::to_string(step));
    if (!is_name_of(attempt, "-_"))
        throw Error("attempt tag '" + std::string(attempt) + "' must be letters, digits, '-' or '_'");
    const fs::path dir = root_ / staging_dir_name(step, attempt);
    std::error_code error;
    fs::create_directories(dir, error);  // no error if another rank made it first
    if (error) throw Error("creating " + dir.string() + ": " + error.message());
    return dir;
}

std::int64_t CheckpointWriter::staging_step(const fs::path& staging_dir) const {
    const fs::path dir = without_trailing_separator(staging_dir);
    const auto step = parse_staging_dir_name(dir.filename().string());
    std::error_code error;
    if (!step || !fs::equivalent(dir.parent_path(), root_, error))
        throw Error(staging_dir.string() + " is not a staging directory under " + root_.string());
    return *step;
}

RankFileEntry CheckpointWriter::write_rank_file(const fs::path& staging_dir, std::string_view role,
                                                const CheckpointInfo& info,
                                                std::span<const BufferToSave> buffers) const {
    if (const std::int64_t step = staging_step(staging_dir); step != info.step)
        throw Error("writing step " + std::to_string(info.step) + " into " + staging_dir.string() +
                    ", the staging directory of step " + std::to_string(step));
    require_valid_role(role);
    RankFileEntry entry{std::string(role), rank_file_name(role), 0, {}};
    const fs::path path = staging_dir / entry.file;
    const auto fail = [&](const std::string& buffer, const std::string& detail) {
        return Error(path.string() + ": buffer '" + buffer + "': " + detail);
    };

    // Check the whole registration before any I/O.
    for (const BufferToSave& buffer : buffers) {
        if (buffer.data == nullptr && buffer.bytes > 0) throw fail(buffer.name, "no data");
        entry.buffers.push_back({buffer.name, buffer.dtype, buffer.bytes,
                                 buffer.checksum ? *buffer.checksum : checksum(buffer.data, buffer.bytes)});
    }
    try {
        check_entry(entry);
    } catch (const Error& e) {
        throw Error(path.string() + ": " + e.what());
    }

    try {
        h5::File file = h5::create_file(path);
        h5::write_attribute(file.get(), "format_version", format_version);
        h5::write_attribute(file.get(), "step", info.step);
        h5::write_attribute(file.get(), "role", role);
        h5::write_attribute(file.get(), "topology_epoch", info.topology_epoch);
        h5::write_attribute(file.get(), "library_version", info.library_version);
        h5::write_attribute(file.get(), "job", info.job);
        for (std::size_t i = 0; i < buffers.size(); ++i) {
            const BufferToSave& buffer = buffers[i];
            const Hdf5Types types = hdf5_types(buffer.dtype);
            const h5::Dataset dataset = h5::create_contiguous_dataset(
                file.get(), buffer.name, types.file, buffer.bytes / dtype_size(buffer.dtype));
            if (buffer.bytes > 0)
                h5::check(H5Dwrite(dataset.get(), types.memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data),
                          "writing dataset '" + buffer.name + "'");
            h5::write_attribute(dataset.get(), "checksum", checksum_hex(entry.buffers[i].checksum));
            h5::write_attribute(dataset.get(), "bytes", entry.buffers[i].bytes);
        }
        file.close("closing the file");
    } catch (const h5::Error& e) {
        throw Error("writing " + path.string() + ": " + e.what());
    }
    fsync_path(path);
    entry.file_bytes = size_of_file(path);
    return entry;
}

void CheckpointWriter::write_manifest(const fs::path& staging_dir, const Manifest& manifest) const {
    const fs::path path = staging_dir / manifest_file_name;
    if (const std::int64_t step = staging_step(staging_dir); step != manifest.info.step)
        throw Error("writing the manifest of step " + std::to_string(manifest.info.step) + " into " +
                    staging_dir.string() + ", the staging directory of step " + std::to_string(step));
    try {
        check_manifest(manifest);
    } catch (const Error& e) {
        throw Error("writing " + path.string() + ": " + e.what());
    }
    write_file_durably(path, to_json(manifest).dump(2) + "\n");
}

fs::path CheckpointWriter::publish(const fs::path& staging_dir) const {
    const std::int64_t step = staging_step(staging_dir);
    const fs::path staging = without_trailing_separator(staging_dir);
    // Never publish what a reader would refuse outright.
    load_manifest(staging, step);
    // The rank files and the manifest were fsynced by their writers; this makes their names
    // durable, and the fsync of root after the rename makes the rename durable.
    fsync_path(staging);
    const fs::path published = root_ / step_dir_name(step);
    if (std::error_code error; fs::exists(published, error))
        throw Error("publishing " + staging.string() + ": " + published.string() + " already exists");
    if (::rename(staging.c_str(), published.c_str()) != 0)
        throw_errno("renaming " + staging.string() + " to " + published.string());
    fsync_path(root_);
    return published;
}

std::vector<fs::path> CheckpointWriter::prune(int keep) const {
    const int wanted = std::max(keep, 1);
    int kept = 0;
    std::vector<fs::path> removed;
    for (const StepDir& checkpoint : CheckpointReader::list_complete(root_)) {
        if (kept < wanted) {
            if (manifest_opens(checkpoint)) ++kept;
            continue;
        }
        // Out of sight first, so that a crash mid-removal leaves staging debris, not a
        // half-deleted checkpoint that looks complete.
        const fs::path doomed = root_ / staging_dir_name(checkpoint.step, "pruned-" + new_attempt_tag());
        if (::rename(checkpoint.path.c_str(), doomed.c_str()) != 0)
            throw_errno("renaming " + checkpoint.path.string() + " to " + doomed.string());
        remove_tree(doomed);
        removed.push_back(checkpoint.path);
    }
    return removed;
}

std::vector<fs::path> CheckpointWriter::cleanup_incomplete() const {
    std::vector<fs::path> removed;
    for (const fs::path& dir : subdirectories(root_)) {
        if (!parse_staging_dir_name(dir.filename().string())) continue;
        remove_tree(dir);
        removed.push_back(dir);
    }
    return removed;
}

// ---------------------------------------------------------------------------------------
// Reader

std::vector<StepDir> CheckpointReader::list_complete(const fs::path& root) {
    std::vector<StepDir> complete;
    for (const fs::path& dir : subdirectories(root))
        if (const auto step = parse_step_dir_name(dir.filename().string())) complete.push_back({*step, dir});
    std::sort(complete.begin(), complete.end(),
              [](const StepDir& a, const StepDir& b) { return a.step > b.step; });
    return complete;
}

CheckpointReader CheckpointReader::open(const fs::path& step_dir) {
    fs::path dir = without_trailing_separator(step_dir);
    const auto step = parse_step_dir_name(dir.filename().string());
    if (!step) throw Error(step_dir.string() + " is not a step-<N> checkpoint directory");
    Manifest manifest = load_manifest(dir, *step);
    return CheckpointReader(std::move(dir), std::move(manifest));
}

CheckpointChoice CheckpointReader::newest_valid(const fs::path& root, const std::vector<std::string>& roles,
                                                Verification depth) {
    CheckpointChoice choice;
    for (const StepDir& candidate : list_complete(root)) {
        try {
            open(candidate.path).verify(roles, depth);
            choice.chosen = candidate;
            break;
        } catch (const Error& e) {
            choice.refused.push_back({candidate, e.what()});
        }
    }
    return choice;
}

void CheckpointReader::require_job(std::string_view job) const {
    const std::string& writer = manifest_.info.job;
    if (writer.empty() || writer == job) return;
    throw CheckpointMismatch((step_dir_ / manifest_file_name).string(), std::string(whole_file),
                             "written by job '" + writer + "', this job is '" + std::string(job) +
                                 "' (job.name): another job's checkpoint is never restored");
}

CheckpointChoice CheckpointReader::newest_for_job(const fs::path& root, std::string_view job, int dp, int tp, int pp,
                                                  const std::vector<std::string>& roles, Verification depth) {
    const auto shape_text = [](int d, int t, int p) {
        return "dp=" + std::to_string(d) + " tp=" + std::to_string(t) + " pp=" + std::to_string(p);
    };
    CheckpointChoice choice;
    for (const StepDir& candidate : list_complete(root)) {
        try {
            const CheckpointReader reader = open(candidate.path);
            reader.require_job(job);
            const auto& t = reader.manifest().info.topology;
            if (t.dp != dp || t.tp != tp || t.pp != pp)
                throw Error((candidate.path / "manifest.json").string() + ": written by a job of " +
                            shape_text(t.dp, t.tp, t.pp) + ", this job is " + shape_text(dp, tp, pp));
            reader.verify(roles, depth);
            choice.chosen = candidate;
            break;
        } catch (const Error& e) {
            choice.refused.push_back({candidate, e.what()});
        }
    }
    return choice;
}

std::string CheckpointChoice::explanation() const {
    const auto describe = [](const StepDir& checkpoint) {
        return "step " + std::to_string(checkpoint.step) + " (" + checkpoint.path.string() + ")";
    };
    std::string text;
    for (const Refusal& refusal : refused) text += "refused " + describe(refusal.checkpoint) + ": " + refusal.reason + "; ";
    if (chosen)
        text += (refused.empty() ? "newest complete checkpoint: " : "offering older ") + describe(*chosen);
    else
        text += refused.empty() ? "no complete checkpoint" : "no older complete checkpoint to offer";
    return text;
}

const RankFileEntry& CheckpointReader::rank_file(std::string_view role) const {
    for (const RankFileEntry& entry : manifest_.files)
        if (entry.role == role) return entry;
    throw CheckpointMismatch((step_dir_ / rank_file_name(role)).string(), std::string(whole_file),
                             "the checkpoint has no role '" + std::string(role) + "' (its manifest lists " +
                                 std::to_string(manifest_.files.size()) + " roles)");
}

void CheckpointReader::verify(const std::vector<std::string>& roles, Verification depth) const {
    std::vector<const RankFileEntry*> entries;
    if (roles.empty())
        for (const RankFileEntry& entry : manifest_.files) entries.push_back(&entry);
    else
        for (const std::string& role : roles) entries.push_back(&rank_file(role));

    // Scratch memory for Verification::checksums, grown to the largest buffer verified, and
    // only after the dataset itself confirmed the size the manifest records.
    std::unique_ptr<std::byte[]> scratch;
    std::uint64_t scratch_bytes = 0;
    for (const RankFileEntry* entry : entries) {
        const RankFileReader file(step_dir_, manifest_.info, *entry);
        for (const StoredBuffer& stored : entry->buffers) {
            file.open_dataset(stored);
            if (depth != Verification::checksums) continue;
            if (stored.bytes > scratch_bytes) {
                scratch = std::make_unique_for_overwrite<std::byte[]>(stored.bytes);
                scratch_bytes = stored.bytes;
            }
            file.read_verified(stored, scratch.get());
        }
        file.check_nothing_unlisted(*entry);
    }
}

void CheckpointReader::read_rank(std::string_view role, std::span<const BufferToRestore> buffers) const {
    const RankFileEntry& entry = rank_file(role);
    const fs::path path = step_dir_ / entry.file;
    std::vector<const StoredBuffer*> wanted;
    for (const BufferToRestore& buffer : buffers) {
        const StoredBuffer& stored = find_stored(path, entry, buffer.name);
        const auto mismatch = [&](const std::string& detail) {
            return CheckpointMismatch(path.string(), buffer.name, detail);
        };
        if (stored.dtype != buffer.dtype)
            throw mismatch("stored as " + std::string(dtype_name(stored.dtype)) + ", registered as " +
                           std::string(dtype_name(buffer.dtype)));
        if (stored.bytes != buffer.bytes)
            throw mismatch("stored " + std::to_string(stored.bytes) + " bytes, registered " +
                           std::to_string(buffer.bytes) + " bytes");
        if (buffer.data == nullptr && buffer.bytes > 0) throw mismatch("registered without memory to read into");
        wanted.push_back(&stored);
    }
    const RankFileReader file(step_dir_, manifest_.info, entry);
    for (std::size_t i = 0; i < buffers.size(); ++i) file.read_verified(*wanted[i], buffers[i].data);
}

CheckpointReader::DatasetLocation CheckpointReader::locate(std::string_view role, std::string_view buffer) const {
    const RankFileEntry& entry = rank_file(role);
    const fs::path path = step_dir_ / entry.file;
    const StoredBuffer& stored = find_stored(path, entry, buffer);
    const RankFileReader file(step_dir_, manifest_.info, entry);
    return {path, file.data_offset(stored), stored.bytes};
}

}  // namespace flashrec::ft
