// The HDF5 fallback checkpoint, seen from the step loop (docs/checkpoint-format.md;
// runtime behaviour in docs/checkpoint-format.md, "In the runtime").
//
// One worker thread per Checkpointer writes checkpoints one at a time. Every checkpoint runs the
// protocol of ft/checkpoint.hpp on this object's own communicator (a dup of work):
//
//   start     MPI_Allreduce(MAX) of the version each worker was asked for (or "finish"): the
//             version every rank writes. Requests are dropped while the worker is busy, and a
//             rank that dropped one contributes a later one, so ranks that disagree settle on
//             the newest (committed everywhere: a rank was asked for it only after the sync
//             point of that step). "finish" (the loop ended) wins over any version.
//   prepare   rank 0 removes staging directories of crashed attempts (nothing is in flight
//             anywhere: every worker has passed the start), skips a step that is already
//             published (a replayed step), draws the attempt tag; MPI_Bcast.
//   write     every rank reads its role's committed snapshot `version` in shared memory
//             (SnapshotReader: verified), copies it out (see below), checks that the slot was
//             not rewritten meanwhile (SnapshotView::unchanged; if it was, the rank reports
//             failure), and writes rank-<role>.h5 into the staging directory (fsynced).
//   gather    MPI_Gather(v) of each rank's manifest entry (or its error) to rank 0, which
//             writes manifest.json when every rank succeeded.
//   agree     MPI_Allreduce(MIN) of "my part succeeded" (rank 0: and the manifest).
//   publish   rank 0 renames the staging directory to step-<N> and renames the checkpoints
//             beyond checkpoint.keep out of sight, under publish_mutex and only if abort() has
//             not been called; then deletes those outside the lock.
//
// The snapshot slot of version v is rewritten by the protection thread when it starts snapshot
// v+2, about one step after the checkpoint of v starts, and writing a file (fsync included)
// usually takes longer than a step. So the worker does not write from shared memory directly: it
// first copies the committed snapshot out into a private host buffer (kept between checkpoints;
// it costs as much host memory as one snapshot slot, no device copy, and takes about as long as
// the protection thread's own copy, which fits within a step), then checks
// SnapshotView::unchanged(). If the slot was rewritten during the copy, the copy may be torn and
// the checkpoint is abandoned (logged, never published); otherwise the file is written from the
// private copy at the storage's pace, with no deadline. (Writing straight from shared memory and
// checking unchanged() afterwards was tried first: with steps shorter than the write, which is
// the common case, nearly every checkpoint was abandoned.)
#include "flashrec/runtime/checkpointing.hpp"
#include "flashrec/runtime/platform.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>

#include <xxhash.h>

#include "flashrec/ft/checkpoint.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/flashrec.hpp"
#include "flashrec/runtime/state_registry.hpp"

namespace flashrec::runtime {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A worker's contribution to the start agreement when the loop ended: larger than any version.
constexpr std::int64_t kFinish = std::numeric_limits<std::int64_t>::max();
// Copy-out granularity: small enough that a chunk is still in cache when it is hashed.
constexpr std::size_t kCopyChunk = std::size_t{1} << 20;

ft::Dtype to_ft(DType type) {
    switch (type) {
        case DType::u8: return ft::Dtype::uint8;
        case DType::i32: return ft::Dtype::int32;
        case DType::i64: return ft::Dtype::int64;
        case DType::f32: return ft::Dtype::float32;
        case DType::f64: return ft::Dtype::float64;
    }
    return ft::Dtype::uint8;
}

void log_line(const std::string& who, const std::string& text) {
    std::fprintf(stderr, "flashrec[%s pid %d]: checkpoint: %s\n", who.c_str(), static_cast<int>(getpid()),
                 text.c_str());
    std::fflush(stderr);
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fixed(double value, int digits) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", digits, value);
    return text;
}

std::vector<std::string> roles_of(const topology::Shape& shape) {
    std::vector<std::string> roles;
    for (int r = 0; r < shape.size(); ++r) roles.push_back(topology::role_key(topology::coord_of(shape, r)));
    return roles;
}

// Test hook (tests/checkpoint): FLASHREC_TEST_CHECKPOINT_PAUSE=<step>:<ms>[:before-check] makes
// the worker of checkpoint <step> wait `ms`, in the job's first topology epoch only: by default
// after writing its rank file (the window in which a crash hits a checkpoint in flight); with
// before-check after copying the snapshot out and before the unchanged() check (the slot gets
// rewritten under it). abort() ends the wait at once.
struct TestPause {
    std::int64_t step = -1;
    std::chrono::milliseconds duration{0};
    bool before_check = false;
};

TestPause test_pause() {
    TestPause pause;
    const char* text = std::getenv(ft::env::kTestCheckpointPause);
    if (!text || !*text) return pause;
    long long step = -1, ms = 0;
    char where[32] = {};
    if (std::sscanf(text, "%lld:%lld:%31s", &step, &ms, where) >= 2) {
        pause.step = step;
        pause.duration = std::chrono::milliseconds(ms);
        pause.before_check = std::strcmp(where, "before-check") == 0;
    }
    return pause;
}

// One topology epoch's worth of checkpointing: a communicator and who this process is in it.
struct Generation {
    Generation(CheckpointIdentity id, ft::Comm c)
        : identity(std::move(id)), comm(std::move(c)), rank(comm.valid() ? comm.rank() : -1) {}
    CheckpointIdentity identity;
    ft::Comm comm;
    int rank;  // in comm
    std::atomic<bool> aborted{false};  // abort(), rebind() or an MPI error: no more collectives
    std::atomic<bool> finished{false}; // the start agreement said "finish"
};

struct BufferInfo {
    std::string name;
    ft::Dtype dtype;
    std::size_t bytes;
};

// Every member's `mine` at `root` (empty elsewhere).
std::vector<std::string> gather_strings(const ft::Comm& comm, const std::string& mine, int root) {
    const int n = comm.size();
    const bool at_root = comm.rank() == root;
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(at_root ? static_cast<size_t>(n) : 0), displs(lens.size());
    ft::check(MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, comm.get()),
              "MPI_Gather(checkpoint entry lengths)", comm);
    int total = 0;
    for (size_t r = 0; r < lens.size(); ++r) displs[r] = total, total += lens[r];
    std::string all(static_cast<size_t>(total), '\0');
    ft::check(MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, root,
                          comm.get()),
              "MPI_Gatherv(checkpoint entries)", comm);
    std::vector<std::string> out;
    for (size_t r = 0; r < lens.size(); ++r)
        out.push_back(all.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lens[r])));
    return out;
}

}  // namespace

struct Checkpointer::State {
    config::Checkpoint settings;
    std::string job;
    std::vector<BufferInfo> buffers;
    ft::SnapshotLayout layout;
    TestPause pause = test_pause();
    bool enabled = false;
    Published on_published;

    // The private copy of the committed snapshot the file is written from (worker thread only):
    // allocated at the first checkpoint, kept for the next ones. Buffers at 64-byte offsets.
    std::vector<std::size_t> offsets;
    std::size_t copy_bytes = 0;
    std::unique_ptr<std::byte[]> copy;
    std::byte* copy_area() {
        if (!copy) copy = std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(copy_bytes, 1));
        return copy.get();
    }

    std::mutex mutex;
    std::condition_variable cv;  // worker wake-ups, finish() waiters, the test pause
    std::shared_ptr<Generation> gen;
    std::optional<std::int64_t> request;  // asked for, not yet taken by the worker
    std::int64_t busy_with = -1;          // what the worker is doing (kFinish: finishing), -1 idle
    bool finish_requested = false;
    bool finish_done = false;
    bool stop = false;
    std::thread worker;

    // Held by rank 0 while it publishes and renames pruned checkpoints away (renames and fsyncs
    // only: milliseconds); abort() takes it once after setting the abort flag, so that no
    // complete checkpoint appears or disappears after abort() returns (what was already renamed
    // away may still be being deleted: readers never look at it).
    std::mutex publish_mutex;

    std::string who() const { return gen ? gen->identity.role_key : "?"; }
    void work();
    void run(const std::shared_ptr<Generation>& g, std::int64_t contribution);
    void write(Generation& g, std::int64_t version);
    // Waits the test pause (if it applies); false if abort() ended it.
    bool maybe_pause(Generation& g, std::int64_t version, bool before_check);
    // Pruning, first half: renames every complete checkpoint older than the newest `keep` whose
    // manifest opens to a staging name (so the newest that opens is never touched, and a crash
    // leaves staging debris, not a half-deleted checkpoint). Fast: done under publish_mutex.
    // `removed`: the published names; `doomed`: where they are now, to be deleted.
    void retire_old(const fs::path& root, std::vector<fs::path>& removed, std::vector<fs::path>& doomed) const;
    void abort_generation(Generation& g) noexcept {
        if (!g.aborted.exchange(true)) g.comm.revoke();
    }
};

Checkpointer::Checkpointer(const config::Config& cfg, const std::vector<ProtectedBuffer>& buffers,
                           CheckpointIdentity identity, ft::Comm comm, Published on_published)
    : state_(std::make_unique<State>()) {
    State& s = *state_;
    s.on_published = std::move(on_published);
    s.settings = cfg.checkpoint;
    s.job = cfg.job.name;
    for (const auto& b : buffers) {
        s.buffers.push_back({b.name, to_ft(b.type), b.bytes});
        s.layout.push_back({b.name, b.bytes});
        s.offsets.push_back(s.copy_bytes);
        s.copy_bytes += (b.bytes + 63) / 64 * 64;
    }
    // The worker exists whenever there is a directory: checkpoint_now() needs it even without
    // periodic checkpoints.
    s.enabled = !cfg.checkpoint.dir.empty();
    s.gen = std::make_shared<Generation>(std::move(identity), std::move(comm));
    if (s.enabled) s.worker = std::thread([&s] { s.work(); });
}

Checkpointer::~Checkpointer() {
    State& s = *state_;
    {
        std::lock_guard lock(s.mutex);
        s.stop = true;
        // A worker still inside a collective (no finish(): the loop ended by an exception)
        // must be woken; after finish() it is idle and this revokes nothing in use.
        if (s.busy_with >= 0 && s.gen) s.abort_generation(*s.gen);
    }
    s.cv.notify_all();
    if (s.worker.joinable()) s.worker.join();
}

void Checkpointer::committed(std::int64_t version) {
    const std::int64_t every = state_->settings.every_steps;
    if (every <= 0 || version <= 0 || version % every != 0) return;
    request(version);
}

void Checkpointer::checkpoint_now(std::int64_t version) { request(version); }

void Checkpointer::request(std::int64_t version) {
    State& s = *state_;
    if (!s.enabled) return;
    try {
        std::lock_guard lock(s.mutex);
        if (!s.gen || s.gen->aborted || s.gen->finished) return;
        if (s.busy_with >= 0 || s.request) {
            // Logged by rank 0 only (the ranks usually agree; when they do not, the start
            // agreement settles it and rank 0 logs what was written instead).
            const std::int64_t other = s.busy_with >= 0 ? s.busy_with : *s.request;
            if (s.gen->rank == 0)
                log_line(s.who(), "step " + std::to_string(version) + " skipped: the checkpoint of step " +
                                      std::to_string(other) + " is still in flight");
            return;
        }
        s.request = version;
    } catch (const std::exception& e) {
        log_line(s.who(), "step " + std::to_string(version) + " not started: " + e.what());
        return;
    }
    s.cv.notify_all();
}

void Checkpointer::finish() {
    State& s = *state_;
    if (!s.enabled) return;
    std::unique_lock lock(s.mutex);
    if (!s.gen || s.finish_done) return;
    s.finish_requested = true;
    s.cv.notify_all();
    s.cv.wait(lock, [&] { return s.finish_done; });
}

void Checkpointer::abort() noexcept {
    State& s = *state_;
    try {
        {
            std::lock_guard lock(s.mutex);
            if (s.gen) s.abort_generation(*s.gen);
        }
        s.cv.notify_all();  // ends a test pause
        // A publish already under way finishes (it is a rename); none starts after this.
        std::lock_guard publishing(s.publish_mutex);
    } catch (...) {
        // A mutex failure (system_error): nothing sensible to do while unwinding.
    }
}

void Checkpointer::rebind(CheckpointIdentity identity, ft::Comm comm) {
    State& s = *state_;
    {
        std::lock_guard lock(s.mutex);
        if (s.gen) s.abort_generation(*s.gen);  // already aborted by the repair; never reused
        s.gen = std::make_shared<Generation>(std::move(identity), std::move(comm));
        s.request.reset();
        s.finish_requested = false;
        s.finish_done = false;
    }
    s.cv.notify_all();
}

// ---- the worker ------------------------------------------------------------------------

void Checkpointer::State::work() {
    std::unique_lock lock(mutex);
    for (;;) {
        cv.wait(lock, [&] { return stop || request || (finish_requested && !finish_done); });
        if (stop) return;
        const std::shared_ptr<Generation> g = gen;
        const std::int64_t contribution = request ? *request : kFinish;
        request.reset();
        busy_with = contribution;
        lock.unlock();
        run(g, contribution);
        lock.lock();
        busy_with = -1;
        if (g == gen && finish_requested && (g->finished || g->aborted)) finish_done = true;
        cv.notify_all();
    }
}

void Checkpointer::State::run(const std::shared_ptr<Generation>& g, std::int64_t contribution) {
    if (g->aborted || g->finished) return;
    const ft::Comm& comm = g->comm;
    const std::string& me = g->identity.role_key;
    try {
        std::int64_t version = contribution;
        ft::check(MPI_Allreduce(MPI_IN_PLACE, &version, 1, MPI_INT64_T, MPI_MAX, comm.get()),
                  "MPI_Allreduce(checkpoint start)", comm);
        if (version == kFinish) {
            g->finished = true;
            if (contribution != kFinish && g->rank == 0)
                log_line(me, "step " + std::to_string(contribution) +
                                 " skipped: another rank had ended the loop before it could start");
            return;
        }
        if (contribution != version && g->rank == 0)
            log_line(me, "step " + std::to_string(contribution) + " skipped: another rank was still writing "
                         "the previous checkpoint; writing step " + std::to_string(version) + " instead");
        write(*g, version);
    } catch (const MpiError& e) {
        if (!g->aborted && g->rank == 0)
            log_line(me, std::string("abandoned: ") + e.what() + "; no more checkpoints until the next repair");
        // Peers still inside a collective of this checkpoint must not wait for this process.
        abort_generation(*g);
    } catch (const std::exception& e) {
        log_line(me, std::string("abandoned: ") + e.what() + "; no more checkpoints until the next repair");
        abort_generation(*g);
    }
}

bool Checkpointer::State::maybe_pause(Generation& g, std::int64_t version, bool before_check) {
    if (pause.step != version || pause.before_check != before_check || g.identity.epoch != 0) return !g.aborted;
    log_line(g.identity.role_key, "test pause of " + std::to_string(pause.duration.count()) + " ms in step " +
                                      std::to_string(version) + (before_check ? " (before the check)" : ""));
    std::unique_lock lock(mutex);
    cv.wait_for(lock, pause.duration, [&] { return g.aborted.load() || stop; });
    return !g.aborted;
}

void Checkpointer::State::write(Generation& g, std::int64_t version) {
    const ft::Comm& comm = g.comm;
    const CheckpointIdentity& id = g.identity;
    const int rank = g.rank;
    const ft::CheckpointWriter writer(settings.dir);
    const auto started = Clock::now();

    // prepare (rank 0): 'w' + attempt tag, or 's' skip, or 'e' error (already logged).
    char plan[64] = {};
    if (rank == 0) {
        try {
            for (const fs::path& p : writer.cleanup_incomplete())
                log_line(id.role_key, "removed incomplete checkpoint directory " + p.string());
            bool exists = false;
            for (const ft::StepDir& d : ft::CheckpointReader::list_complete(writer.root()))
                exists = exists || d.step == version;
            if (exists) {
                plan[0] = 's';
                log_line(id.role_key, "step " + std::to_string(version) + " skipped: " + writer.root().string() +
                                          " already holds a checkpoint of that step (a replayed step)");
            } else {
                plan[0] = 'w';
                const std::string tag = ft::CheckpointWriter::new_attempt_tag();
                std::snprintf(plan + 1, sizeof plan - 1, "%s", tag.c_str());
            }
        } catch (const std::exception& e) {
            plan[0] = 'e';
            log_line(id.role_key, "step " + std::to_string(version) + " not written: " + e.what());
        }
    }
    ft::check(MPI_Bcast(plan, sizeof plan, MPI_CHAR, 0, comm.get()), "MPI_Bcast(checkpoint plan)", comm);
    if (plan[0] != 'w') return;
    const std::string tag(plan + 1);

    // copy out + write: this role's file, from the committed snapshot in shared memory.
    ft::CheckpointInfo info;
    info.step = version;
    info.topology_epoch = id.epoch;
    info.topology = {id.shape.dp, id.shape.tp, id.shape.pp};
    info.library_version = flashrec::version();
    info.job = job;
    std::string report;
    fs::path staging;
    double copy_s = 0, write_s = 0;
    try {
        staging = writer.create_staging_dir(version, tag);
        std::vector<ft::BufferToSave> save;
        {
            const auto t = Clock::now();  // copy-out: reading (verifies the snapshot), copying, hashing
            const ft::SnapshotReader reader(job, id.snapshot_key, layout);
            const ft::SnapshotView view = reader.committed(version);
            if (!view.ok)
                throw Error("snapshot '" + id.snapshot_key + "' holds no committed step " +
                            std::to_string(version) + ": " + view.problem);
            // One pass: each chunk is hashed right after it is copied, while it is in cache, and
            // the checksum goes to the writer, which then does not read the data again.
            std::byte* out = copy_area();
            const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), &XXH3_freeState);
            if (!hash) throw Error("out of memory for a hash state");
            for (size_t b = 0; b < buffers.size(); ++b) {
                const std::byte* from = view.buffers[b].bytes.data();
                std::byte* to = out + offsets[b];
                XXH3_64bits_reset(hash.get());
                for (std::size_t done = 0; done < buffers[b].bytes;) {
                    const std::size_t n = std::min(kCopyChunk, buffers[b].bytes - done);
                    std::memcpy(to + done, from + done, n);
                    XXH3_64bits_update(hash.get(), to + done, n);
                    done += n;
                }
                save.push_back({buffers[b].name, buffers[b].dtype, to, buffers[b].bytes, XXH3_64bits_digest(hash.get())});
            }
            copy_s = seconds_since(t);
            if (!maybe_pause(g, version, true)) return;
            if (!view.unchanged())
                throw Error("the snapshot slot of step " + std::to_string(version) +
                            " was rewritten while it was copied out (the copy took longer than about one "
                            "step)");
        }
        const auto t = Clock::now();
        const ft::RankFileEntry entry = writer.write_rank_file(staging, id.role_key, info, save);
        write_s = seconds_since(t);
        if (!maybe_pause(g, version, false)) return;
        char timing[64];
        std::snprintf(timing, sizeof timing, "%.6f %.6f ", copy_s, write_s);
        report = std::string("1") + timing + entry.to_json_text();
    } catch (const std::exception& e) {  // flashrec::Error, or bad_alloc of the private copy
        report = "0" + id.role_key + ": " + e.what();
    }
    if (g.aborted) return;

    // gather + manifest (rank 0).
    const std::vector<std::string> reports = gather_strings(comm, report, 0);
    int ok = report[0] == '1';
    std::string why;
    ft::Manifest manifest;
    double slowest_copy_s = 0, slowest_write_s = 0;
    if (rank == 0) {
        manifest.info = info;
        try {
            for (const std::string& r : reports) {
                if (r.empty() || r[0] != '1') {
                    if (why.empty()) why = r.empty() ? "a rank sent nothing" : r.substr(1);
                    continue;
                }
                const size_t space1 = r.find(' '), space2 = r.find(' ', space1 + 1);
                if (space2 == std::string::npos) throw Error("malformed report from a rank: " + r);
                slowest_copy_s = std::max(slowest_copy_s, std::atof(r.substr(1, space1 - 1).c_str()));
                slowest_write_s = std::max(slowest_write_s, std::atof(r.substr(space1 + 1, space2 - space1 - 1).c_str()));
                manifest.files.push_back(ft::RankFileEntry::from_json_text(std::string_view(r).substr(space2 + 1)));
            }
            if (why.empty()) writer.write_manifest(staging, manifest);
        } catch (const Error& e) {
            if (why.empty()) why = e.what();
        }
        ok = why.empty();
    }

    // agree, then publish (rank 0).
    ft::check(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm.get()), "MPI_Allreduce(checkpoint ok)",
              comm);
    if (rank != 0) return;
    if (!ok) {
        // Every rank is past the agreement, so none writes into the staging directory any more.
        std::error_code error;
        if (!g.aborted && !staging.empty()) fs::remove_all(staging, error);
        log_line(id.role_key, "step " + std::to_string(version) + " abandoned, not published: " +
                                  (why.empty() ? "a rank failed" : why) +
                                  (g.aborted || error ? " (its staging directory is removed at the next checkpoint)"
                                                      : " (its staging directory was removed)"));
        return;
    }
    fs::path published;
    std::vector<fs::path> removed, doomed;
    const auto publishing_started = Clock::now();
    double publish_s = 0;
    {
        std::lock_guard publishing(publish_mutex);
        if (g.aborted) {
            log_line(id.role_key, "step " + std::to_string(version) + " abandoned, not published: a failure "
                                  "interrupted the job");
            return;
        }
        try {
            published = writer.publish(staging);
        } catch (const Error& e) {
            log_line(id.role_key, "step " + std::to_string(version) + " not published: " + e.what());
            return;
        }
        publish_s = seconds_since(publishing_started);
        try {
            retire_old(writer.root(), removed, doomed);
        } catch (const Error& e) {
            log_line(id.role_key, "pruning after step " + std::to_string(version) + ": " + e.what());
        }
    }
    // Out of sight already (renamed to staging names), so deleting them may take its time
    // outside the lock; whatever a failure interrupts here goes at the next checkpoint.
    for (const fs::path& p : doomed) {
        std::error_code error;
        fs::remove_all(p, error);
        if (error) log_line(id.role_key, "removing " + p.string() + ": " + error.message());
    }
    const double seconds = seconds_since(started);
    const double prune_s = seconds_since(publishing_started) - publish_s;
    std::uint64_t bytes = 0;
    for (const auto& f : manifest.files) bytes += f.file_bytes;
    std::string pruned;
    for (const fs::path& p : removed) pruned += (pruned.empty() ? "; pruned " : ", ") + p.filename().string();
    log_line(id.role_key, "step " + std::to_string(version) + " published in " + published.string() + ": " +
                              std::to_string(manifest.files.size()) + " files, " + std::to_string(bytes) +
                              " bytes in " + fixed(seconds, 3) + " s (" +
                              fixed(static_cast<double>(bytes) / 1e6 / std::max(seconds, 1e-9), 1) +
                              " MB/s; slowest rank: copy-out " + fixed(slowest_copy_s, 3) + " s, file " +
                              fixed(slowest_write_s, 3) + " s; publish " + fixed(publish_s, 3) + " s, prune " +
                              fixed(prune_s, 3) + " s)" + pruned);
    if (on_published)
        on_published({version, published.string(), static_cast<std::int64_t>(manifest.files.size()),
                      static_cast<std::int64_t>(bytes), seconds});
}

void Checkpointer::State::retire_old(const fs::path& root, std::vector<fs::path>& removed,
                                     std::vector<fs::path>& doomed) const {
    // The same rule as ft::CheckpointWriter::prune, whose removal is split here in two so that
    // abort() never waits for a large directory to be deleted.
    const int wanted = std::max(settings.keep, 1);
    int kept = 0;
    for (const ft::StepDir& d : ft::CheckpointReader::list_complete(root)) {
        if (kept < wanted) {
            try {
                ft::CheckpointReader::open(d.path);
                ++kept;
            } catch (const Error&) {
                // newer and unreadable: left for inspection, not counted
            }
            continue;
        }
        char name[128];
        std::snprintf(name, sizeof name, ".step-%08lld.tmp-pruned-%s", static_cast<long long>(d.step),
                      ft::CheckpointWriter::new_attempt_tag().c_str());
        const fs::path to = root / name;
        if (std::rename(d.path.c_str(), to.c_str()) != 0)
            throw Error("renaming " + d.path.string() + " to " + to.string() + ": " + std::strerror(errno));
        removed.push_back(d.path);
        doomed.push_back(to);
    }
}

// ---- restart ---------------------------------------------------------------------------

std::optional<std::int64_t> Checkpointer::newest_complete(const config::Config& cfg, const topology::Shape& shape,
                                                          std::string& why) {
    if (cfg.checkpoint.dir.empty()) {
        why = "checkpoint.dir is not set in " + cfg.path;
        return std::nullopt;
    }
    // Every process decides alone, from the same files, so every process must check the same
    // things: every role's file, checksums included (each process reads the whole checkpoint).
    const ft::CheckpointChoice choice = ft::CheckpointReader::newest_for_job(
        cfg.checkpoint.dir, cfg.job.name, shape.dp, shape.tp, shape.pp, roles_of(shape), ft::Verification::checksums);
    if (!choice.refused.empty()) log_line("restart", choice.explanation());
    if (!choice.chosen) {
        why = choice.refused.empty() ? "no complete checkpoint in " + cfg.checkpoint.dir : choice.explanation();
        return std::nullopt;
    }
    return choice.chosen->step;
}

void Checkpointer::restore(const config::Config& cfg, const std::vector<ProtectedBuffer>& buffers,
                           const std::string& role_key, std::int64_t version) {
    if (cfg.checkpoint.dir.empty()) throw Error("restore: checkpoint.dir is not set in " + cfg.path);
    std::optional<ft::StepDir> dir;
    for (const ft::StepDir& d : ft::CheckpointReader::list_complete(cfg.checkpoint.dir))
        if (d.step == version) dir = d;
    if (!dir)
        throw Error("restore: " + cfg.checkpoint.dir + " holds no complete checkpoint of step " +
                    std::to_string(version));
    const ft::CheckpointReader reader = ft::CheckpointReader::open(dir->path);
    reader.require_job(cfg.job.name);
    std::vector<ft::BufferToRestore> into;
    // A checkpoint from a flashrec that recorded no platform fingerprint: the buffer is zeroed,
    // which says "writer unknown" (platform.hpp), and the rest restores as before.
    bool has_platform = false;
    for (const auto& entry : reader.manifest().files)
        if (entry.role == role_key)
            for (const auto& stored : entry.buffers) has_platform = has_platform || stored.name == platform::kBufferName;
    for (const auto& b : buffers) {
        if (b.name == platform::kBufferName && !has_platform) {
            std::memset(b.data, 0, b.bytes);
            continue;
        }
        into.push_back({b.name, to_ft(b.type), b.data, b.bytes});
    }
    // Checks name, type and size against the manifest, then reads each dataset straight into the
    // live buffer and verifies its checksum; errors name the file and the buffer.
    reader.read_rank(role_key, into);
}

}  // namespace flashrec::runtime
