// One restore of a role's state at version R after a repair: the mirror of SnapshotRound
// (docs/snapshots.md, docs/recovery.md). A survivor restores its own state from its own
// snapshot, then serves the replacements what it keeps for them (the replicated buffers from its
// live state, a dead role's payload from the ring copy it holds or from that role's own snapshot
// on this node). A replacement receives its state from the survivors the plan names. Whatever a
// transfer of this round may still touch after an abort (the transfers, the stores and readers
// they read, the staging of device buffers) stays in the quarantine, as with SnapshotRound's.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/protection.hpp"
#include "flashrec/ft/quarantine.hpp"
#include "flashrec/ft/snapshot.hpp"

namespace flashrec::ft {

// The live state a restore writes: the protected buffers in registration order (`replicate`:
// sharded and envelope buffers, which a payload carries; the others are replicated across DP).
struct RestoreTarget {
    std::vector<ProtectedRegion> regions;
    std::vector<bool> on_device;  // region r is device memory: written through to_device only
    // Copies host bytes into the device regions `which` (after the compute stream's work) and
    // waits until they are in place.
    std::function<void(const std::vector<std::size_t>& which, const std::vector<std::span<const std::byte>>& from)>
        to_device;
    bool any_on_device() const;
};

class RestoreRound {
public:
    // What the round works on; the Runtime owns all of it.
    struct Parts {
        const std::string& job;
        StorePool& stores;        // the stores this process keeps mapped (read first: no page faults)
        Quarantine& quarantine;   // keeps what an aborted transfer may still touch
        const Comm& work;         // the repaired job's roles, by role index
        const RestoreTarget& target;
    };
    RestoreRound(Parts parts, std::int64_t version) : parts_(parts), version_(version) {}

    // --- the survivor side ---
    // Its own state back to the version from `own_store` (host buffers copied in the pass that
    // verifies them; device buffers through to_device). Throws ShardLost naming `role`.
    void restore_own(const std::string& own_store, const std::string& role);
    // What a survivor sends one replacement (the plan's Replacement, as ft sees it).
    struct Serve {
        int to = -1;              // the replacement's role (its rank in `work`)
        bool replicated = false;  // the replicated buffers, from the live state just restored
        // The dead owner's payload (sharded and envelope buffers): from this store, a ring copy
        // held here in the replica format, or (own_snapshot) the owner's own snapshot on this node.
        std::optional<std::string> payload_store;
        bool own_snapshot = false;
        std::string owner;        // its role key, for errors
    };
    // After restore_own: sends every replacement what it is served from here, and waits until
    // all of it went out. Throws ShardLost when a copy fails verification, or an MPI error.
    void serve(const std::vector<Serve>& serves);

    // --- the replacement side ---
    // Receives every buffer: replicated ones from `replicated_from`, the others from
    // `payload_from` (ranks in `work`); device buffers through host staging (quarantined).
    void receive(int replicated_from, int payload_from);

private:
    // The committed version in `key`, copied into `into` as it is verified (host buffers), or
    // only verified (into empty). The store or reader stays in the quarantine.
    SnapshotView committed_in(const std::string& key, std::span<const std::span<std::byte>> into);
    std::vector<std::span<std::byte>> live_host() const;  // empty when any buffer is on a device

    Parts parts_;
    std::int64_t version_;
    SnapshotView own_;  // restore_own's view: a device buffer's replicated bytes are served from it
};

}  // namespace flashrec::ft
