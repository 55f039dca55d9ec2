#include "node_liveness.hpp"

#include <algorithm>

namespace flashrec::launcher {

NodeLiveness::NodeLiveness(std::chrono::milliseconds node_timeout, std::chrono::milliseconds heartbeat)
    : node_timeout_(node_timeout),
      heartbeat_(heartbeat),
      evidence_(std::max<int>(2, static_cast<int>(node_timeout.count() / std::max<std::int64_t>(1, heartbeat.count()) / 2))) {}

void NodeLiveness::watch(const std::string& role, const std::string& node, Clock::time_point now) {
    forget(role);
    Rank& rank = ranks_[role];
    rank.node = node;
    rank.beats.assign(static_cast<std::size_t>(evidence_), Clock::time_point::min());
    rank.last = now;  // registering is being heard
    nodes_[node].insert(role);
}

void NodeLiveness::forget(const std::string& role) {
    const auto it = ranks_.find(role);
    if (it == ranks_.end()) return;
    auto node = nodes_.find(it->second.node);
    if (node != nodes_.end()) {
        node->second.erase(role);
        if (node->second.empty()) nodes_.erase(node);
    }
    ranks_.erase(it);
}

NodeLiveness::Heard NodeLiveness::heard(const std::string& role, Clock::time_point now) {
    const auto it = ranks_.find(role);
    if (it == ranks_.end()) return Heard::unknown_rank;
    Rank& rank = it->second;
    if (lost_.contains(rank.node)) return Heard::from_lost_node;
    Silence& silence = silences_[rank.node];
    silence.longest = std::max(silence.longest, std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard(rank.node)));
    ++silence.heartbeats;
    rank.beats[rank.next] = now;
    rank.next = (rank.next + 1) % rank.beats.size();
    ++rank.count;
    rank.last = now;
    return Heard::ok;
}

NodeLiveness::Clock::time_point NodeLiveness::last_heard(const std::string& node) const {
    Clock::time_point last = Clock::time_point::min();
    for (const auto& role : nodes_.at(node)) last = std::max(last, ranks_.at(role).last);
    return last;
}

bool NodeLiveness::kept_talking(const std::string& node, Clock::time_point since) const {
    for (const auto& role : nodes_.at(node)) {
        const Rank& rank = ranks_.at(role);
        // The oldest of its last `evidence_` heartbeats came after `since`: all of them did.
        if (rank.count >= static_cast<std::uint64_t>(evidence_) && rank.beats[rank.next] > since) return true;
    }
    return false;
}

std::vector<std::string> NodeLiveness::check(Clock::time_point now) {
    // This process was not running for a while: what the ranks sent meanwhile waits to be read.
    if (checked_ && now - last_check_ > node_timeout_ / 2) judge_from_ = now + 2 * heartbeat_;
    checked_ = true;
    last_check_ = now;
    std::vector<std::string> newly_lost;
    if (now < judge_from_) return newly_lost;
    for (const auto& [node, roles] : nodes_) {
        if (lost_.contains(node)) continue;
        const auto since = last_heard(node);
        if (now - since < node_timeout_) continue;
        int others = 0, talking = 0;
        for (const auto& [other, other_roles] : nodes_) {
            if (other == node || lost_.contains(other)) continue;
            ++others;
            if (kept_talking(other, since)) ++talking;
        }
        // Most other nodes kept talking while this one was silent; a node alone is never judged.
        if (others > 0 && 2 * talking > others) newly_lost.push_back(node);
    }
    for (const auto& node : newly_lost) lost_.insert(node);
    return newly_lost;
}

}  // namespace flashrec::launcher
