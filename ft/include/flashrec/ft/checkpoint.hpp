// HDF5 fallback checkpoints (recovery tier 3; the on-disk format is
// described in docs/checkpoint-format.md).
//
//   <root>/step-<NNNNNNNN>/manifest.json           step, topology, roles, every buffer's checksum
//   <root>/step-<NNNNNNNN>/rank-<role>.h5          one per role, one dataset per buffer
//
// A checkpoint is written into <root>/.step-<N>.tmp-<attempt>/ and becomes visible only when
// publish() renames that directory, so a crash leaves at most a staging directory, which
// readers ignore. Every operation here is local to the calling process; the MPI protocol
// around them is the caller's:
//   1. one rank draws new_attempt_tag() and broadcasts it; every rank create_staging_dir()s;
//   2. every rank write_rank_file()s its role and sends the returned entry (to_json_text) to
//      the rank that will write_manifest();
//   3. all agree that every file was written; one rank publish()es, then prune()s.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

// Element types a buffer can be stored as: the dataset's HDF5 type, so that h5dump and any
// HDF5 reader show the values, not opaque bytes.
enum class Dtype : std::uint8_t { float32, float64, int32, int64, uint8 };
// "float32", "float64", "int32", "int64", "uint8": as written in the manifest.
std::string_view dtype_name(Dtype dtype);
std::size_t dtype_size(Dtype dtype);

// A buffer to save, as the trainer registered it.
struct BufferToSave {
    std::string name;  // the dataset's name: not empty, no '/', unique within the file
    Dtype dtype = Dtype::uint8;
    const void* data = nullptr;
    std::size_t bytes = 0;  // a multiple of dtype_size(dtype)
    // XXH3-64 of the bytes, when already known (the committed snapshot records one): saves a
    // pass over the data and carries the snapshot's own check through to the reader.
    std::optional<std::uint64_t> checksum;
};

// Where to restore a buffer: the caller's registration, which the checkpoint must match.
struct BufferToRestore {
    std::string name;
    Dtype dtype = Dtype::uint8;
    void* data = nullptr;
    std::size_t bytes = 0;
};

// A buffer as the manifest records it.
struct StoredBuffer {
    std::string name;
    Dtype dtype = Dtype::uint8;
    std::uint64_t bytes = 0;
    std::uint64_t checksum = 0;  // XXH3-64 of the bytes
};

// One rank file as the manifest records it.
struct RankFileEntry {
    std::string role;        // e.g. "dp3.tp0.pp0"
    std::string file;        // its name inside the step directory: "rank-<role>.h5"
    std::uint64_t file_bytes = 0;
    std::vector<StoredBuffer> buffers;

    // The entry's JSON, exactly as it appears in manifest.json: what each rank sends to the
    // rank that writes the manifest. from_json_text throws flashrec::Error if malformed.
    std::string to_json_text() const;
    static RankFileEntry from_json_text(std::string_view text);
};

struct CheckpointTopology {
    int dp = 1;
    int tp = 1;
    int pp = 1;
};

// What every file of one checkpoint says about itself.
struct CheckpointInfo {
    std::int64_t step = 0;
    std::int64_t topology_epoch = 0;
    CheckpointTopology topology;
    // flashrec::version() of the writer, passed in because ft does not depend on runtime.
    std::string library_version;
    // job.name of the writer: a restart takes only its own job's checkpoints. Empty in a
    // checkpoint written before the field existed (then nothing is checked).
    std::string job;
};

struct Manifest {
    CheckpointInfo info;
    std::vector<RankFileEntry> files;  // one per role: dp * tp * pp of them
};

// A published checkpoint directory and the step it holds.
struct StepDir {
    std::int64_t step = 0;
    std::filesystem::path path;
};

// The checkpoint does not hold what the caller asks for: a role or buffer is absent, or a
// buffer's size or type differs from the caller's registration. Unlike CorruptState, an
// older checkpoint will usually not do better. what(): "<file>: buffer '<name>': <detail>".
class CheckpointMismatch : public Error {
public:
    CheckpointMismatch(std::string where, std::string buffer, const std::string& detail);
    const std::string& where() const { return where_; }
    const std::string& buffer() const { return buffer_; }

private:
    std::string where_;
    std::string buffer_;
};

// Writes checkpoints under one root directory. Stateless apart from the root, so a background
// thread may own one. Failures throw flashrec::Error naming the file.
class CheckpointWriter {
public:
    explicit CheckpointWriter(std::filesystem::path root);
    const std::filesystem::path& root() const { return root_; }

    // A fresh random tag for create_staging_dir. One rank draws it and broadcasts it, so that
    // every rank writes into the same directory and no attempt reuses a crashed one's.
    static std::string new_attempt_tag();
    // Creates <root>/.step-<N>.tmp-<attempt> (and root) unless it exists, so every rank may
    // call it with the same tag. `attempt`: letters, digits, '-' and '_'.
    std::filesystem::path create_staging_dir(std::int64_t step, std::string_view attempt) const;

    // Writes <staging_dir>/rank-<role>.h5: one contiguous dataset per buffer, each written
    // straight from the caller's memory in one H5Dwrite, then fsyncs it. Returns its entry for
    // the manifest. A failure may leave a partial file in the staging directory.
    RankFileEntry write_rank_file(const std::filesystem::path& staging_dir, std::string_view role,
                                  const CheckpointInfo& info,
                                  std::span<const BufferToSave> buffers) const;

    // Writes and fsyncs <staging_dir>/manifest.json, after checking that the manifest is
    // whole: one entry per role, dp * tp * pp of them, the step of the staging directory.
    void write_manifest(const std::filesystem::path& staging_dir, const Manifest& manifest) const;

    // Makes the checkpoint visible: checks that its manifest reads back, fsyncs the staging
    // directory, renames it to <root>/step-<N> (atomic) and fsyncs root. Returns the new path.
    std::filesystem::path publish(const std::filesystem::path& staging_dir) const;

    // Keeps the newest `keep` (at least 1) complete checkpoints whose manifest opens and
    // removes every complete checkpoint older than those. So the newest checkpoint that opens
    // is never removed; newer ones that do not open are left for inspection. Each removal is
    // a rename into a staging name first, so a crash mid-removal leaves only staging debris.
    // Returns what was removed.
    std::vector<std::filesystem::path> prune(int keep) const;

    // Removes every staging directory under root (crashed, abandoned or half-pruned). Call it
    // only while no checkpoint is being written. Returns what was removed.
    std::vector<std::filesystem::path> cleanup_incomplete() const;

private:
    // The step a staging directory of this root holds; throws flashrec::Error for any other path.
    std::int64_t staging_step(const std::filesystem::path& staging_dir) const;

    std::filesystem::path root_;
};

enum class Verification {
    metadata,   // manifest, file sizes, file attributes, every dataset's type, shape and attributes
    checksums,  // metadata, then every dataset read and its checksum compared
};

struct Refusal {
    StepDir checkpoint;
    std::string reason;
};

// What newest_valid() found: the checkpoint to restart from, if any, and why newer complete
// checkpoints were passed over.
struct CheckpointChoice {
    std::optional<StepDir> chosen;
    std::vector<Refusal> refused;  // newest first
    // One line for the log: each refusal with its reason, then what is offered instead.
    std::string explanation() const;
};

// Reads one published checkpoint. Errors with the stored files throw CorruptState naming the
// file and the buffer ("(whole file)" when the problem is not one buffer's); a role or buffer
// that does not match the caller's request throws CheckpointMismatch.
class CheckpointReader {
public:
    // Published checkpoints under root (step-<N> directories), newest first; staging
    // directories are ignored. A missing root has none.
    static std::vector<StepDir> list_complete(const std::filesystem::path& root);

    // Reads and checks step_dir/manifest.json: schema, format version, step agrees with the
    // directory name, one file per role, dp * tp * pp roles. The rank files themselves are
    // checked when verified or read, so that opening costs one small read per process.
    static CheckpointReader open(const std::filesystem::path& step_dir);

    // The newest complete checkpoint that opens and whose files for `roles` (empty: every
    // role) verify to `depth`, with the reasons newer ones were refused. Typical use: each
    // rank passes its own role and Verification::checksums, then the ranks settle on a step
    // that every rank accepted; a single process choosing for everyone passes no roles.
    static CheckpointChoice newest_valid(const std::filesystem::path& root,
                                         const std::vector<std::string>& roles, Verification depth);
    // The same for job `job` of shape dp x tp x pp: a checkpoint another shape or another job
    // wrote is refused too. The ranks' restart and flashrec-launch's choice of tier 3 both use
    // it, so they agree.
    static CheckpointChoice newest_for_job(const std::filesystem::path& root, std::string_view job, int dp, int tp,
                                           int pp, const std::vector<std::string>& roles, Verification depth);

    const std::filesystem::path& step_dir() const { return step_dir_; }
    const Manifest& manifest() const { return manifest_; }
    // Throws CheckpointMismatch if another job wrote this checkpoint (one that names no job,
    // from before the field existed, passes).
    void require_job(std::string_view job) const;
    // Throws CheckpointMismatch if the checkpoint has no file for `role`.
    const RankFileEntry& rank_file(std::string_view role) const;

    // Checks the files of `roles` (empty: every role) against the manifest to `depth`. With
    // Verification::checksums each dataset is read into scratch memory as large as the
    // largest buffer.
    void verify(const std::vector<std::string>& roles, Verification depth) const;

    // Reads each requested buffer of `role` straight into the caller's memory and verifies its
    // checksum. The checkpoint may hold more buffers than requested (they are not read). Name,
    // type and size are checked against the manifest before any data is read; on any error
    // the caller's buffers hold unspecified bytes.
    void read_rank(std::string_view role, std::span<const BufferToRestore> buffers) const;

    // Where a buffer's bytes lie in its file: datasets are contiguous, so tools can pread or
    // map them without HDF5. An empty buffer has no storage: offset 0, bytes 0.
    struct DatasetLocation {
        std::filesystem::path file;
        std::uint64_t offset = 0;
        std::uint64_t bytes = 0;
    };
    DatasetLocation locate(std::string_view role, std::string_view buffer) const;

private:
    CheckpointReader(std::filesystem::path step_dir, Manifest manifest)
        : step_dir_(std::move(step_dir)), manifest_(std::move(manifest)) {}

    std::filesystem::path step_dir_;
    Manifest manifest_;
};

}  // namespace flashrec::ft
