// The launcher's book of the allocation's nodes: which host names are the job's nodes, which
// nodes were lost in this attempt, which ones flashrec gave up on (never used again), and where
// a rank ran. A value type with pure methods; NodeWatch (node_watch.hpp) keeps it at work.
#pragma once
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launch_layout.hpp"

namespace flashrec::launcher {

class NodeBook {
public:
    NodeBook() = default;  // outside an allocation: no node is known by its host name
    explicit NodeBook(std::vector<std::string> allocation_nodes) : nodes_(std::move(allocation_nodes)) {}

    // The allocation's name for a host a rank or PRRTE reported ("frnode3" for
    // "frnode3.cluster"), or "" if it is none of the job's nodes.
    std::string node_of_host(const std::string& host) const;
    // Where a rank ran: under Slurm the host it reported (its role may have moved on since),
    // else the layout's node of its role.
    std::string node_of_rank(const Layout& layout, const std::string& hostname, const std::string& role) const;

    // Lost in the current attempt (its ranks are part of that loss).
    bool is_lost(const std::string& node) const { return lost_.count(node) > 0; }
    bool any_lost() const { return !lost_.empty(); }
    const std::set<std::string>& lost() const { return lost_; }
    void mark_lost(const std::string& node) { lost_.insert(node); }
    // The nodes lost in this attempt, forgotten as lost (the caller gives up on them).
    std::set<std::string> take_lost() { return std::exchange(lost_, {}); }

    // Named by PRRTE while the attempt was starting: not lost until a check at the attempt's end
    // says so (NodeWatch::settle_suspects).
    void mark_suspect(const std::string& node) { suspects_.insert(node); }
    bool any_suspect() const { return !suspects_.empty(); }
    std::set<std::string> take_suspects() { return std::exchange(suspects_, {}); }

    // Given up on: never used again. false if it already was.
    bool give_up(const std::string& node) { return bad_.insert(node).second; }
    bool given_up(const std::string& node) const { return bad_.count(node) > 0; }
    // The layout's nodes (of processes or reserved) that were given up on: what a relaunch moves off.
    std::set<std::string> given_up_in(const Layout& layout) const;

private:
    std::vector<std::string> nodes_;
    std::set<std::string> lost_, bad_, suspects_;
};

}  // namespace flashrec::launcher
