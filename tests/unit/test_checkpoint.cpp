// HDF5 fallback checkpoints: layout, round trip, inspection with the HDF5 tools, corruption
// and mismatch errors, incomplete writes, pruning. Format: docs/checkpoint-format.md.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/flashrec.hpp"
#include "flashrec/ft/checkpoint.hpp"
#include "flashrec/ft/checksum.hpp"

namespace fs = std::filesystem;
using namespace flashrec::ft;
using flashrec::CorruptState;

namespace {

class TempDir {
public:
    TempDir() {
        std::string name = (fs::temp_directory_path() / "flashrec-checkpoint-XXXXXX").string();
        REQUIRE(mkdtemp(name.data()) != nullptr);
        path_ = name;
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    const fs::path& path() const { return path_; }

private:
    fs::path path_;
};

// One role's state: a buffer of every dtype, and an empty one. Contents depend on the seed,
// so that every role and every step holds different bytes.
struct TrainerState {
    std::vector<float> params;
    std::vector<double> adam_m;
    std::vector<std::int32_t> token_counts;
    std::vector<std::int64_t> sample_ids;
    std::vector<std::uint8_t> rng_state;
    std::vector<float> unused_bias;

    explicit TrainerState(int seed) : params(1000), adam_m(250), token_counts(64), sample_ids(33), rng_state(7) {
        for (std::size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(seed) + 0.25f * static_cast<float>(i);
        for (std::size_t i = 0; i < adam_m.size(); ++i) adam_m[i] = 1e-3 * static_cast<double>(seed * 1000 + static_cast<int>(i));
        for (std::size_t i = 0; i < token_counts.size(); ++i) token_counts[i] = seed - static_cast<std::int32_t>(i);
        for (std::size_t i = 0; i < sample_ids.size(); ++i) sample_ids[i] = (std::int64_t{seed} << 40) + static_cast<std::int64_t>(i);
        for (std::size_t i = 0; i < rng_state.size(); ++i) rng_state[i] = static_cast<std::uint8_t>(seed * 31 + static_cast<int>(i));
    }

    std::vector<BufferToSave> to_save() const {
        return {{"params", Dtype::float32, params.data(), params.size() * sizeof(float), {}},
                // As the committed snapshot would hand it over: checksum already known.
                {"adam_m", Dtype::float64, adam_m.data(), adam_m.size() * sizeof(double),
                 checksum(adam_m.data(), adam_m.size() * sizeof(double))},
                {"token_counts", Dtype::int32, token_counts.data(), token_counts.size() * sizeof(std::int32_t), {}},
                {"sample_ids", Dtype::int64, sample_ids.data(), sample_ids.size() * sizeof(std::int64_t), {}},
                {"rng_state", Dtype::uint8, rng_state.data(), rng_state.size(), {}},
                {"unused_bias", Dtype::float32, unused_bias.data(), 0, {}}};
    }

    std::vector<BufferToRestore> to_restore() {
        return {{"params", Dtype::float32, params.data(), params.size() * sizeof(float)},
                {"adam_m", Dtype::float64, adam_m.data(), adam_m.size() * sizeof(double)},
                {"token_counts", Dtype::int32, token_counts.data(), token_counts.size() * sizeof(std::int32_t)},
                {"sample_ids", Dtype::int64, sample_ids.data(), sample_ids.size() * sizeof(std::int64_t)},
                {"rng_state", Dtype::uint8, rng_state.data(), rng_state.size()},
                {"unused_bias", Dtype::float32, unused_bias.data(), 0}};
    }

    bool operator==(const TrainerState&) const = default;
};

// Same shapes as TrainerState(seed), other contents: what a restarted process starts from.
TrainerState blank_state() {
    TrainerState state(0);
    std::fill(state.params.begin(), state.params.end(), -1.0f);
    std::fill(state.adam_m.begin(), state.adam_m.end(), -1.0);
    std::fill(state.token_counts.begin(), state.token_counts.end(), -1);
    std::fill(state.sample_ids.begin(), state.sample_ids.end(), -1);
    std::fill(state.rng_state.begin(), state.rng_state.end(), std::uint8_t{0xEE});
    return state;
}

std::string role_of(int dp) { return "dp" + std::to_string(dp) + ".tp0.pp0"; }

constexpr char kJob[] = "unit-job";

CheckpointInfo info_for(std::int64_t step, int dp_size, std::string job = kJob) {
    return {step, 3, {dp_size, 1, 1}, flashrec::version(), std::move(job)};
}

std::vector<TrainerState> states_for(std::int64_t step, int dp_size) {
    std::vector<TrainerState> states;
    for (int dp = 0; dp < dp_size; ++dp) states.emplace_back(static_cast<int>(step) * 10 + dp);
    return states;
}

// The whole protocol in one process: what the MPI layer spreads over the ranks. The entries
// go through their text form, as they would through a gather.
fs::path write_checkpoint(const CheckpointWriter& writer, std::int64_t step, const std::vector<TrainerState>& ranks,
                         const std::string& job = kJob) {
    const CheckpointInfo info = info_for(step, static_cast<int>(ranks.size()), job);
    const fs::path staging = writer.create_staging_dir(step, CheckpointWriter::new_attempt_tag());
    Manifest manifest{info, {}};
    for (std::size_t dp = 0; dp < ranks.size(); ++dp) {
        const RankFileEntry entry = writer.write_rank_file(staging, role_of(static_cast<int>(dp)), info, ranks[dp].to_save());
        manifest.files.push_back(RankFileEntry::from_json_text(entry.to_json_text()));
    }
    writer.write_manifest(staging, manifest);
    return writer.publish(staging);
}

fs::path write_checkpoint(const CheckpointWriter& writer, std::int64_t step, int dp_size = 2,
                         const std::string& job = kJob) {
    return write_checkpoint(writer, step, states_for(step, dp_size), job);
}

template <class Exception, class Body>
std::optional<Exception> thrown(Body&& body) {
    try {
        body();
    } catch (const Exception& e) {
        return e;
    }
    return std::nullopt;
}

// Runs a shell command; returns what it printed (stdout and stderr) and sets `status`.
std::string run_command(const std::string& command, int& status) {
    std::string output;
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    REQUIRE(pipe != nullptr);
    std::array<char, 4096> chunk{};
    while (const std::size_t got = std::fread(chunk.data(), 1, chunk.size(), pipe)) output.append(chunk.data(), got);
    status = pclose(pipe);
    return output;
}

void flip_byte(const fs::path& file, std::uint64_t offset) {
    std::fstream stream(file, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(stream);
    stream.seekg(static_cast<std::streamoff>(offset));
    char byte = 0;
    stream.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5A);
    stream.seekp(static_cast<std::streamoff>(offset));
    stream.write(&byte, 1);
    REQUIRE(stream);
}

void write_text(const fs::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
    REQUIRE(out);
}

std::vector<std::int64_t> steps_in(const fs::path& root) {
    std::vector<std::int64_t> steps;
    for (const StepDir& checkpoint : CheckpointReader::list_complete(root)) steps.push_back(checkpoint.step);
    return steps;
}

bool has_staging_dirs(const fs::path& root) {
    for (const auto& item : fs::directory_iterator(root))
        if (item.path().filename().string().starts_with(".step-")) return true;
    return false;
}

}  // namespace

TEST_CASE("round trip: every dtype written, published and read back bit for bit") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    const std::vector<TrainerState> saved = states_for(40, 2);
    const fs::path step_dir = write_checkpoint(writer, 40, saved);

    CHECK(step_dir == root.path() / "step-00000040");
    CHECK(fs::exists(step_dir / "manifest.json"));
    CHECK(fs::exists(step_dir / "rank-dp0.tp0.pp0.h5"));
    CHECK(fs::exists(step_dir / "rank-dp1.tp0.pp0.h5"));
    CHECK_FALSE(has_staging_dirs(root.path()));
    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{40});

    const CheckpointReader reader = CheckpointReader::open(step_dir);
    const Manifest& manifest = reader.manifest();
    CHECK(manifest.info.step == 40);
    CHECK(manifest.info.topology_epoch == 3);
    CHECK(manifest.info.topology.dp == 2);
    CHECK(manifest.info.library_version == flashrec::version());
    REQUIRE(manifest.files.size() == 2);
    const RankFileEntry& entry = reader.rank_file("dp1.tp0.pp0");
    CHECK(entry.file == "rank-dp1.tp0.pp0.h5");
    CHECK(entry.file_bytes == fs::file_size(step_dir / entry.file));
    REQUIRE(entry.buffers.size() == 6);
    CHECK(entry.buffers[0].name == "params");
    CHECK(entry.buffers[0].bytes == 4000);
    CHECK(entry.buffers[0].checksum == checksum(saved[1].params.data(), 4000));

    for (int dp = 0; dp < 2; ++dp) {
        TrainerState restored = blank_state();
        CHECK_FALSE(restored == saved[dp]);
        reader.read_rank(role_of(dp), restored.to_restore());
        CHECK(restored == saved[dp]);
    }
    // A caller may restore a subset of what was saved.
    TrainerState partial = blank_state();
    reader.read_rank("dp0.tp0.pp0", std::vector<BufferToRestore>{partial.to_restore()[1]});
    CHECK(partial.adam_m == saved[0].adam_m);

    CHECK_NOTHROW(reader.verify({}, Verification::checksums));
    const CheckpointChoice choice = CheckpointReader::newest_valid(root.path(), {}, Verification::checksums);
    REQUIRE(choice.chosen);
    CHECK(choice.chosen->step == 40);
    CHECK(choice.refused.empty());
    MESSAGE(choice.explanation());
}

TEST_CASE("another job's checkpoint is refused by name; one that names no job (older) is taken") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    write_checkpoint(writer, 10, 2, kJob);
    const fs::path foreign = write_checkpoint(writer, 20, 2, "other-job");
    // The newest is another job's, of the same shape and buffers: passed over, with the reason.
    CheckpointChoice choice = CheckpointReader::newest_for_job(root.path(), kJob, 2, 1, 1, {}, Verification::checksums);
    REQUIRE(choice.chosen);
    CHECK(choice.chosen->step == 10);
    REQUIRE(choice.refused.size() == 1);
    CHECK(choice.refused[0].reason.find("written by job 'other-job', this job is 'unit-job'") != std::string::npos);
    CHECK(choice.refused[0].reason.find((foreign / "manifest.json").string()) != std::string::npos);
    const auto mismatch = thrown<CheckpointMismatch>([&] { CheckpointReader::open(foreign).require_job(kJob); });
    REQUIRE(mismatch);
    CHECK(mismatch->where() == (foreign / "manifest.json").string());
    // The rank files carry the job too.
    CHECK_NOTHROW(CheckpointReader::open(foreign).verify({}, Verification::metadata));
    // Only another job's: nothing to offer.
    CHECK_FALSE(CheckpointReader::newest_for_job(root.path(), "third-job", 2, 1, 1, {}, Verification::metadata).chosen);
    // A checkpoint from before the field existed names no job: any job may take it.
    write_checkpoint(writer, 30, 2, "");
    choice = CheckpointReader::newest_for_job(root.path(), kJob, 2, 1, 1, {}, Verification::checksums);
    REQUIRE(choice.chosen);
    CHECK(choice.chosen->step == 30);
}

TEST_CASE("rank files are plain HDF5: h5ls -r lists the datasets, h5dump -A shows the attributes") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    const fs::path step_dir = write_checkpoint(writer, 7, 1);
    const fs::path file = step_dir / "rank-dp0.tp0.pp0.h5";
    const CheckpointReader reader = CheckpointReader::open(step_dir);
    const RankFileEntry& entry = reader.rank_file("dp0.tp0.pp0");

    int status = -1;
    const std::string listing = run_command("h5ls -r '" + file.string() + "'", status);
    MESSAGE(listing);
    CHECK(status == 0);
    CHECK(listing.find("/params") != std::string::npos);
    CHECK(listing.find("Dataset {1000}") != std::string::npos);
    CHECK(listing.find("/adam_m") != std::string::npos);
    CHECK(listing.find("/rng_state") != std::string::npos);
    CHECK(listing.find("/unused_bias") != std::string::npos);

    const std::string attributes = run_command("h5dump -A '" + file.string() + "'", status);
    MESSAGE(attributes);
    CHECK(status == 0);
    for (const char* expected : {"ATTRIBUTE \"step\"", "ATTRIBUTE \"role\"", "\"dp0.tp0.pp0\"",
                                 "ATTRIBUTE \"topology_epoch\"", "ATTRIBUTE \"library_version\"",
                                 "DATASET \"params\"", "H5T_IEEE_F32LE", "DATASET \"sample_ids\"",
                                 "H5T_STD_I64LE", "ATTRIBUTE \"checksum\"", "ATTRIBUTE \"bytes\""})
        CHECK_MESSAGE(attributes.find(expected) != std::string::npos, expected);
    CHECK(attributes.find("\"" + checksum_hex(entry.buffers[0].checksum) + "\"") != std::string::npos);

    // The manifest is JSON any tool reads; python3 is there wherever setup.sh ran.
    const std::string manifest =
        run_command("python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m[\"step\"], m[\"roles\"])' '" +
                        (step_dir / "manifest.json").string() + "'",
                    status);
    CHECK(status == 0);
    CHECK(manifest.find("7 ['dp0.tp0.pp0']") != std::string::npos);
}

TEST_CASE("a flipped byte inside a dataset is CorruptState naming the file and the buffer") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    write_checkpoint(writer, 10);
    const fs::path newest = write_checkpoint(writer, 20);

    const CheckpointReader reader = CheckpointReader::open(newest);
    const CheckpointReader::DatasetLocation location = reader.locate("dp1.tp0.pp0", "adam_m");
    CHECK(location.file == newest / "rank-dp1.tp0.pp0.h5");
    CHECK(location.bytes == 2000);
    CHECK(location.offset > 0);
    CHECK(location.offset + location.bytes <= fs::file_size(location.file));
    flip_byte(location.file, location.offset + location.bytes / 2);

    TrainerState restored = blank_state();
    const auto error = thrown<CorruptState>([&] { reader.read_rank("dp1.tp0.pp0", restored.to_restore()); });
    REQUIRE(error);
    MESSAGE(std::string(error->what()));
    CHECK(error->where() == location.file.string());
    CHECK(error->buffer() == "adam_m");
    CHECK(std::string(error->what()).find("checksum mismatch") != std::string::npos);
    // The other role's file is intact.
    CHECK_NOTHROW(reader.read_rank("dp0.tp0.pp0", restored.to_restore()));

    // Metadata verification does not read the data; checksum verification does, and falls back.
    CHECK(CheckpointReader::newest_valid(root.path(), {}, Verification::metadata).chosen->step == 20);
    const CheckpointChoice choice = CheckpointReader::newest_valid(root.path(), {}, Verification::checksums);
    MESSAGE(choice.explanation());
    REQUIRE(choice.chosen);
    CHECK(choice.chosen->step == 10);
    REQUIRE(choice.refused.size() == 1);
    CHECK(choice.refused[0].checkpoint.step == 20);
    CHECK(choice.refused[0].reason.find("adam_m") != std::string::npos);
    // Only this rank's role needs to verify for this rank to restart from it.
    CHECK(CheckpointReader::newest_valid(root.path(), {"dp0.tp0.pp0"}, Verification::checksums).chosen->step == 20);
}

TEST_CASE("a corrupted or missing manifest is refused and the previous complete checkpoint offered") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    write_checkpoint(writer, 100);
    const fs::path newest = write_checkpoint(writer, 200);
    const fs::path manifest = newest / "manifest.json";

    SUBCASE("truncated") {
        std::string text;
        {
            std::ifstream in(manifest);
            std::getline(in, text, '\0');
        }
        write_text(manifest, text.substr(0, text.size() / 2));
    }
    SUBCASE("a value changed") {
        std::string text;
        {
            std::ifstream in(manifest);
            std::getline(in, text, '\0');
        }
        const std::size_t at = text.find("\"step\": 200");
        REQUIRE(at != std::string::npos);
        text.replace(at, 11, "\"step\": 201");
        write_text(manifest, text);
    }
    SUBCASE("missing") { fs::remove(manifest); }

    const auto error = thrown<CorruptState>([&] { CheckpointReader::open(newest); });
    REQUIRE(error);
    MESSAGE(std::string(error->what()));
    CHECK(error->where() == manifest.string());

    const CheckpointChoice choice = CheckpointReader::newest_valid(root.path(), {}, Verification::metadata);
    MESSAGE(choice.explanation());
    REQUIRE(choice.chosen);
    CHECK(choice.chosen->step == 100);
    REQUIRE(choice.refused.size() == 1);
    CHECK(choice.refused[0].checkpoint.path == newest);
    CHECK(choice.refused[0].reason.find("manifest.json") != std::string::npos);
    CHECK(choice.explanation().find("offering older step 100") != std::string::npos);
}

TEST_CASE("a file or dataset the manifest lists but the checkpoint lacks is CorruptState naming it") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    const CheckpointInfo info = info_for(5, 1);
    const TrainerState saved(5);
    const fs::path staging = writer.create_staging_dir(5, "test");
    RankFileEntry entry = writer.write_rank_file(staging, "dp0.tp0.pp0", info, saved.to_save());
    entry.buffers.push_back({"ghost", Dtype::float32, 16, 0});  // listed, never written
    writer.write_manifest(staging, {info, {entry}});
    const fs::path step_dir = writer.publish(staging);
    const CheckpointReader reader = CheckpointReader::open(step_dir);
    const fs::path file = step_dir / "rank-dp0.tp0.pp0.h5";

    std::vector<float> ghost(4);
    const auto missing_dataset = thrown<CorruptState>(
        [&] { reader.read_rank("dp0.tp0.pp0", std::vector<BufferToRestore>{{"ghost", Dtype::float32, ghost.data(), 16}}); });
    REQUIRE(missing_dataset);
    MESSAGE(std::string(missing_dataset->what()));
    CHECK(missing_dataset->where() == file.string());
    CHECK(missing_dataset->buffer() == "ghost");
    CHECK_THROWS_AS(reader.verify({}, Verification::metadata), CorruptState);

    fs::remove(file);
    TrainerState restored = blank_state();
    const auto missing_file = thrown<CorruptState>([&] { reader.read_rank("dp0.tp0.pp0", restored.to_restore()); });
    REQUIRE(missing_file);
    MESSAGE(std::string(missing_file->what()));
    CHECK(missing_file->where() == file.string());
}

TEST_CASE("a damaged HDF5 file is CorruptState carrying HDF5's error stack, and HDF5 prints nothing") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    const fs::path step_dir = write_checkpoint(writer, 9, 1);
    const fs::path file = step_dir / "rank-dp0.tp0.pp0.h5";
    for (std::uint64_t offset = 0; offset < 8; ++offset) flip_byte(file, offset);  // the superblock signature

    // HDF5 prints its error stack to stderr unless told not to: catch anything it prints.
    const fs::path stderr_copy = root.path() / "stderr.txt";
    std::fflush(stderr);
    const int saved_stderr = dup(2);
    const int capture = ::open(stderr_copy.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(capture >= 0);
    dup2(capture, 2);
    TrainerState restored = blank_state();
    const auto error = thrown<CorruptState>(
        [&] { CheckpointReader::open(step_dir).read_rank("dp0.tp0.pp0", restored.to_restore()); });
    std::fflush(stderr);
    dup2(saved_stderr, 2);
    ::close(capture);
    ::close(saved_stderr);

    REQUIRE(error);
    MESSAGE(std::string(error->what()));
    CHECK(error->where() == file.string());
    CHECK(std::string(error->what()).find("H5Fopen(): unable to open file") != std::string::npos);
    CHECK(fs::file_size(stderr_copy) == 0);
}

TEST_CASE("a registration that does not match the checkpoint is a clear CheckpointMismatch") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    const fs::path step_dir = write_checkpoint(writer, 3, 1);
    const fs::path file = step_dir / "rank-dp0.tp0.pp0.h5";
    const CheckpointReader reader = CheckpointReader::open(step_dir);
    std::vector<float> memory(1001);

    const auto read = [&](BufferToRestore buffer) {
        return thrown<CheckpointMismatch>(
            [&] { reader.read_rank("dp0.tp0.pp0", std::vector<BufferToRestore>{std::move(buffer)}); });
    };
    const auto smaller = read({"params", Dtype::float32, memory.data(), 999 * sizeof(float)});
    REQUIRE(smaller);
    MESSAGE(std::string(smaller->what()));
    CHECK(smaller->where() == file.string());
    CHECK(smaller->buffer() == "params");
    CHECK(std::string(smaller->what()).find("stored 4000 bytes, registered 3996 bytes") != std::string::npos);

    const auto other_type = read({"params", Dtype::int32, memory.data(), 4000});
    REQUIRE(other_type);
    MESSAGE(std::string(other_type->what()));
    CHECK(std::string(other_type->what()).find("stored as float32, registered as int32") != std::string::npos);

    const auto unknown = read({"momentum", Dtype::float32, memory.data(), 4000});
    REQUIRE(unknown);
    MESSAGE(std::string(unknown->what()));
    CHECK(unknown->buffer() == "momentum");
    CHECK(std::string(unknown->what()).find("params, adam_m") != std::string::npos);

    const auto other_role = thrown<CheckpointMismatch>([&] { reader.rank_file("dp1.tp0.pp0"); });
    REQUIRE(other_role);
    MESSAGE(std::string(other_role->what()));
    CHECK(other_role->where() == (step_dir / "rank-dp1.tp0.pp0.h5").string());
    // A checkpoint without a role this job needs is refused like a corrupt one.
    const CheckpointChoice choice = CheckpointReader::newest_valid(root.path(), {"dp1.tp0.pp0"}, Verification::metadata);
    CHECK_FALSE(choice.chosen);
    CHECK(choice.explanation().find("no older complete checkpoint") != std::string::npos);
}

TEST_CASE("an interrupted write leaves only a staging directory, ignored by readers and removed by cleanup") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    write_checkpoint(writer, 30);

    // Step 40 "crashes" after one rank file: no manifest, never published.
    const CheckpointInfo info = info_for(40, 2);
    const fs::path staging = writer.create_staging_dir(40, CheckpointWriter::new_attempt_tag());
    CHECK(staging.filename().string().starts_with(".step-00000040.tmp-"));
    CHECK(writer.create_staging_dir(40, staging.filename().string().substr(19)) == staging);  // another rank, same tag
    writer.write_rank_file(staging, "dp0.tp0.pp0", info, TrainerState(40).to_save());

    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{30});
    CHECK(CheckpointReader::newest_valid(root.path(), {}, Verification::checksums).chosen->step == 30);
    const auto unpublishable = thrown<CorruptState>([&] { writer.publish(staging); });
    REQUIRE(unpublishable);
    CHECK(unpublishable->where() == (staging / "manifest.json").string());
    CHECK(fs::exists(staging));

    const std::vector<fs::path> removed = writer.cleanup_incomplete();
    CHECK(removed == std::vector<fs::path>{staging});
    CHECK_FALSE(fs::exists(staging));
    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{30});
}

TEST_CASE("prune keeps the newest `keep` checkpoints and never the last one that opens") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    for (std::int64_t step = 1; step <= 5; ++step) write_checkpoint(writer, step, 1);

    CHECK(writer.prune(2).size() == 3);
    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{5, 4});
    CHECK(writer.prune(0).size() == 1);  // 0 means 1: the newest is never removed
    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{5});
    CHECK(writer.prune(0).empty());
    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{5});

    // The newest manifest is damaged: step 6 is kept for inspection, and step 5, the newest
    // one that opens, is kept as if it were the newest.
    const fs::path damaged = write_checkpoint(writer, 6, 1);
    write_text(damaged / "manifest.json", "{");
    CHECK(writer.prune(1).empty());
    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{6, 5});
    write_checkpoint(writer, 7, 1);
    CHECK(writer.prune(1) == std::vector<fs::path>{damaged, root.path() / "step-00000005"});
    CHECK(steps_in(root.path()) == std::vector<std::int64_t>{7});
    CHECK_FALSE(has_staging_dirs(root.path()));
}

TEST_CASE("the writer refuses what it could not publish correctly") {
    TempDir root;
    const CheckpointWriter writer(root.path());
    const CheckpointInfo info = info_for(8, 2);
    const fs::path staging = writer.create_staging_dir(8, "attempt-1");
    std::vector<float> values(10);
    const auto write_as = [&](const CheckpointInfo& as, std::string role, std::vector<BufferToSave> buffers) {
        return thrown<flashrec::Error>([&] { writer.write_rank_file(staging, role, as, buffers); });
    };
    const auto write = [&](std::string role, std::vector<BufferToSave> buffers) {
        return write_as(info, std::move(role), std::move(buffers));
    };

    const auto duplicate = write("dp0.tp0.pp0", {{"w", Dtype::float32, values.data(), 40, {}}, {"w", Dtype::float32, values.data(), 40, {}}});
    REQUIRE(duplicate);
    CHECK(std::string(duplicate->what()).find("'w' listed twice") != std::string::npos);
    const auto ragged = write("dp0.tp0.pp0", {{"w", Dtype::float64, values.data(), 12, {}}});
    REQUIRE(ragged);
    CHECK(std::string(ragged->what()).find("not a whole number of float64") != std::string::npos);
    CHECK(write("dp0/../x", {}));
    CHECK(write("dp0.tp0.pp0", {{"a/b", Dtype::uint8, values.data(), 4, {}}}));
    CHECK(write_as(info_for(9, 2), "dp0.tp0.pp0", {}));  // step 9 into step 8's directory
    CHECK_THROWS_AS(writer.write_rank_file(root.path() / "elsewhere", "dp0.tp0.pp0", info, {}), flashrec::Error);
    CHECK_THROWS_AS(writer.create_staging_dir(8, "no.dots"), flashrec::Error);

    // dp=2 needs two rank files in the manifest.
    const RankFileEntry only = writer.write_rank_file(staging, "dp0.tp0.pp0", info, {});
    const auto short_manifest = thrown<flashrec::Error>([&] { writer.write_manifest(staging, {info, {only}}); });
    REQUIRE(short_manifest);
    MESSAGE(std::string(short_manifest->what()));
    CHECK(std::string(short_manifest->what()).find("has 2 roles, but 1 rank files") != std::string::npos);
    CHECK_FALSE(fs::exists(staging / "manifest.json"));

    CHECK_THROWS_AS(RankFileEntry::from_json_text("{\"role\": 3}"), flashrec::Error);

    // The same step cannot be published twice.
    write_checkpoint(writer, 8);
    const fs::path again = writer.create_staging_dir(8, "attempt-2");
    const RankFileEntry a = writer.write_rank_file(again, "dp0.tp0.pp0", info, {});
    const RankFileEntry b = writer.write_rank_file(again, "dp1.tp0.pp0", info, {});
    writer.write_manifest(again, {info, {a, b}});
    CHECK_THROWS_AS(writer.publish(again), flashrec::Error);
}
