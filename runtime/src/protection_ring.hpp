// This role's place in the snapshot ring (docs/snapshots.md): the Protection that snapshots its
// state and replicates it to its ring successors, the stores it keeps mapped across repairs, the
// roles whose payloads it holds, and the segment names of all of them. A hot spare's blank slots,
// made ahead so that taking over a role costs no allocation, live here too. A part of
// Runtime::Impl: Impl::start_protection gives it what the rest of the process decides (the
// regions, the copier, the fault points) and it (re)starts the ring for the current topology.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/ft/protection.hpp"
#include "flashrec/ft/quarantine.hpp"
#include "flashrec/runtime/config.hpp"
#include "flashrec/runtime/membership.hpp"
#include "flashrec/runtime/topology.hpp"

namespace flashrec::runtime {

class ProtectionRing {
public:
    // Names follow the process's node and its role in `membership` as they change.
    ProtectionRing(const std::string& job, const std::string& node, const topology::Shape& shape,
                   const Membership& membership)
        : job_(job), node_(node), shape_(shape), membership_(membership) {}

    // Snapshot segments are named per node, so virtual nodes on one machine never share them.
    std::string store_prefix() const;
    // The segment key of this role's own snapshot on this node, and of the ring copy of
    // `owner`'s payload that this role holds here.
    std::string own_segment() const;
    std::string held_segment(int owner) const;
    // The own segment, then the held ones.
    std::vector<std::string> own_and_held_segments() const;
    // Unlinks this role's own snapshot and the ring copies it holds on this node.
    void unlink_own_segments() const;

    // What a start takes from the rest of the process.
    struct Start {
        const config::Protection& settings;
        std::vector<ft::ProtectedRegion> regions;  // the live state, in registration order
        ft::Comm replication;        // this epoch's dup of work for the protection thread (handed over)
        ft::Quarantine& quarantine;  // keeps the stores of pairs that no longer exist while mapped
        std::chrono::steady_clock::time_point deadline;  // of the agreement on the exchange
        std::function<void()> before_exchange;  // a fault point (phase=protection_start)
        // This process's own settings of the Protection (copier, thread, hooks), once the
        // exchange went through.
        std::function<void(ft::ProtectionSetup&)> complete;
        // Before each snapshot: device state waits for the work enqueued so far (null: host state).
        std::function<void()> state_ready;
    };
    // (Re)starts protection at `version` for the current topology (membership): drops a new
    // job's stale segments once, exchanges the ft::RingOffers (throws CommRevoked everywhere
    // unless every role got every one intact), keeps the stores of pairs that still exist, and
    // makes the Protection. The first snapshot() then makes only what the stores lack.
    void start(std::int64_t version, Start start);
    // Starts snapshot `version` of the live state (the first after start(): `version` itself).
    void snapshot(std::int64_t version);

    // Whether snapshot `version` was started (the step that starts from it waits for it).
    bool snapshotted(std::int64_t version) const { return protection && snapshot_version == version; }
    // The running Protection is aborted and kept (`quarantine`) while transfers of the aborted
    // epoch may still touch it.
    void retire(ft::Quarantine& quarantine);

    // A parked hot spare: its stores' slots of `slot_bytes` each (the leader's sizes), made on a
    // thread of its own at the lowest priority; `tag` names them.
    void make_blank_slots(const std::vector<std::size_t>& slot_bytes, const std::string& tag);
    bool blanks_made() const { return blanks_made_; }
    // Its blank maker stopped, untaken blanks unlinked.
    void drop_blanks();

    std::unique_ptr<ft::Protection> protection;
    // The version of the last snapshot started (protection.every: not every step's); its sync
    // point waits for it.
    std::int64_t snapshot_version = -1;
    std::vector<int> held_roles;  // whose payloads this process keeps (for recovery reports)
    // Versions of its segments that failed verification in a warm relaunch (segment key ->
    // versions): left out of this process's reports from then on.
    std::map<std::string, std::set<std::int64_t>> rejected_versions;
    bool fresh_snapshots = true;  // first protection start of a new job: drop stale segments
    int blanks_taken_before_repair = 0;  // stores->blanks_taken() when the last repair began
    // The snapshot stores of this process, kept mapped across repairs (docs/snapshots.md).
    std::shared_ptr<ft::StorePool> stores = std::make_shared<ft::StorePool>();

private:
    const std::string& job_;
    const std::string& node_;
    const topology::Shape& shape_;
    const Membership& membership_;
    std::function<void()> state_ready_;
    std::optional<ft::SnapshotScope> first_scope_;  // what the first snapshot after start() makes
    bool blanks_made_ = false;
    std::jthread blank_maker_;  // after `stores`: joined before the pool goes
};

}  // namespace flashrec::runtime
