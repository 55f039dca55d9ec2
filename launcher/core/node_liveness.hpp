// Whether a node is alive, judged from its ranks' heartbeats to the control plane
// (detection.node_timeout_ms; docs/slurm.md, "Direct launch"). Without PRRTE nothing else says
// that a frozen, cut-off or crashed node is gone: its sockets stay open and its ranks just stop.
//
// A node is lost when every one of its ranks has been silent for the node timeout AND, since its
// last heartbeat, most other nodes kept talking: on a majority of the other nodes that have
// ranks, some rank delivered `evidence` heartbeats (half of the timeout's worth). The second
// condition is a count, not a time: on a loaded machine where every heartbeat comes late, the
// others' heartbeats come late too, and the silence must then last that much longer. A check
// that runs long after the previous one (this process was not running) judges nothing for two
// heartbeat periods, so that heartbeats queued meanwhile are read before anyone is judged.
//
// Pure: time passed in, no I/O; tests/launcher/test_node_liveness.cpp drives it with a fake clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace flashrec::launcher {

class NodeLiveness {
public:
    using Clock = std::chrono::steady_clock;

    NodeLiveness(std::chrono::milliseconds node_timeout, std::chrono::milliseconds heartbeat);

    // A rank (its role) registered from `node`; a role seen before moves to `node`.
    void watch(const std::string& role, const std::string& node, Clock::time_point now);
    // A rank that left (exited, or its loss is known otherwise): it no longer counts.
    void forget(const std::string& role);

    enum class Heard : std::uint8_t { ok, unknown_rank, from_lost_node };
    // A heartbeat. from_lost_node: the node was declared lost and is heard again (thawed,
    // reconnected): a zombie, whose processes the caller ends; the node stays lost.
    Heard heard(const std::string& role, Clock::time_point now);

    // The nodes lost since the previous call, each once.
    std::vector<std::string> check(Clock::time_point now);

    bool lost(const std::string& node) const { return lost_.contains(node); }
    // The longest silence of each node so far: the longest time between two heartbeats (or the
    // registration and the first) of the node's ranks as this process received them, and how many
    // heartbeats it got. A measurement for choosing detection.node_timeout_ms (bench/direct_launch/
    // false_loss.py), logged by the controller at its end (`node_silence`).
    struct Silence {
        std::chrono::milliseconds longest{0};
        std::uint64_t heartbeats = 0;
    };
    const std::map<std::string, Silence>& silences() const { return silences_; }
    // How many heartbeats of another node count as its keeping talking.
    int evidence() const { return evidence_; }

private:
    struct Rank {
        std::string node;
        // The arrival times of its last `evidence_` heartbeats (a ring; oldest at `next`).
        std::vector<Clock::time_point> beats;
        std::size_t next = 0;
        std::uint64_t count = 0;
        Clock::time_point last{};
    };
    // On `node`, some rank delivered `evidence_` heartbeats after `since`.
    bool kept_talking(const std::string& node, Clock::time_point since) const;
    Clock::time_point last_heard(const std::string& node) const;

    std::chrono::milliseconds node_timeout_;
    std::chrono::milliseconds heartbeat_;
    int evidence_;
    std::map<std::string, Rank> ranks_;                    // by role
    std::map<std::string, std::set<std::string>> nodes_;  // node -> roles
    std::set<std::string> lost_;
    std::map<std::string, Silence> silences_;  // by node
    Clock::time_point last_check_{};
    bool checked_ = false;
    Clock::time_point judge_from_{};  // no judgement before this (after a gap in the checks)
};

}  // namespace flashrec::launcher
