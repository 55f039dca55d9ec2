// The HDF5 fallback checkpoint, seen from the step loop (docs/checkpoint-format.md):
// every checkpoint.every_steps steps the *committed* snapshot (already in node-local shared
// memory: no new copy of live state, no stall) is written to HDF5 by a background thread, and a
// step directory is published only after every rank's file is complete. The same files restore
// a job from scratch (--resume) and are the in-job fallback when some role's state is lost in
// memory everywhere (tier 3).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/records.hpp"
#include "flashrec/runtime/config.hpp"
#include "flashrec/runtime/topology.hpp"

namespace flashrec {
struct ProtectedBuffer;
}

namespace flashrec::runtime {

// What the checkpointer needs to know about this process; refreshed after every repair.
struct CheckpointIdentity {
    topology::Shape shape;
    int role_index = -1;
    std::string role_key;          // "dp1.tp0.pp0"
    std::string snapshot_key;      // key of this role's own snapshot store (node prefix + role)
    std::int64_t epoch = 0;
};

class Checkpointer {
public:
    // `buffers` are the trainer's registered buffers (names, types, sizes; the data pointers are
    // only used by restore). `comm` is a communicator of the active ranks for this object's own
    // use (a dup of work); it is replaced by rebind() after a repair.
    // `on_published` gets each checkpoint this rank publishes (rank 0 of the checkpoint), on the
    // worker thread: the runtime sends it to the launcher as a typed record.
    using Published = std::function<void(const ft::records::CheckpointPublished&)>;
    Checkpointer(const config::Config& cfg, const std::vector<ProtectedBuffer>& buffers,
                 CheckpointIdentity identity, ft::Comm comm, Published on_published = {});
    ~Checkpointer();

    // Called by every active rank once snapshot `version` (the state after `version` steps) is
    // committed everywhere; starts a checkpoint of it in the background when
    // version % every_steps == 0 (and checkpoints are configured). Never blocks on I/O.
    void committed(std::int64_t version);
    // Starts a checkpoint of committed snapshot `version` whatever every_steps says (the
    // checkpoint-and-requeue policy). Needs checkpoint.dir; never blocks on I/O.
    void checkpoint_now(std::int64_t version);
    // The loop ended: waits for the checkpoint in flight (if any) to be published.
    void finish();
    // A failure: abandons the checkpoint in flight (it is never published; its staging directory
    // is cleaned later) and revokes this object's communicator. Never throws.
    void abort() noexcept;
    // After a repair: new identity and communicator.
    void rebind(CheckpointIdentity identity, ft::Comm comm);

    // Newest checkpoint in checkpoint.dir that verifies for every role of `shape`, as the
    // version (steps completed) it holds; nullopt with `why` filled when there is none.
    static std::optional<std::int64_t> newest_complete(const config::Config& cfg,
                                                       const topology::Shape& shape, std::string& why);
    // Reads this role's buffers of checkpoint `version` into the registered (live) buffers,
    // verifying every checksum; throws CorruptState / CheckpointMismatch naming file and buffer.
    static void restore(const config::Config& cfg, const std::vector<ProtectedBuffer>& buffers,
                        const std::string& role_key, std::int64_t version);

private:
    void request(std::int64_t version);
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace flashrec::runtime
