// Whether replay is exact (docs/snapshots.md, "Checking that replay is exact"): after a repair,
// the versions beyond the one restored that this process's stores held committed before it
// must hash the same when the replay commits them again; and the start-up replay probe
// (protection.replay_check: start; interval.hpp's ReplayProbe), which rewinds the loop once at
// the first snapshotted version and judges at that version's sync point. A part of
// Runtime::Impl: it keeps what is compared and says what differs; the Impl does the rewinding
// and ends the job.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flashrec/ft/records.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/runtime/interval.hpp"

namespace flashrec::runtime {

class ReplayGuard {
public:
    using Log = std::function<void(const std::string&)>;
    using Emit = std::function<void(const nlohmann::json&)>;
    // `job`: the segments' job name (read when used); `debug`: log every exact version too.
    ReplayGuard(const std::string& job, const bool& debug, Log log, Emit emit)
        : job_(job), debug_(debug), log_(std::move(log)), emit_(std::move(emit)) {}

    // After a restore of version `restored`: the versions beyond it committed in `stores` (the
    // own store and the ring copies held here) as first committed; none when `stores` is empty.
    void note_versions_to_replay(std::int64_t restored, const std::vector<std::string>& stores);
    void forget() { checks_.clear(); }
    // At the sync point of step `version`, once its snapshot is committed here. False when a
    // version this process rewrote hashes differently (logged, replay_diverged emitted for `role`).
    bool check_replayed(std::int64_t version, const std::string& role);

    // The start-up probe: armed from `from` (a fresh start), or disarmed (from -1).
    void arm_probe(std::int64_t from) { probe_ = {}, probe_.from = from; }
    void disarm_probe() { probe_ = {}; }
    const ReplayProbe& probe() const { return probe_; }
    // The loop rewound from version `to` to probe().from; the restore took since `started`.
    void probe_rewound(std::int64_t to, std::chrono::steady_clock::time_point started);
    // The verdict's record (disarms the probe): passed when every role replayed bitwise.
    ft::records::ReplayProbe probe_verdict(bool everyone_exact);

private:
    struct Check {
        std::string store;           // segment key: the own store or a ring copy
        ft::CommittedHeader before;  // as committed before the failure
    };
    const std::string& job_;
    const bool& debug_;
    Log log_;
    Emit emit_;
    std::multimap<std::int64_t, Check> checks_;  // by version
    std::int64_t replay_from_ = -1;              // the version the replay started from
    ReplayProbe probe_;
    std::chrono::steady_clock::time_point probe_rewound_at_;
    double probe_restore_ms_ = 0;
};

}  // namespace flashrec::runtime
