// Per-step in-memory protection (docs/ARCHITECTURE.md, "Protection"; docs/snapshots.md): after every step the
// state is copied into this role's ping-pong snapshot in node-local shared memory, and the
// unique part of it (sharded + envelope buffers) is sent to k ring successors, which keep it in
// peer snapshots. All of it runs on a background thread, overlapped with the next step's
// forward/backward; the step loop waits for it only at the sync point before the optimizer.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/region_copier.hpp"
#include "flashrec/ft/snapshot.hpp"

namespace flashrec::ft {

// A live buffer of the trainer's that is snapshotted.
struct ProtectedRegion {
    std::string name;
    void* data = nullptr;
    std::size_t bytes = 0;
    bool replicate = false;  // sent to ring successors (sharded and envelope state)
};

// The replica format, both directions. A role's payload, the part of `regions` it sends to its
// ring successors and they keep, is its `replicate` regions in registration order; a message
// of region r travels on tag payload_index(regions)[r].
SnapshotLayout payload_layout(const std::vector<ProtectedRegion>& regions);
SnapshotLayout full_layout(const std::vector<ProtectedRegion>& regions);
// Region r's index in the payload, or -1 for a region the payload does not carry.
std::vector<int> payload_index(const std::vector<ProtectedRegion>& regions);
// A held replica (a committed view of a payload layout) read back by region: region r's bytes,
// or an empty span for a region the payload does not carry (and for an empty shard: the
// caller tells them apart by ProtectedRegion::replicate). `regions` are the holder's: they
// name the buffers, while the sizes are the owner's (shards differ by up to one element
// between roles, and can be empty). CorruptState if the view is not such a payload (another
// buffer count or name).
std::vector<std::span<const std::byte>> payload_by_region(const SnapshotView& replica,
                                                          const std::vector<ProtectedRegion>& regions);

struct RingPeer {
    int rank = -1;               // in the replication communicator
    std::string role_key;        // whose state ("dp1.tp0.pp0")
    SnapshotLayout payload;      // a predecessor's payload layout (for successors: unused)
};

// How long the last snapshot took on the background thread, and what it moved. The *_touched
// counters count every pass of the pipeline over a byte in memory (a read or a write), counted
// where the pass happens, not estimated: a copy is a read and a write, a hash of bytes not
// just written is a read, an MPI receive writes (the holder's one pass). The sender's MPI read
// of the payload it sends is the transfer's own pass, the same transfer the holder's receive
// counts: it is sent_bytes, not in sender_touched_bytes (job_stats reports both figures). A hash
// of at most kCacheResidentBytes done right after the same thread wrote them reads them from
// cache and is counted in hashed_in_cache_bytes instead.
struct SnapshotTiming {
    double seconds = 0;
    std::size_t copied_bytes = 0;  // live state -> own snapshot
    std::size_t sent_bytes = 0;    // payload to ring successors (all of them)
    std::size_t received_bytes = 0;  // predecessors' payloads held here
    double cpu_seconds = 0;          // CPU time of the protection thread (CLOCK_THREAD_CPUTIME_ID)
    double copy_seconds = 0;         // wall time of the copy+hash of the own state (without
                                     // the MPI progress calls made between its pieces)
    double copy_cpu_seconds = 0;     // the same on the thread's CPU clock: without the time
                                     // the (nice) thread waited for a core
    double replication_seconds = 0;  // first send posted -> every transfer complete (wall)
    // The part of replication_seconds this (nice) thread spent runnable but waiting for a core
    // (schedstat run_delay): replication_seconds minus it is the time the transfer took while
    // its thread could run.
    double replication_run_delay_seconds = 0;
    std::size_t sender_touched_bytes = 0;  // memory passes over the own state (copy, hash)
    std::size_t holder_touched_bytes = 0;  // memory passes over held payloads
    std::size_t hashed_in_cache_bytes = 0;
    // Own-state bytes whose checksum the copier computed at the source (the GPU hash): the
    // host read none of them to hash them (docs/gpu.md, "The hash on the GPU").
    std::size_t hashed_at_source_bytes = 0;
    // A device copier's D2H of the own state on the GPU's clock (RegionCopier::last_transfer);
    // 0 on the host path.
    std::size_t d2h_bytes = 0;
    double d2h_seconds = 0;
};

// A hash of bytes this thread has just written, at most this many, reads them from cache.
inline constexpr std::size_t kCacheResidentBytes = 256 << 10;

// Snapshot stores kept mapped across Protection objects, so that a repair keeps what survived:
// a store whose key (the (owner, holder) pair, on this node) and layout are asked for again is
// handed back as it is, mapped and populated, with its committed versions. Thread-safe.
class StorePool {
public:
    // The store `key` of `job`: the one kept here if its layout matches, else opened (or
    // created: segments fallocated and pre-faulted) and kept.
    std::shared_ptr<SnapshotStore> get(const std::string& job, const std::string& key,
                                       const SnapshotLayout& layout);
    // The store kept under `key`, or nullptr.
    std::shared_ptr<SnapshotStore> find(const std::string& key) const;
    // Forgets the stores whose keys are not in `keys` and returns them (their mappings may
    // still be read by transfers of an aborted epoch: the caller keeps them a while).
    std::vector<std::shared_ptr<SnapshotStore>> keep_only(const std::vector<std::string>& keys);

    // Blanks: segments made ahead of time (fallocated and pre-faulted) by a parked hot spare,
    // one per slot size in `slot_bytes`, named after `job` and `tag`; each is offered as soon
    // as it is made (this may run on another thread). A store that get() must create takes a
    // blank of its slot size instead, so that taking over a role does not allocate and fault
    // its stores while every rank waits for its first snapshot.
    void make_blanks(const std::string& job, const std::string& tag, const std::vector<std::size_t>& slot_bytes);
    // Unlinks the blanks not taken, and any make_blanks still makes (a role's stores are all
    // open, or the spare was released).
    void drop_blanks();
    std::size_t blank_bytes() const;
    // Shared memory the stores kept here hold (both slots of each).
    std::size_t store_bytes() const;
    int blanks_taken() const;  // by stores, so far

private:
    mutable std::mutex mutex_;
    std::map<std::string, std::shared_ptr<SnapshotStore>> stores_;
    std::vector<ShmSegment> blanks_;
    bool blanks_dropped_ = false;
    int blanks_taken_ = 0;
};

// Which parts of snapshot `step` to make. A repair's first snapshot makes only what is
// missing: surviving stores already hold the recovered version.
struct SnapshotScope {
    bool own = true;                 // copy the live state into the own store
    std::vector<bool> send_to;       // per setup.successors: send the payload; empty: to all
    std::vector<bool> receive_from;  // per setup.predecessors: receive; empty: from all
};

struct ProtectionSetup {
    std::string job;
    std::string store_prefix;    // prepended to role keys: the node ("n1."), so nodes never share
    std::string role_key;
    std::vector<ProtectedRegion> regions;
    std::vector<RingPeer> successors;    // they keep my payload
    std::vector<RingPeer> predecessors;  // I keep theirs
    std::size_t chunk_bytes = 256 << 10;  // one replication message
    // Called by the background thread once its transfers are under way (fault injection).
    std::function<void(std::int64_t step)> during_replication;
    // Moves bytes between the live regions and host memory: memcpy when empty (host state),
    // gpu::DeviceSnapshotCopier for state on a GPU (cudaMemcpyAsync into pinned shm).
    std::shared_ptr<RegionCopier> copier;
    // An earlier Protection of this process was aborted and is still kept alive: its matched
    // receives may still write. The first kLandingSnapshotsAfterAbort snapshots receive into
    // private landing buffers instead of the held slots (see Protection::snapshot).
    bool after_abort = false;
    // The protection thread's nice value (setpriority on the thread; 0: the trainer's).
    int thread_nice = 0;
    // While the step's thread waits for the snapshot, its core has nothing else to run: poll
    // MPI without sleeping then (a sleeping end stalls the transfer). Not where processes
    // share cores: there the poll would take a core from a peer still copying.
    bool poll_while_step_waits = true;
    // Where the stores come from and stay between Protection objects (null: a private pool).
    std::shared_ptr<StorePool> pool;
    // Stores not yet in the pool are opened or created by the protection thread before its
    // first snapshot (off a repair's critical path) instead of in the constructor.
    bool open_new_stores_in_background = false;
};

// How many snapshots after an abort receive through landing buffers: the runtime drops the
// aborted Protection after this many clean steps (Runtime's retired list).
inline constexpr std::size_t kLandingSnapshotsAfterAbort = 3;

// Where a predecessor's payload lands after an abort (ProtectionSetup::after_abort). Never
// zero-filled: MPI writes it whole before it is read, and a fill would be one more pass over
// memory in a repair's first step.
struct LandingBuffer {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t size = 0;
};

class Protection {
public:
    // Opens (or creates) the snapshot stores; `replication` is this object's own communicator.
    Protection(ProtectionSetup setup, Comm replication);
    ~Protection();
    Protection(const Protection&) = delete;
    Protection& operator=(const Protection&) = delete;

    // Starts snapshot `step` (the state after step `step`) in the background; `scope` limits
    // it to what is missing (a repair: see SnapshotScope).
    void start_snapshot(std::int64_t step, std::int64_t epoch, SnapshotScope scope = {});
    // Waits until the snapshot in flight is committed locally and at every successor's end
    // that this role sends to, and every predecessor's payload is committed here. Returns the
    // seconds spent waiting (the exposed overhead). Rethrows the background thread's failure
    // (ProcessFailure / CommRevoked) so the step loop can enter recovery.
    double wait();
    // Stops the background thread after a failure elsewhere: revokes the replication
    // communicator so pending transfers return, and joins. Never throws. The object must then
    // be kept alive a while (see Runtime's retired list): MPI may still write into its
    // receive buffers and read its send buffers for messages matched before the revoke.
    void abort() noexcept;

    // The own store (after the first wait() when open_new_stores_in_background).
    const SnapshotStore& own() const { return *own_; }
    // The peer copy of `owner_key` held here, or nullptr.
    const SnapshotStore* held(const std::string& owner_key) const;
    // Host memory this process holds for snapshots: 2x own + 2x each held payload in
    // /dev/shm, plus the private landing buffers while they exist (only after an abort).
    std::size_t host_bytes() const;
    const ProtectionSetup& setup() const { return setup_; }
    // Timing of the last committed snapshot (call after wait()).
    SnapshotTiming last_snapshot() const { return last_; }
    // Sums over every snapshot committed so far, and their count (call after wait()).
    SnapshotTiming total_snapshots() const { return total_; }
    std::size_t snapshot_count() const { return count_; }

private:
    void worker();
    void open_stores();
    void snapshot(std::int64_t step, std::int64_t epoch, const SnapshotScope& scope);

    ProtectionSetup setup_;
    Comm comm_;
    std::shared_ptr<SnapshotStore> own_;
    std::map<std::string, std::shared_ptr<SnapshotStore>> held_;  // by owner role key
    std::vector<LandingBuffer> landing_;  // per predecessor, only after an abort

    std::mutex mutex_;
    std::condition_variable cv_;
    bool pending_ = false;   // a snapshot was started and is not finished
    bool stopping_ = false;
    std::int64_t next_step_ = -1, next_epoch_ = 0;
    SnapshotScope next_scope_;
    std::exception_ptr failure_;
    std::atomic<bool> aborted_{false};  // no commit may follow an abort
    std::atomic<bool> step_waiting_{false};  // the step's thread is blocked in wait()
    SnapshotTiming last_;               // written by the worker before it signals completion
    SnapshotTiming total_;
    std::size_t count_ = 0;
    std::thread thread_;
};

}  // namespace flashrec::ft
