// The segment store: the node-local snapshot segments in /dev/shm, their slots, headers and
// verification (declared in flashrec/ft/snapshot.hpp; the format is docs/snapshots.md).
#include "flashrec/ft/snapshot.hpp"

#include "flashrec/ft/checksum.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace flashrec::ft {

namespace {

// glibc's shm_open puts "/name" at /dev/shm/name; remove_all scans it.
constexpr const char* kShmDirectory = "/dev/shm";
constexpr std::string_view kSegmentPrefix = "flashrec.";
// Not "flashrec.": no job's segment prefix matches it (slurm/epilog/flashrec-epilog reads it).
constexpr std::string_view kEpilogMarkerPrefix = "flashrec-slurm-job.";
constexpr std::size_t kMaxJobName = 100;
constexpr std::size_t kNameCapacity = 64;  // role keys and buffer names: 63 characters + NUL
constexpr std::size_t kBufferAlignment = 64;
constexpr std::size_t kDataAlignment = 4096;  // first buffer page-aligned (pinning, DMA)
constexpr std::uint64_t kMaxBuffers = 1U << 16;

constexpr std::uint64_t kMagic = 0x50414e5343455246ULL;  // "FRECSNAP" read as little-endian bytes
constexpr std::uint32_t kFormatVersion = 1;

enum SlotState : std::uint64_t { kEmpty = 0, kWriting = 1, kCommitted = 2 };

// The fixed part of a segment's header. Plain data in shared memory: the control words are
// accessed with std::atomic_ref, everything from format_version to the end of the buffer table
// is covered by header_checksum.
struct alignas(64) SegmentHeader {
    std::uint64_t magic;  // stored last at initialisation: 0 means its creator died making it
    std::uint64_t state;  // SlotState
    std::uint64_t generation;       // +1 at every begin_write: readers detect a rewrite under them
    std::uint64_t header_checksum;  // stored last at commit
    std::uint32_t format_version;
    std::uint32_t slot;
    std::uint64_t job_hash;
    std::uint64_t buffer_count;
    std::uint64_t data_offset;  // where the first buffer starts (header + table, page-aligned)
    std::uint64_t total_bytes;
    std::int64_t step;
    std::int64_t epoch;
    std::uint64_t sequence;  // commit order over both slots: breaks a tie between equal steps
    char role_key[kNameCapacity];
};

struct BufferEntry {
    char name[kNameCapacity];
    std::uint64_t bytes;
    std::uint64_t offset;    // from the start of the segment, 64-byte aligned
    std::uint64_t checksum;  // of the committed version
    // ChecksumAlgorithm of `checksum`. Zero in every segment made before it was recorded (the
    // word was reserved and zero-filled): XXH3-64, so those still verify.
    std::uint64_t checksum_algorithm;
};

// The format is shared between processes and builds (docs/snapshots.md): pin it.
static_assert(sizeof(SegmentHeader) == 192 && offsetof(SegmentHeader, step) == 72 &&
              offsetof(SegmentHeader, role_key) == 96);
static_assert(sizeof(BufferEntry) == 96 && offsetof(BufferEntry, checksum_algorithm) == 88);
constexpr std::size_t kCoveredStart = offsetof(SegmentHeader, format_version);
static_assert(kCoveredStart == 32);

std::size_t table_end(std::uint64_t buffer_count) {
    return sizeof(SegmentHeader) + static_cast<std::size_t>(buffer_count) * sizeof(BufferEntry);
}

std::size_t round_up(std::size_t value, std::size_t alignment) {
    return (value + alignment - 1) / alignment * alignment;
}

SegmentHeader& header_of(std::byte* base) { return *reinterpret_cast<SegmentHeader*>(base); }
const SegmentHeader& header_of(const std::byte* base) {
    return *reinterpret_cast<const SegmentHeader*>(base);
}
BufferEntry* entries_of(std::byte* base) {
    return reinterpret_cast<BufferEntry*>(base + sizeof(SegmentHeader));
}
const BufferEntry* entries_of(const std::byte* base) {
    return reinterpret_cast<const BufferEntry*>(base + sizeof(SegmentHeader));
}

// Loads of control words in a read-only mapping: the object is never written through this
// reference, atomic_ref merely needs a non-const one.
std::uint64_t load_acquire(const std::uint64_t& word) {
    return std::atomic_ref<std::uint64_t>(const_cast<std::uint64_t&>(word))
        .load(std::memory_order_acquire);
}
void store_release(std::uint64_t& word, std::uint64_t value) {
    std::atomic_ref<std::uint64_t>(word).store(value, std::memory_order_release);
}

std::string_view fixed_name(const char (&field)[kNameCapacity]) {
    return {field, ::strnlen(field, kNameCapacity - 1)};
}

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string human_bytes(std::size_t bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
    return text;
}

std::string shm_space() {
    struct statvfs fs {};
    if (::statvfs(kShmDirectory, &fs) != 0) return std::string(kShmDirectory) + ": size unknown";
    return std::string(kShmDirectory) + " has " +
           human_bytes(static_cast<std::size_t>(fs.f_bavail) * fs.f_frsize) + " free of " +
           human_bytes(static_cast<std::size_t>(fs.f_blocks) * fs.f_frsize);
}

std::string errno_text(const char* call, int error) {
    return std::string(call) + ": " + std::strerror(error);
}

bool valid_name_chars(std::string_view text, std::string_view extra) {
    return std::all_of(text.begin(), text.end(), [&](char c) {
        const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        return alnum || extra.find(c) != std::string_view::npos;
    });
}

void validate_layout(const SnapshotLayout& layout) {
    if (layout.size() > kMaxBuffers)
        throw Error("snapshot layout has " + std::to_string(layout.size()) + " buffers, at most " +
                    std::to_string(kMaxBuffers) + " are supported");
    for (std::size_t i = 0; i < layout.size(); ++i) {
        const std::string& name = layout[i].name;
        const bool printable = std::all_of(name.begin(), name.end(),
                                           [](char c) { return c >= 0x20 && c < 0x7f; });
        if (name.empty() || name.size() >= kNameCapacity || !printable)
            throw Error("snapshot buffer " + std::to_string(i) + " name " + in_quotes(name) +
                        " is invalid: use 1-63 printable ASCII characters");
        for (std::size_t j = 0; j < i; ++j)
            if (layout[j].name == name)
                throw Error("snapshot layout names buffer " + in_quotes(name) + " twice");
    }
}

struct Placement {
    std::vector<std::size_t> offsets;
    std::size_t data_offset = 0;
    std::size_t total_bytes = 0;
};

Placement place(const SnapshotLayout& layout) {
    Placement placement;
    placement.data_offset = round_up(table_end(layout.size()), kDataAlignment);
    std::size_t cursor = placement.data_offset;
    for (const BufferSpec& buffer : layout) {
        if (buffer.bytes > std::numeric_limits<std::size_t>::max() / 2 - cursor)
            throw Error("snapshot buffer " + in_quotes(buffer.name) + " size " +
                        std::to_string(buffer.bytes) + " is too large");
        placement.offsets.push_back(cursor);
        cursor = round_up(cursor + buffer.bytes, kBufferAlignment);
    }
    placement.total_bytes = cursor;
    return placement;
}

std::uint64_t job_hash(std::string_view job) { return checksum(job.data(), job.size()); }

bool initialised(const ShmSegment& segment) {
    return segment.size() >= sizeof(SegmentHeader) &&
           load_acquire(header_of(segment.data()).magic) == kMagic;
}

// The identity and layout an existing, initialised segment must have. Throws
// SnapshotLayoutMismatch naming the first difference. Bounds are checked before the table is read.
void check_segment(const ShmSegment& segment, std::string_view job, std::string_view role_key,
                   int slot, const SnapshotLayout* expected) {
    const std::byte* base = segment.data();
    const SegmentHeader& header = header_of(base);
    const auto mismatch = [&](std::string buffer, const std::string& detail) {
        return SnapshotLayoutMismatch(segment.name(), std::move(buffer), detail);
    };
    if (header.format_version != kFormatVersion)
        throw mismatch("", "format version " + std::to_string(header.format_version) +
                               ", this build reads version " + std::to_string(kFormatVersion));
    if (header.job_hash != job_hash(job)) throw mismatch("", "it belongs to another job");
    if (fixed_name(header.role_key) != role_key)
        throw mismatch("", "it holds role " + in_quotes(fixed_name(header.role_key)) + ", not " +
                               in_quotes(role_key));
    if (header.slot != static_cast<std::uint32_t>(slot))
        throw mismatch("", "it is slot " + std::to_string(header.slot) + ", not slot " +
                               std::to_string(slot));
    if (header.buffer_count > kMaxBuffers || table_end(header.buffer_count) > segment.size() ||
        header.total_bytes > segment.size())
        throw mismatch("", "its header is corrupt (buffer count " +
                               std::to_string(header.buffer_count) + ", total bytes " +
                               std::to_string(header.total_bytes) + ", segment size " +
                               std::to_string(segment.size()) + ")");
    const BufferEntry* table = entries_of(base);
    for (std::uint64_t i = 0; i < header.buffer_count; ++i)
        if (table[i].offset > header.total_bytes ||
            table[i].bytes > header.total_bytes - table[i].offset)
            throw mismatch(std::string(fixed_name(table[i].name)),
                           "its header is corrupt (buffer extends past the segment)");
    if (expected == nullptr) return;

    const std::size_t there = header.buffer_count;
    const std::string counts = " (it has " + std::to_string(there) + " buffers, the caller expects " +
                               std::to_string(expected->size()) + ")";
    const auto described = [](std::string_view name, std::uint64_t bytes) {
        return in_quotes(name) + " (" + std::to_string(bytes) + " bytes)";
    };
    for (std::size_t i = 0; i < std::max(there, expected->size()); ++i) {
        const std::string index = "buffer " + std::to_string(i);
        if (i >= there) {
            const std::string& missing = (*expected)[i].name;
            throw mismatch(missing, index + " " + in_quotes(missing) + " is missing there" + counts);
        }
        const std::string_view name = fixed_name(table[i].name);
        if (i >= expected->size())
            throw mismatch(std::string(name), "it has an extra " + index + " " + in_quotes(name) + counts);
        const BufferSpec& want = (*expected)[i];
        if (name != want.name)
            throw mismatch(want.name, index + " is " + described(name, table[i].bytes) +
                                          " there, the caller expects " + described(want.name, want.bytes));
        if (table[i].bytes != want.bytes)
            throw mismatch(want.name, "buffer " + in_quotes(name) + " is " + std::to_string(table[i].bytes) +
                                          " bytes there, the caller expects " + std::to_string(want.bytes));
    }
}

void initialise(ShmSegment& segment, std::string_view job, std::string_view role_key, int slot,
                const SnapshotLayout& layout, const Placement& placement) {
    std::byte* base = segment.data();
    SegmentHeader& header = header_of(base);  // fresh from posix_fallocate: all zero
    header.format_version = kFormatVersion;
    header.slot = static_cast<std::uint32_t>(slot);
    header.job_hash = job_hash(job);
    header.buffer_count = layout.size();
    header.data_offset = placement.data_offset;
    header.total_bytes = placement.total_bytes;
    header.step = -1;
    header.epoch = -1;
    std::memcpy(header.role_key, role_key.data(), role_key.size());
    BufferEntry* table = entries_of(base);
    for (std::size_t i = 0; i < layout.size(); ++i) {
        std::memcpy(table[i].name, layout[i].name.data(), layout[i].name.size());
        table[i].bytes = layout[i].bytes;
        table[i].offset = placement.offsets[i];
    }
    store_release(header.state, kEmpty);
    store_release(header.magic, kMagic);  // last: from now on the segment is "ours and made"
}

// ---- reading ------------------------------------------------------------------------------

struct SlotSource {
    const ShmSegment* segment;  // nullptr: the segment does not exist
    std::string name;
};

struct EntryCopy {
    std::string name;
    std::uint64_t bytes;
    std::uint64_t offset;
    std::uint64_t checksum;
    std::uint64_t algorithm;  // as stored: a value this build does not know fails verification
};

// What the header of one slot says, read from a private copy so that it cannot change
// between verification and use.
struct HeaderRead {
    bool committed = false;  // state committed and header checksum verified
    std::string status;      // "slot 0 holds step 4 (epoch 1)", "slot 1 is empty", ...
    std::int64_t step = -1;
    std::int64_t epoch = -1;
    std::uint64_t sequence = 0;
    std::uint64_t generation = 0;
    std::vector<EntryCopy> entries;
};

HeaderRead read_header(const SlotSource& source, int slot) {
    HeaderRead read;
    const std::string prefix = "slot " + std::to_string(slot);
    if (source.segment == nullptr) {
        read.status = prefix + ": segment " + source.name + " does not exist";
        return read;
    }
    const ShmSegment& segment = *source.segment;
    if (!initialised(segment)) {
        read.status = prefix + ": segment " + source.name +
                      " is not initialised (being created, or its creator died while creating it)";
        return read;
    }
    const std::byte* base = segment.data();
    const SegmentHeader& live = header_of(base);
    // Generation before state (a seqlock): a write that starts after this load is seen by the
    // final generation check in verify_buffers.
    read.generation = load_acquire(live.generation);
    const std::uint64_t state = load_acquire(live.state);
    if (state == kEmpty) {
        read.status = prefix + " is empty";
        return read;
    }
    if (state == kWriting) {
        read.status = prefix + " is being written (or its writer died while writing it)";
        return read;
    }
    if (state != kCommitted) {
        read.status = prefix + " has an unknown state " + std::to_string(state);
        return read;
    }
    const std::uint64_t stored = load_acquire(live.header_checksum);
    const std::uint64_t count = live.buffer_count;
    if (count > kMaxBuffers || table_end(count) > segment.size()) {
        read.status = prefix + ": header is corrupt (buffer count " + std::to_string(count) + ")";
        return read;
    }
    std::vector<std::byte> copy(base, base + table_end(count));
    const std::uint64_t computed = checksum(copy.data() + kCoveredStart, copy.size() - kCoveredStart);
    if (computed != stored) {
        std::atomic_thread_fence(std::memory_order_acquire);
        read.status = load_acquire(live.generation) != read.generation
                          ? prefix + " is being written (it was rewritten while being read)"
                          : prefix + ": header checksum mismatch (stored " + checksum_hex(stored) +
                                ", computed " + checksum_hex(computed) + ")";
        return read;
    }
    const SegmentHeader& header = header_of(copy.data());
    const BufferEntry* table = entries_of(copy.data());
    for (std::uint64_t i = 0; i < count; ++i) {
        const BufferEntry& entry = table[i];
        if (entry.offset > segment.size() || entry.bytes > segment.size() - entry.offset) {
            read.status = prefix + ": buffer " + in_quotes(fixed_name(entry.name)) +
                          " extends past the end of the segment";
            return read;
        }
        read.entries.push_back({std::string(fixed_name(entry.name)), entry.bytes, entry.offset,
                                entry.checksum, entry.checksum_algorithm});
    }
    read.committed = true;
    read.step = header.step;
    read.epoch = header.epoch;
    read.sequence = header.sequence;
    read.status = prefix + " holds step " + std::to_string(read.step) + " (epoch " +
                  std::to_string(read.epoch) + ")";
    return read;
}

// Where a read copies the buffers it verifies (empty: nowhere, verification only).
using CopyOut = std::span<const std::span<std::byte>>;

// The checksum of `bytes` by `algorithm`, copying them to `to` in the same pass when `to` is
// given: piece by piece, each hashed from cache right after it was copied, so the source is
// read once.
std::uint64_t checksum_copying(ChecksumAlgorithm algorithm, const std::byte* bytes, std::size_t n, std::byte* to) {
    if (to == nullptr) return checksum_by(algorithm, bytes, n);
    constexpr std::size_t kPiece = 256 << 10;
    const auto copy_and_hash = [&](auto& state) {
        for (std::size_t off = 0; off < n; off += kPiece) {
            const std::size_t m = std::min(kPiece, n - off);
            std::memcpy(to + off, bytes + off, m);
            state.update(to + off, m);
        }
    };
    if (algorithm == ChecksumAlgorithm::xxh3_64_blocks) {
        BlockChecksumStream state;
        copy_and_hash(state);
        return state.finish();
    }
    ChecksumStream state;
    copy_and_hash(state);
    return state.digest();
}

// Checks every buffer of a committed slot against its checksum (copying it to `copy_out[i]` in
// the same pass when given); on success fills `view`. Returns the problem otherwise.
std::optional<std::string> verify_buffers(const SlotSource& source, int slot,
                                          const HeaderRead& header, SnapshotView& view,
                                          CopyOut copy_out = {}) {
    const std::byte* base = source.segment->data();
    const std::string prefix = "slot " + std::to_string(slot);
    if (!copy_out.empty() && copy_out.size() != header.entries.size())
        return prefix + " has " + std::to_string(header.entries.size()) + " buffers, " +
               std::to_string(copy_out.size()) + " destinations were given";
    std::vector<BufferView> buffers;
    for (const EntryCopy& entry : header.entries) {
        std::byte* to = nullptr;
        if (!copy_out.empty()) {
            const auto& dst = copy_out[buffers.size()];
            if (dst.size() != entry.bytes)
                return prefix + ": buffer " + in_quotes(entry.name) + " has " +
                       std::to_string(entry.bytes) + " bytes, its destination " +
                       std::to_string(dst.size());
            to = dst.data();
        }
        const std::optional<ChecksumAlgorithm> algorithm = checksum_algorithm_from(entry.algorithm);
        if (!algorithm)
            return prefix + ": buffer " + in_quotes(entry.name) + " has checksum algorithm " +
                   std::to_string(entry.algorithm) + ", which this build does not know (a newer build wrote it?)";
        const std::uint64_t computed = checksum_copying(*algorithm, base + entry.offset, entry.bytes, to);
        if (computed != entry.checksum)
            return prefix + ": buffer " + in_quotes(entry.name) + " checksum mismatch (stored " +
                   checksum_hex(entry.checksum) + ", computed " + checksum_hex(computed) +
                   (*algorithm == ChecksumAlgorithm::xxh3_64 ? std::string()
                                                             : std::string(", ") + checksum_algorithm_name(*algorithm)) +
                   ")";
        // Names from the mapping, not from the header copy, so the view outlives this call.
        const BufferEntry& live = entries_of(base)[buffers.size()];
        buffers.push_back({fixed_name(live.name), {base + entry.offset, entry.bytes}});
    }
    const SegmentHeader& live = header_of(base);
    std::atomic_thread_fence(std::memory_order_acquire);
    const std::uint64_t generation = load_acquire(live.generation);
    if (generation != header.generation || load_acquire(live.state) != kCommitted)
        return prefix + " was rewritten while it was being read (generation " +
               std::to_string(header.generation) + " -> " + std::to_string(generation) + ")";
    view.ok = true;
    view.slot = slot;
    view.step = header.step;
    view.epoch = header.epoch;
    view.buffers = std::move(buffers);
    view.generation_word = &live.generation;
    view.generation = header.generation;
    return std::nullopt;
}

// Committed slots, newest first (step, then commit order).
std::vector<int> newest_first(const std::array<HeaderRead, 2>& headers) {
    std::vector<int> order;
    for (int slot = 0; slot < 2; ++slot)
        if (headers[slot].committed) order.push_back(slot);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
        return std::pair(headers[a].step, headers[a].sequence) >
               std::pair(headers[b].step, headers[b].sequence);
    });
    return order;
}

std::string joined_status(const SnapshotView& view) {
    return view.slot_status[0] + ", " + view.slot_status[1];
}

// The newest verified version among both slots (step == nullopt), or the version of `step`.
SnapshotView read_version(const std::array<SlotSource, 2>& sources, std::optional<std::int64_t> step,
                          CopyOut copy_out = {}) {
    const std::array<HeaderRead, 2> headers{read_header(sources[0], 0), read_header(sources[1], 1)};
    SnapshotView view;
    view.slot_status = {headers[0].status, headers[1].status};
    for (const int slot : newest_first(headers)) {
        if (step && headers[slot].step != *step) continue;
        if (auto problem = verify_buffers(sources[slot], slot, headers[slot], view, copy_out)) {
            view.slot_status[slot] = *problem;
            continue;
        }
        return view;
    }
    view.problem = step ? "step " + std::to_string(*step) + " is not held: " + joined_status(view)
                        : "no committed version: " + joined_status(view);
    // A slot that holds the step but failed verification is the precise answer.
    if (step)
        for (int slot = 0; slot < 2; ++slot)
            if (headers[slot].committed && headers[slot].step == *step)
                view.problem = "step " + std::to_string(*step) + " is not usable: " +
                               view.slot_status[slot];
    return view;
}

SnapshotStatus status_only(SnapshotView view) {
    SnapshotStatus status = std::move(view);  // drops the spans: they would outlive the mapping
    return status;
}

[[noreturn]] void throw_allocation(const std::string& name, std::size_t bytes, const char* call, int error) {
    throw SnapshotAllocationError(name, bytes, errno_text(call, error) + " (" + shm_space() + ")");
}

}  // namespace

// ---- naming and lifetime ------------------------------------------------------------------

void validate_job_name(std::string_view job) {
    if (job.empty() || job.size() > kMaxJobName || !valid_name_chars(job, "_-"))
        throw Error("snapshot job name " + in_quotes(job) + " is invalid: use 1-" +
                    std::to_string(kMaxJobName) +
                    " characters of [A-Za-z0-9_-] (no '/', no '.', no spaces)");
}

void validate_role_key(std::string_view role_key) {
    if (role_key.empty() || role_key.size() >= kNameCapacity || !valid_name_chars(role_key, "_.@-"))
        throw Error("snapshot role key " + in_quotes(role_key) +
                    " is invalid: use 1-63 characters of [A-Za-z0-9_.@-] (no '/', no spaces)");
}

std::string segment_name(std::string_view job, std::string_view role_key, int slot) {
    validate_job_name(job);
    validate_role_key(role_key);
    if (slot != 0 && slot != 1) throw Error("snapshot slot " + std::to_string(slot) + " is not 0 or 1");
    return "/" + std::string(kSegmentPrefix) + std::string(job) + "." + std::string(role_key) + "." +
           std::to_string(slot);
}

std::string peer_role_key(std::string_view owner, std::string_view holder) {
    validate_role_key(owner);
    validate_role_key(holder);
    std::string key = std::string(owner) + "@" + std::string(holder);
    validate_role_key(key);
    return key;
}

std::vector<std::string> list_segments(std::string_view job) {
    validate_job_name(job);  // an empty job must never match every job's prefix
    const std::string prefix = std::string(kSegmentPrefix) + std::string(job) + ".";
    std::vector<std::string> names;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(kShmDirectory, error)) {
        const std::string file = entry.path().filename().string();
        if (file.starts_with(prefix)) names.push_back("/" + file);
    }
    std::sort(names.begin(), names.end());
    return names;
}

bool unlink_segment(const std::string& name) {
    if (::shm_unlink(name.c_str()) == 0) return true;
    if (errno == ENOENT) return false;
    throw Error("snapshot segment " + name + ": " + errno_text("shm_unlink", errno));
}

int unlink_snapshot(std::string_view job, std::string_view role_key) {
    int removed = 0;
    for (int slot = 0; slot < 2; ++slot) removed += unlink_segment(segment_name(job, role_key, slot));
    return removed;
}

int remove_all(std::string_view job) {
    int removed = 0;
    for (const std::string& name : list_segments(job)) removed += unlink_segment(name);
    if (const std::string marker = epilog_marker_path(job); !marker.empty()) ::unlink(marker.c_str());
    return removed;
}

std::string epilog_marker_path(std::string_view job) {
    validate_job_name(job);
    const char* id = std::getenv("SLURM_JOB_ID");
    const std::string_view slurm_job = id ? id : "";
    // Slurm's job ids are numbers (an array task's SLURM_JOB_ID is its own number too).
    if (slurm_job.empty() || slurm_job.size() > 20 ||
        !std::all_of(slurm_job.begin(), slurm_job.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return {};
    return std::string(kShmDirectory) + "/" + std::string(kEpilogMarkerPrefix) + std::string(slurm_job) + "." +
           std::string(job);
}

bool mark_for_epilog(std::string_view job) {
    const std::string path = epilog_marker_path(job);
    if (path.empty()) return false;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return false;
    ::close(fd);
    return true;
}

// ---- errors -------------------------------------------------------------------------------

SnapshotAllocationError::SnapshotAllocationError(std::string segment, std::size_t bytes,
                                                 const std::string& detail)
    : Error("snapshot segment " + segment + ": cannot allocate " + std::to_string(bytes) +
            " bytes (" + human_bytes(bytes) + ") of shared memory: " + detail),
      segment_(std::move(segment)),
      bytes_(bytes) {}

SnapshotLayoutMismatch::SnapshotLayoutMismatch(std::string segment, std::string buffer,
                                               const std::string& detail)
    : Error("snapshot segment " + segment + " does not match what the caller expects: " + detail),
      segment_(std::move(segment)),
      buffer_(std::move(buffer)) {}

// ---- ShmSegment ----------------------------------------------------------------------------

ShmSegment ShmSegment::create(const std::string& name, std::size_t bytes) {
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST || errno == EACCES || errno == EINVAL || errno == ENAMETOOLONG)
            throw Error("snapshot segment " + name + ": " + errno_text("shm_open", errno));
        throw_allocation(name, bytes, "shm_open", errno);
    }
    // Until the mapping exists, a failure closes and unlinks what this call created.
    struct Undo {
        const std::string& name;
        int fd;
        bool armed = true;
        ~Undo() {
            if (!armed) return;
            ::close(fd);
            ::shm_unlink(name.c_str());
        }
    } undo{name, fd};
    if (bytes > static_cast<std::size_t>(std::numeric_limits<off_t>::max()))
        throw SnapshotAllocationError(name, bytes, "size exceeds off_t");
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw_allocation(name, bytes, "ftruncate", errno);
    // tmpfs reserves the pages now; without this an over-large segment "succeeds" and the
    // first write past free memory gets SIGBUS.
    if (const int error = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); error != 0)
        throw_allocation(name, bytes, "posix_fallocate", error);
    // MAP_POPULATE: fault the pages in now, so the per-step copy runs at memcpy speed.
    void* address = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (address == MAP_FAILED) throw_allocation(name, bytes, "mmap", errno);
    undo.armed = false;
    return ShmSegment(name, fd, address, bytes, true);
}

void ShmSegment::rename(const std::string& name) {
    const std::string from = kShmDirectory + name_, to = kShmDirectory + name;
    if (::rename(from.c_str(), to.c_str()) != 0)
        throw Error("snapshot segment " + name_ + " -> " + name + ": " + errno_text("rename", errno));
    name_ = name;
}

std::optional<ShmSegment> ShmSegment::open(const std::string& name, Access access) {
    const bool writable = access == Access::read_write;
    const int fd = ::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
    if (fd < 0) {
        if (errno == ENOENT) return std::nullopt;
        throw Error("snapshot segment " + name + ": " + errno_text("shm_open", errno));
    }
    ShmSegment segment(name, fd, nullptr, 0, writable);  // owns fd from here
    struct stat info {};
    if (::fstat(fd, &info) != 0) throw Error("snapshot segment " + name + ": " + errno_text("fstat", errno));
    segment.size_ = static_cast<std::size_t>(info.st_size);
    if (segment.size_ == 0) return segment;  // nothing to map: its creator died before sizing it
    const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
    const int flags = writable ? MAP_SHARED | MAP_POPULATE : MAP_SHARED;
    void* address = ::mmap(nullptr, segment.size_, protection, flags, fd, 0);
    if (address == MAP_FAILED) throw_allocation(name, segment.size_, "mmap", errno);
    segment.address_ = address;
    return segment;
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      fd_(std::exchange(other.fd_, -1)),
      address_(std::exchange(other.address_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      writable_(other.writable_) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
    if (this != &other) {
        release();
        name_ = std::move(other.name_);
        fd_ = std::exchange(other.fd_, -1);
        address_ = std::exchange(other.address_, nullptr);
        size_ = std::exchange(other.size_, 0);
        writable_ = other.writable_;
    }
    return *this;
}

ShmSegment::~ShmSegment() { release(); }

void ShmSegment::release() noexcept {
    if (address_ != nullptr) ::munmap(address_, size_);
    if (fd_ >= 0) ::close(fd_);
    address_ = nullptr;
    fd_ = -1;
    size_ = 0;
}

// ---- views ----------------------------------------------------------------------------------

namespace {
template <typename Buffers>
auto find_buffer(const Buffers& buffers, std::string_view name, const char* what) {
    for (const auto& buffer : buffers)
        if (buffer.name == name) return buffer.bytes;
    throw Error(std::string(what) + " has no buffer " + in_quotes(name));
}
}  // namespace

std::span<const std::byte> SnapshotView::buffer(std::string_view name) const {
    return find_buffer(buffers, name, "snapshot view");
}

bool SnapshotView::unchanged() const {
    if (!ok || generation_word == nullptr) return false;
    std::atomic_thread_fence(std::memory_order_acquire);  // the caller's reads happen before
    return load_acquire(*generation_word) == generation;
}

std::span<std::byte> WriteView::buffer(std::string_view name) const {
    return find_buffer(buffers, name, "snapshot write view");
}

std::size_t snapshot_segment_bytes(const SnapshotLayout& layout) {
    validate_layout(layout);
    return place(layout).total_bytes;
}

// ---- SnapshotStore ------------------------------------------------------------------------

struct SnapshotStore::ChunkHashers {
    std::vector<ChecksumStream> states;
    std::vector<std::size_t> hashed;  // bytes hashed in order so far
    std::vector<bool> in_order;       // false once a chunk arrived out of order
    std::vector<std::optional<BufferChecksum>> given;  // set_checksum: computed at the source

    explicit ChunkHashers(std::size_t count)
        : states(count), hashed(count, 0), in_order(count, true), given(count) {}
    void reset() {
        for (std::size_t i = 0; i < states.size(); ++i) {
            states[i].reset();
            hashed[i] = 0;
            in_order[i] = true;
            given[i].reset();
        }
    }
};

SnapshotStore::SnapshotStore(std::string job, std::string role_key, SnapshotLayout layout,
                             const BlankSource& blank)
    : job_(std::move(job)), role_key_(std::move(role_key)), layout_(std::move(layout)) {
    validate_layout(layout_);
    const Placement placement = place(layout_);
    std::vector<std::string> created;  // removed again if this constructor fails
    try {
        for (int slot = 0; slot < 2; ++slot) {
            const std::string name = segment_name(job_, role_key_, slot);
            auto existing = ShmSegment::open(name, ShmSegment::Access::read_write);
            if (existing && initialised(*existing)) {
                check_segment(*existing, job_, role_key_, slot, &layout_);
                slots_[slot] = std::move(*existing);
                continue;
            }
            // Absent, or half-made by a creator that died: it holds nothing, make it anew.
            if (existing) unlink_segment(name);
            std::optional<ShmSegment> made = blank ? blank(placement.total_bytes) : std::nullopt;
            if (made) made->rename(name);
            slots_[slot] = made ? std::move(*made) : ShmSegment::create(name, placement.total_bytes);
            created.push_back(name);
            initialise(slots_[slot], job_, role_key_, slot, layout_, placement);
        }
        if (!created.empty()) (void)mark_for_epilog(job_);
        hashers_ = std::make_unique<ChunkHashers>(layout_.size());
    } catch (...) {
        for (const std::string& name : created) ::shm_unlink(name.c_str());
        throw;
    }
}

SnapshotStore::SnapshotStore(SnapshotStore&&) noexcept = default;
SnapshotStore& SnapshotStore::operator=(SnapshotStore&&) noexcept = default;
SnapshotStore::~SnapshotStore() = default;

namespace {
std::array<SlotSource, 2> sources_of(const std::array<ShmSegment, 2>& slots) {
    if (slots[0].data() == nullptr) throw Error("snapshot store used after it was moved from");
    return {SlotSource{&slots[0], slots[0].name()}, SlotSource{&slots[1], slots[1].name()}};
}
}  // namespace

WriteView SnapshotStore::begin_write(std::int64_t step, std::int64_t epoch) {
    const auto sources = sources_of(slots_);
    const std::array<HeaderRead, 2> headers{read_header(sources[0], 0), read_header(sources[1], 1)};
    // Keep the version this one builds on: the newest committed older than `step` (after a
    // rollback a newer, abandoned version is the one to overwrite), else the newest.
    const std::vector<int> committed = newest_first(headers);
    int keep = -1;
    for (const int slot : committed)
        if (headers[slot].step < step) {
            keep = slot;
            break;
        }
    if (keep < 0 && !committed.empty()) keep = committed.front();
    const int stage = keep == 0 ? 1 : 0;

    SegmentHeader& header = header_of(slots_[stage].data());
    std::atomic_ref<std::uint64_t>(header.state).store(kWriting);
    std::atomic_ref<std::uint64_t>(header.generation).fetch_add(1);
    std::atomic_ref<std::uint64_t>(header.header_checksum).store(0);
    header.step = -1;
    // The marks above are visible before any byte the caller writes into the slot.
    std::atomic_thread_fence(std::memory_order_seq_cst);

    writing_slot_ = stage;
    writing_step_ = step;
    writing_epoch_ = epoch;
    hashers_->reset();

    WriteView view;
    view.slot = stage;
    view.step = step;
    view.epoch = epoch;
    std::byte* base = slots_[stage].data();
    const BufferEntry* table = entries_of(base);
    for (std::size_t i = 0; i < layout_.size(); ++i)
        view.buffers.push_back({fixed_name(table[i].name), {base + table[i].offset, table[i].bytes}});
    return view;
}

void SnapshotStore::require_write_in_progress(const char* call) const {
    if (!hashers_) throw Error("snapshot store used after it was moved from");
    if (writing_slot_ < 0) throw Error("snapshot " + role_key_ + ": " + call + " without begin_write()");
}

void SnapshotStore::note_written(std::size_t index, std::size_t offset, std::size_t bytes) {
    require_write_in_progress("note_written()");
    if (index >= layout_.size() || offset > layout_[index].bytes || bytes > layout_[index].bytes - offset)
        throw Error("snapshot " + role_key_ + ": note_written(" + std::to_string(index) + ", " +
                    std::to_string(offset) + ", " + std::to_string(bytes) + ") is outside the layout");
    if (!hashers_->in_order[index] || hashers_->given[index]) return;
    if (offset != hashers_->hashed[index]) {
        hashers_->in_order[index] = false;  // commit() hashes this buffer whole
        return;
    }
    const std::byte* base = slots_[writing_slot_].data();
    const std::byte* chunk = base + entries_of(base)[index].offset + offset;
    hashers_->states[index].update(chunk, bytes);
    hashers_->hashed[index] += bytes;
}

void SnapshotStore::set_checksum(std::size_t index, BufferChecksum checksum) {
    require_write_in_progress("set_checksum()");
    if (index >= layout_.size())
        throw Error("snapshot " + role_key_ + ": set_checksum(" + std::to_string(index) + ") of a layout of " +
                    std::to_string(layout_.size()) + " buffers");
    if (!checksum_algorithm_from(static_cast<std::uint64_t>(checksum.algorithm)))
        throw Error("snapshot " + role_key_ + ": set_checksum(" + std::to_string(index) + ") with an unknown algorithm");
    hashers_->given[index] = checksum;
}

void SnapshotStore::commit() {
    require_write_in_progress("commit()");
    std::byte* base = slots_[writing_slot_].data();
    SegmentHeader& header = header_of(base);
    BufferEntry* table = entries_of(base);
    for (std::size_t i = 0; i < layout_.size(); ++i) {
        if (const auto& given = hashers_->given[i]) {
            table[i].checksum = given->value;
            table[i].checksum_algorithm = static_cast<std::uint64_t>(given->algorithm);
            continue;
        }
        const bool hashed_in_chunks = hashers_->in_order[i] && hashers_->hashed[i] == table[i].bytes;
        table[i].checksum = hashed_in_chunks ? hashers_->states[i].digest()
                                             : checksum(base + table[i].offset, table[i].bytes);
        table[i].checksum_algorithm = static_cast<std::uint64_t>(ChecksumAlgorithm::xxh3_64);
    }
    const SegmentHeader& other = header_of(slots_[1 - writing_slot_].data());
    header.step = writing_step_;
    header.epoch = writing_epoch_;
    header.sequence = std::max(header.sequence, other.sequence) + 1;
    std::atomic_thread_fence(std::memory_order_release);
    const auto* covered = reinterpret_cast<const std::byte*>(&header) + kCoveredStart;
    store_release(header.header_checksum, checksum(covered, table_end(layout_.size()) - kCoveredStart));
    store_release(header.state, kCommitted);
    writing_slot_ = -1;
}

SnapshotView SnapshotStore::newest_committed() const {
    return read_version(sources_of(slots_), std::nullopt);
}

SnapshotView SnapshotStore::committed(std::int64_t step) const {
    return read_version(sources_of(slots_), step);
}

SnapshotView SnapshotStore::copy_committed(std::int64_t step,
                                           std::span<const std::span<std::byte>> destinations) const {
    return read_version(sources_of(slots_), step, destinations);
}

SnapshotStatus SnapshotStore::verify(std::optional<std::int64_t> step) const {
    return status_only(read_version(sources_of(slots_), step));
}

std::size_t SnapshotStore::bytes() const { return slots_[0].size() + slots_[1].size(); }

std::array<std::string, 2> SnapshotStore::segment_names() const {
    return {segment_name(job_, role_key_, 0), segment_name(job_, role_key_, 1)};
}

// ---- SnapshotReader ---------------------------------------------------------------------

SnapshotReader::SnapshotReader(std::string job, std::string role_key, std::optional<SnapshotLayout> expected)
    : job_(std::move(job)), role_key_(std::move(role_key)) {
    for (int slot = 0; slot < 2; ++slot) {
        slots_[slot] = ShmSegment::open(segment_name(job_, role_key_, slot), ShmSegment::Access::read_only);
        if (slots_[slot] && initialised(*slots_[slot]))
            check_segment(*slots_[slot], job_, role_key_, slot, expected ? &*expected : nullptr);
    }
}

namespace {
std::array<SlotSource, 2> sources_of(const std::string& job, const std::string& role_key,
                                     const std::array<std::optional<ShmSegment>, 2>& slots) {
    std::array<SlotSource, 2> sources;
    for (int slot = 0; slot < 2; ++slot)
        sources[slot] = {slots[slot] ? &*slots[slot] : nullptr, segment_name(job, role_key, slot)};
    return sources;
}
}  // namespace

SnapshotView SnapshotReader::newest_committed() const {
    return read_version(sources_of(job_, role_key_, slots_), std::nullopt);
}

SnapshotView SnapshotReader::committed(std::int64_t step) const {
    return read_version(sources_of(job_, role_key_, slots_), step);
}

SnapshotView SnapshotReader::copy_committed(std::int64_t step,
                                            std::span<const std::span<std::byte>> destinations) const {
    return read_version(sources_of(job_, role_key_, slots_), step, destinations);
}

SnapshotStatus SnapshotReader::verify(std::optional<std::int64_t> step) const {
    return status_only(read_version(sources_of(job_, role_key_, slots_), step));
}

std::vector<std::int64_t> SnapshotReader::committed_steps() const {
    const auto sources = sources_of(job_, role_key_, slots_);
    std::vector<std::int64_t> steps;
    for (int slot = 0; slot < 2; ++slot) {
        const HeaderRead header = read_header(sources[slot], slot);
        if (header.committed) steps.push_back(header.step);
    }
    std::sort(steps.begin(), steps.end(), std::greater<>());
    return steps;
}

std::optional<CommittedHeader> SnapshotReader::committed_header(std::int64_t step) const {
    const auto sources = sources_of(job_, role_key_, slots_);
    for (int slot = 0; slot < 2; ++slot) {
        const HeaderRead header = read_header(sources[slot], slot);
        if (!header.committed || header.step != step) continue;
        CommittedHeader out{header.step, header.epoch, slot, header.generation, {}, {}};
        for (const auto& entry : header.entries) {
            out.checksums.emplace_back(entry.name, entry.checksum);
            // An unknown algorithm cannot match a known one: reported as its own value.
            out.algorithms.push_back(static_cast<ChecksumAlgorithm>(entry.algorithm));
        }
        return out;
    }
    return std::nullopt;
}

SnapshotStatus verify_snapshot(std::string_view job, std::string_view role_key,
                               std::optional<std::int64_t> step) {
    return SnapshotReader(std::string(job), std::string(role_key)).verify(step);
}

}  // namespace flashrec::ft
