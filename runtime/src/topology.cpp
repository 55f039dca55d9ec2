#include "flashrec/runtime/topology.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

namespace flashrec::topology {

int role_index(const Shape& s, const Coord& c) { return c.tp + s.tp * (c.dp + s.dp * c.pp); }

Coord coord_of(const Shape& s, int index) {
    Coord c;
    c.tp = index % s.tp;
    c.dp = (index / s.tp) % s.dp;
    c.pp = index / (s.tp * s.dp);
    return c;
}

std::string role_key(const Coord& c) {
    return "dp" + std::to_string(c.dp) + ".tp" + std::to_string(c.tp) + ".pp" + std::to_string(c.pp);
}

Placement parse_placement(const std::string& name) {
    if (name == "block") return Placement::block;
    if (name == "cyclic") return Placement::cyclic;
    throw std::invalid_argument("unknown placement '" + name + "' (block | cyclic)");
}

std::vector<int> assign_roles(const Shape& shape, const std::vector<int>& node_of_process,
                              Placement placement) {
    const int n = static_cast<int>(node_of_process.size());
    if (n != shape.size())
        throw std::invalid_argument("assign_roles: " + std::to_string(n) + " processes for " +
                                    std::to_string(shape.size()) + " roles");
    // Processes grouped by node, nodes in order of their first process.
    std::vector<int> node_order;
    std::map<int, std::vector<int>> on_node;
    for (int p = 0; p < n; ++p) {
        auto& list = on_node[node_of_process[p]];
        if (list.empty()) node_order.push_back(node_of_process[p]);
        list.push_back(p);
    }
    std::vector<int> role_of(n, -1);
    if (placement == Placement::block) {
        int next_role = 0;
        for (int node : node_order)
            for (int p : on_node[node]) role_of[p] = next_role++;
    } else {
        std::map<int, size_t> used;
        int role = 0;
        while (role < n) {
            for (int node : node_order) {
                auto& u = used[node];
                if (u < on_node[node].size() && role < n) role_of[on_node[node][u++]] = role++;
            }
        }
    }
    return role_of;
}

std::vector<int> ring_successors(const Shape& shape, int owner_role, int k,
                                 const std::vector<int>& node_of_role, bool node_aware) {
    const Coord owner = coord_of(shape, owner_role);
    auto peer_at = [&](int dp, int shift) {
        Coord peer = owner;
        peer.dp = (dp + shift) % shape.dp;
        return role_index(shape, peer);
    };
    auto off_node = [&](int dp, int shift) {
        Coord from = owner;
        from.dp = dp;
        return node_of_role[static_cast<size_t>(peer_at(dp, shift))] !=
               node_of_role[static_cast<size_t>(role_index(shape, from))];
    };
    // A shift that is off-node for every owner of the ring keeps the load even (each role holds
    // exactly k copies); those come first, then shifts off-node for this owner, then the rest.
    std::vector<int> good_for_all, good_for_me, rest;
    for (int shift = 1; shift < shape.dp; ++shift) {
        bool all = true;
        for (int d = 0; d < shape.dp && all; ++d) all = off_node(d, shift);
        if (!node_aware || all) good_for_all.push_back(shift);
        else if (off_node(owner.dp, shift)) good_for_me.push_back(shift);
        else rest.push_back(shift);
    }
    std::vector<int> successors;
    for (const auto* list : {&good_for_all, &good_for_me, &rest})
        for (int shift : *list)
            if (static_cast<int>(successors.size()) < k) successors.push_back(peer_at(owner.dp, shift));
    return successors;
}

std::vector<int> ring_predecessors(const Shape& shape, int holder_role, int k,
                                   const std::vector<int>& node_of_role, bool node_aware) {
    const Coord holder = coord_of(shape, holder_role);
    std::vector<int> preds;
    for (int step = 1; step < shape.dp; ++step) {
        Coord owner = holder;
        owner.dp = (holder.dp - step + shape.dp) % shape.dp;
        const int r = role_index(shape, owner);
        const auto succ = ring_successors(shape, r, k, node_of_role, node_aware);
        if (std::find(succ.begin(), succ.end(), holder_role) != succ.end()) preds.push_back(r);
    }
    return preds;
}

}  // namespace flashrec::topology
