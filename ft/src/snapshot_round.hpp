// One snapshot of a role's protected state, as Protection's background thread makes it
// (docs/snapshots.md): the predecessors' payloads are received into the slots that keep them,
// the own state is copied and hashed into its slot while its payload goes out to the
// successors message by message, and everything is committed once it all arrived. Each of
// those steps is a method; what they share (the transfers, the hash cursors, the timing)
// belongs to this object, which lives for one snapshot.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/protection.hpp"

namespace flashrec::ft {

class SnapshotRound {
public:
    // What the round works on; Protection owns all of it.
    struct Parts {
        const ProtectionSetup& setup;
        const Comm& comm;
        SnapshotStore& own;
        const std::map<std::string, std::shared_ptr<SnapshotStore>>& held;  // by owner role key
        // Per predecessor, after an abort: payloads land here and are copied into the slot when
        // complete (ProtectionSetup::after_abort). Null: they land in the held slots.
        std::vector<LandingBuffer>* landing;
        const std::atomic<bool>& aborted;       // Protection::abort: stop, commit nothing
        const std::atomic<bool>& step_waiting;  // the step's thread waits for this snapshot
    };
    SnapshotRound(Parts parts, std::int64_t step, std::int64_t epoch, const SnapshotScope& scope);

    // Makes the snapshot and returns what it took and moved. Throws when a transfer fails or
    // the round is aborted; nothing is committed then that did not arrive whole.
    SnapshotTiming run();

private:
    void post_receives();
    // A repair's survivor: the own slot holds `step` already; its payload goes to the
    // successors that lack it, from that committed slot, verified, without copying.
    void send_committed_own();
    // The own state into its slot, piece by piece (copied and hashed while in cache); each
    // payload message is sent as soon as its last piece landed, with MPI progressed between.
    void copy_own_and_send();
    void send(const std::byte* data, std::size_t bytes, int tag);
    // Hashes a received payload chunk once it and every chunk before it in its buffer arrived.
    void on_completed(const std::vector<std::size_t>& done);
    void progress();  // inside the copy: one test of the transfers
    void drain();     // after it: the rest, sleeping a little longer each time nothing arrived
    void commit_held();

    // A posted transfer, by index: a receive into `store`'s buffer, or a send (store null).
    struct Transfer {
        SnapshotStore* store = nullptr;
        std::size_t buffer = 0, offset = 0, bytes = 0;
    };

    Parts parts_;
    std::int64_t step_, epoch_;
    const SnapshotScope& scope_;
    const std::size_t chunk_;        // one replication message
    const std::size_t piece_bytes_;  // one copy-and-hash piece of host state
    std::vector<int> payload_tag_;   // per region; -1: not replicated
    std::vector<const RingPeer*> receivers_;  // the successors this snapshot sends to
    Transfers transfers_;
    std::vector<Transfer> posted_;
    std::vector<SnapshotStore*> held_stores_;  // per predecessor; null: it holds `step` already
    std::map<std::pair<SnapshotStore*, std::size_t>, std::size_t> hashed_up_to_;
    std::map<std::pair<SnapshotStore*, std::size_t>, std::map<std::size_t, std::size_t>> arrived_;
    SnapshotTiming timing_;
    std::chrono::steady_clock::time_point start_, first_send_{};
    double cpu_start_ = 0, first_send_run_delay_ = 0;
    double progress_seconds_ = 0, progress_cpu_ = 0;  // inside the copy loop, not the copy's
};

}  // namespace flashrec::ft
