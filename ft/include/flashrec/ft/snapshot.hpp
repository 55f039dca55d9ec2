// Node-local snapshot store: ping-pong versions of one role's state in POSIX shared memory
// (/dev/shm), so they outlive the process and the MPI job (tier 2, warm relaunch). No MPI here:
// the ring replication receives straight into a WriteView of a peer store.
// Layout, naming, lifetime and crash semantics: docs/snapshots.md.
#pragma once
#include "flashrec/errors.hpp"
#include "flashrec/ft/checksum.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashrec::ft {

// ---- naming ----------------------------------------------------------------------------

// Job names: 1-100 of [A-Za-z0-9_-]. No '.', so that one job's prefix never matches another's.
void validate_job_name(std::string_view job);
// Role keys: 1-63 of [A-Za-z0-9_.@-], e.g. "dp3.tp0.pp0", or a peer copy's key (peer_role_key).
void validate_role_key(std::string_view role_key);
// "/flashrec.<job>.<role_key>.<slot>", the shm_open name; throws flashrec::Error on a bad part.
std::string segment_name(std::string_view job, std::string_view role_key, int slot);
// Key of a copy of `owner`'s state kept by `holder`: "<owner>@<holder>". Distinct from the
// owner's own key, so an owner and its ring successor on the same node never share segments.
std::string peer_role_key(std::string_view owner, std::string_view holder);
// Keys of blanks (StorePool::make_blanks) start with this: segments a parked hot spare made
// ahead of time, holding nothing yet; not a store, though remove_all removes them too.
inline constexpr std::string_view kBlankKeyPrefix = "blank-";

// ---- lifetime (the launcher's job; nothing is unlinked implicitly) -----------------------

// Segments of `job` present now, as shm names ("/flashrec.<job>....").
std::vector<std::string> list_segments(std::string_view job);
// Unlinks one segment; false if it did not exist. Mappings already open stay valid.
bool unlink_segment(const std::string& name);
// Unlinks both slots of one role; returns how many existed.
int unlink_snapshot(std::string_view job, std::string_view role_key);
// Unlinks every segment of `job` (scans /dev/shm for its prefix), and this Slurm job's epilog
// marker of it; returns how many segments.
int remove_all(std::string_view job);

// Under Slurm (SLURM_JOB_ID set): an empty file /dev/shm/flashrec-slurm-job.<id>.<job> tells
// slurm/epilog/flashrec-epilog, run by Slurm on each node when the Slurm job ends, whose
// segments to remove there: also where no process of the job lived to do it (a frozen node
// thawed after the end, its ranks killed by Slurm). Made with the first segment a process
// creates; best effort (false: it could not be made, or not under Slurm).
bool mark_for_epilog(std::string_view job);
// "/dev/shm/flashrec-slurm-job.<id>.<job>" for SLURM_JOB_ID; empty when not under Slurm.
std::string epilog_marker_path(std::string_view job);

// ---- errors ------------------------------------------------------------------------------

// The shared memory for a segment could not be had (shm full, ENOMEM, mmap failure).
class SnapshotAllocationError : public Error {
public:
    SnapshotAllocationError(std::string segment, std::size_t bytes, const std::string& detail);
    const std::string& segment() const { return segment_; }
    std::size_t bytes() const { return bytes_; }

private:
    std::string segment_;
    std::size_t bytes_;
};

// An existing segment was made for another layout, role, slot or job than the caller expects.
class SnapshotLayoutMismatch : public Error {
public:
    // `buffer` is the first buffer that differs, empty when the difference is not a buffer's.
    SnapshotLayoutMismatch(std::string segment, std::string buffer, const std::string& detail);
    const std::string& segment() const { return segment_; }
    const std::string& buffer() const { return buffer_; }

private:
    std::string segment_;
    std::string buffer_;
};

// ---- one shared-memory segment ----------------------------------------------------------

// Owns an shm fd and its whole-file mapping. Move-only. The destructor unmaps and closes but
// never unlinks: the segment outlives the process on purpose.
class ShmSegment {
public:
    enum class Access { read_only, read_write };

    ShmSegment() = default;  // holds nothing (also the state a move leaves behind)
    // Creates `name` exclusively with `bytes` of memory reserved up front (posix_fallocate),
    // so an impossible size fails here with SnapshotAllocationError, not with SIGBUS later.
    // On failure nothing is left behind.
    static ShmSegment create(const std::string& name, std::size_t bytes);
    // Opens an existing segment at its current size; nullopt if it does not exist.
    static std::optional<ShmSegment> open(const std::string& name, Access access);
    // Gives this segment the name `name` (replacing a segment of that name), keeping its
    // memory and mapping: a segment made ahead of time becomes a store's slot without being
    // allocated or faulted again.
    void rename(const std::string& name);

    ShmSegment(ShmSegment&& other) noexcept;
    ShmSegment& operator=(ShmSegment&& other) noexcept;
    ShmSegment(const ShmSegment&) = delete;
    ShmSegment& operator=(const ShmSegment&) = delete;
    ~ShmSegment();

    const std::string& name() const { return name_; }
    std::size_t size() const { return size_; }
    bool writable() const { return writable_; }
    // nullptr when the segment is empty (size 0: its creator died before sizing it).
    std::byte* data() const { return static_cast<std::byte*>(address_); }

private:
    ShmSegment(std::string name, int fd, void* address, std::size_t size, bool writable)
        : name_(std::move(name)), fd_(fd), address_(address), size_(size), writable_(writable) {}
    void release() noexcept;

    std::string name_;
    int fd_ = -1;
    void* address_ = nullptr;
    std::size_t size_ = 0;
    bool writable_ = false;
};

// ---- layouts and views --------------------------------------------------------------------

struct BufferSpec {
    std::string name;  // 1-63 printable characters, unique in its layout
    std::size_t bytes = 0;
};
using SnapshotLayout = std::vector<BufferSpec>;

// Bytes one slot of `layout` takes in /dev/shm (header + 64-byte aligned buffers).
std::size_t snapshot_segment_bytes(const SnapshotLayout& layout);

// The outcome of reading one version back, without the data (what verify() returns).
struct SnapshotStatus {
    bool ok = false;
    int slot = -1;           // the slot that holds the version, when ok
    std::int64_t step = -1;  // when ok
    std::int64_t epoch = -1;
    std::string problem;     // why not ok ("no committed version: slot 0 is being written, ...")
    // What this read found in each slot, e.g. "slot 0 holds step 4 (epoch 1)", "slot 1 is
    // empty", "slot 1: buffer 'adam_m' checksum mismatch (stored ..., computed ...)". Filled
    // even when ok: newest_committed() may skip a newer slot that failed verification.
    std::array<std::string, 2> slot_status;
};

// What a committed slot's header says, without reading its buffers (verified header checksum).
// `slot` and `generation` tell a rewrite of the same version apart from the version as it was.
struct CommittedHeader {
    std::int64_t step = -1;
    std::int64_t epoch = -1;
    int slot = -1;
    std::uint64_t generation = 0;
    std::vector<std::pair<std::string, std::uint64_t>> checksums;  // per buffer, layout order
    // The algorithm of each of those checksums (the same order): two versions of a buffer
    // compare by checksum only when both were hashed alike.
    std::vector<ChecksumAlgorithm> algorithms;
};

struct BufferView {
    std::string_view name;
    std::span<const std::byte> bytes;
};

// A verified committed version. The spans point into shared memory: valid while the store or
// reader that returned them lives and until a writer begins rewriting that slot.
struct SnapshotView : SnapshotStatus {
    std::vector<BufferView> buffers;  // layout order; empty unless ok
    // The named buffer; throws flashrec::Error if the layout has none.
    std::span<const std::byte> buffer(std::string_view name) const;
    // True while the slot has not been rewritten since it was verified: check it after
    // copying out when a writer may be active (a seqlock on the slot's write generation).
    bool unchanged() const;

    // Internal: the slot's generation word and its value at verification.
    const std::uint64_t* generation_word = nullptr;
    std::uint64_t generation = 0;
};

struct WritableBuffer {
    std::string_view name;
    std::span<std::byte> bytes;
};

// The staging slot being written: memcpy (or MPI_Recv) straight into the spans, then commit().
struct WriteView {
    int slot = -1;
    std::int64_t step = -1;
    std::int64_t epoch = -1;
    std::vector<WritableBuffer> buffers;  // layout order
    std::span<std::byte> buffer(std::string_view name) const;
};

// ---- the store -------------------------------------------------------------------------

// The two ping-pong slots of one role's state on this node: a process's own role, or a ring
// predecessor's as a peer copy (key from peer_role_key). One writer thread at a time; reads
// verify checksums and never return a torn or corrupt version.
class SnapshotStore {
public:
    // Opens the slots of (job, role_key) if they exist (a warm relaunch), after checking they
    // were made for `layout` (SnapshotLayoutMismatch names the first buffer that differs);
    // creates missing ones. Throws SnapshotAllocationError if /dev/shm cannot hold them, and
    // then removes any slot this call created.
    // `blank`, if given, is asked for a made-ahead segment of exactly the slot's size for each
    // slot it creates (StorePool's blanks: a parked hot spare's); nullopt: create one.
    using BlankSource = std::function<std::optional<ShmSegment>(std::size_t bytes)>;
    SnapshotStore(std::string job, std::string role_key, SnapshotLayout layout, const BlankSource& blank = {});
    SnapshotStore(SnapshotStore&&) noexcept;
    SnapshotStore& operator=(SnapshotStore&&) noexcept;
    ~SnapshotStore();

    // Starts writing version `step` into the slot that does not hold the version to keep (the
    // newest committed one older than `step`, else the newest), so a committed version always
    // remains. Calling it again before commit() restarts the write.
    WriteView begin_write(std::int64_t step, std::int64_t epoch);
    // Optional: [offset, offset + bytes) of buffer `index` is final. Chunks noted in order are
    // hashed now, while in cache, and commit() does not read that buffer again; a buffer not
    // covered in order is hashed whole at commit(). Bytes changed after being noted make the
    // commit fail verification, never pass it.
    void note_written(std::size_t index, std::size_t offset, std::size_t bytes);
    // Optional: the checksum of buffer `index` of this version was computed before its bytes
    // were copied here, from the source (a GPU kernel over the device state: docs/gpu.md,
    // "The hash on the GPU"). commit() records it with its algorithm and never reads the
    // buffer; reads verify the bytes that landed against it, so a copy that went wrong fails
    // verification. Given for a buffer, note_written() of that buffer is not needed.
    void set_checksum(std::size_t index, BufferChecksum checksum);
    // Computes the checksums and publishes the version (header checksum last, release order).
    void commit();

    // Reads verify every checksum of the version they return (one pass over its bytes).
    SnapshotView newest_committed() const;
    SnapshotView committed(std::int64_t step) const;
    // committed(step), copying buffer i into destinations[i] (exactly as large) in the pass
    // that verifies it, so the version is read once (restore). If the result is not ok, the
    // destinations hold unspecified bytes.
    SnapshotView copy_committed(std::int64_t step, std::span<const std::span<std::byte>> destinations) const;
    // committed(step), or newest_committed() without a step, as a status only.
    SnapshotStatus verify(std::optional<std::int64_t> step = std::nullopt) const;

    const std::string& job() const { return job_; }
    const std::string& role_key() const { return role_key_; }
    const SnapshotLayout& layout() const { return layout_; }
    // Shared memory this store holds: both slots.
    std::size_t bytes() const;
    std::array<std::string, 2> segment_names() const;

private:
    struct ChunkHashers;  // per-buffer incremental XXH3 state, checksums given by set_checksum
    void require_write_in_progress(const char* call) const;

    std::string job_;
    std::string role_key_;
    SnapshotLayout layout_;
    std::array<ShmSegment, 2> slots_;
    std::unique_ptr<ChunkHashers> hashers_;
    int writing_slot_ = -1;
    std::int64_t writing_step_ = -1;
    std::int64_t writing_epoch_ = -1;
};

// Read-only access to the slots of (job, role_key) as they are now, for a process that does
// not write them (a fresh reader, recovery, the HDF5 writer, tests). Missing or half-made
// segments are not errors here: the reads report them.
class SnapshotReader {
public:
    // With `expected`, throws SnapshotLayoutMismatch if an initialised slot has another layout.
    SnapshotReader(std::string job, std::string role_key,
                   std::optional<SnapshotLayout> expected = std::nullopt);

    SnapshotView newest_committed() const;
    SnapshotView committed(std::int64_t step) const;
    // committed(step), copying buffer i into destinations[i] (exactly as large) in the pass
    // that verifies it, so the version is read once (restore). If the result is not ok, the
    // destinations hold unspecified bytes.
    SnapshotView copy_committed(std::int64_t step, std::span<const std::span<std::byte>> destinations) const;
    SnapshotStatus verify(std::optional<std::int64_t> step = std::nullopt) const;
    // Steps of the slots whose header verifies as committed, newest first, without reading the
    // buffers: cheap enough for recovery planning. committed(step) still verifies every byte
    // before a version is used.
    std::vector<std::int64_t> committed_steps() const;
    // The header of committed version `step` (nullopt: no slot holds it committed), as cheap as
    // committed_steps(): the per-buffer checksums it records, not the bytes.
    std::optional<CommittedHeader> committed_header(std::int64_t step) const;

private:
    std::string job_;
    std::string role_key_;
    std::array<std::optional<ShmSegment>, 2> slots_;
};

// Opens (job, role_key) read-only as a fresh process would and verifies version `step` (the
// newest committed one without a step): ok, or exactly what is missing or corrupt.
SnapshotStatus verify_snapshot(std::string_view job, std::string_view role_key,
                               std::optional<std::int64_t> step = std::nullopt);

}  // namespace flashrec::ft
