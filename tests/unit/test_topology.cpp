#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "flashrec/runtime/topology.hpp"

using namespace flashrec::topology;

TEST_CASE("role index and coordinates are inverse, tp fastest") {
    for (Shape s : {Shape{4, 1, 1}, Shape{3, 2, 1}, Shape{2, 2, 3}, Shape{5, 1, 2}}) {
        for (int r = 0; r < s.size(); ++r) CHECK(role_index(s, coord_of(s, r)) == r);
    }
    const Shape s{2, 2, 2};
    CHECK(coord_of(s, 1) == Coord{0, 1, 0});
    CHECK(coord_of(s, 2) == Coord{1, 0, 0});
    CHECK(coord_of(s, 4) == Coord{0, 0, 1});
    CHECK(role_key(Coord{3, 0, 1}) == "dp3.tp0.pp1");
}

TEST_CASE("block placement fills node after node; cyclic deals roles round-robin") {
    const Shape s{4, 1, 1};
    const std::vector<int> nodes{0, 0, 1, 1};
    CHECK(assign_roles(s, nodes, Placement::block) == std::vector<int>{0, 1, 2, 3});
    CHECK(assign_roles(s, nodes, Placement::cyclic) == std::vector<int>{0, 2, 1, 3});
    // Interleaved process order: placement follows nodes, not ranks.
    CHECK(assign_roles(s, {1, 0, 1, 0}, Placement::block) == std::vector<int>{0, 2, 1, 3});
    // Odd sizes: 5 processes on 2 nodes (3 + 2).
    const auto odd = assign_roles(Shape{5, 1, 1}, {0, 0, 0, 1, 1}, Placement::cyclic);
    CHECK(odd == std::vector<int>{0, 2, 4, 1, 3});
    CHECK_THROWS(assign_roles(s, {0, 0, 1}, Placement::block));
    CHECK_THROWS(parse_placement("diagonal"));
}

TEST_CASE("block placement keeps TP groups on one node") {
    const Shape s{2, 2, 1};
    const auto roles = assign_roles(s, {0, 0, 1, 1}, Placement::block);
    for (int p = 0; p < 4; p += 2)
        CHECK(coord_of(s, roles[p]).dp == coord_of(s, roles[p + 1]).dp);
}

TEST_CASE("ring successors are DP peers with the same tp/pp, off-node first") {
    const Shape s{4, 1, 1};
    const std::vector<int> node_of_role{0, 0, 1, 1};
    // Role 0's next peer (1) shares its node: node-aware skips it.
    CHECK(ring_successors(s, 0, 1, node_of_role, true) == std::vector<int>{2});
    CHECK(ring_successors(s, 0, 1, node_of_role, false) == std::vector<int>{1});
    // One shift (2) is off-node for every role: the ring uses it, so each role holds one copy.
    CHECK(ring_successors(s, 1, 1, node_of_role, true) == std::vector<int>{3});
    CHECK(ring_successors(s, 2, 1, node_of_role, true) == std::vector<int>{0});
    CHECK(ring_successors(s, 0, 3, node_of_role, true) == std::vector<int>{2, 3, 1});
    // Cyclic placement (nodes 0,1,0,1): the plain next peer is already off-node.
    CHECK(ring_successors(s, 0, 1, {0, 1, 0, 1}, true) == std::vector<int>{1});
    // No shift suits everyone (a replacement moved role 3 to node 2): per-owner choice.
    CHECK(ring_successors(s, 0, 1, {0, 0, 1, 2}, true) == std::vector<int>{2});
    // All on one node: nothing to skip to, plain ring.
    CHECK(ring_successors(s, 3, 1, {0, 0, 0, 0}, true) == std::vector<int>{0});
    // With tp = 2 the ring stays inside the tp slice.
    const Shape t{3, 2, 1};
    for (int r = 0; r < t.size(); ++r)
        for (int succ : ring_successors(t, r, 2, std::vector<int>(6, 0), true))
            CHECK(coord_of(t, succ).tp == coord_of(t, r).tp);
    // dp = 1: nobody to replicate to.
    CHECK(ring_successors(Shape{1, 2, 1}, 0, 1, {0, 0}, true).empty());
}

TEST_CASE("predecessors invert successors; every role is held k times, never on its own node") {
    for (int k : {1, 2}) {
        for (Shape s : {Shape{4, 1, 1}, Shape{5, 1, 1}, Shape{3, 2, 1}, Shape{6, 1, 2}}) {
            std::vector<int> node_of_role(static_cast<size_t>(s.size()));
            for (int r = 0; r < s.size(); ++r) node_of_role[static_cast<size_t>(r)] = r % 3;
            std::multiset<int> held;
            for (int h = 0; h < s.size(); ++h)
                for (int owner : ring_predecessors(s, h, k, node_of_role, true)) {
                    const auto succ = ring_successors(s, owner, k, node_of_role, true);
                    CHECK(std::find(succ.begin(), succ.end(), h) != succ.end());
                    held.insert(owner);
                }
            for (int r = 0; r < s.size(); ++r) {
                CHECK(static_cast<int>(held.count(r)) == std::min(k, s.dp - 1));
                const auto succ = ring_successors(s, r, k, node_of_role, true);
                // Off-node holders exist for every role here, so the first is off-node.
                if (!succ.empty())
                    CHECK(node_of_role[static_cast<size_t>(succ[0])] != node_of_role[static_cast<size_t>(r)]);
            }
        }
    }
}

TEST_CASE("dp 2 x tp 2 x pp 2 on 4 nodes (the GPT fault matrix): each role's replica is its (tp, pp) DP peer, off-node") {
    const Shape s{2, 2, 2};
    const std::vector<int> process_nodes{0, 0, 1, 1, 2, 2, 3, 3};
    for (Placement placement : {Placement::block, Placement::cyclic}) {
        const auto role_of = assign_roles(s, process_nodes, placement);
        std::vector<int> node_of_role(8);
        for (int p = 0; p < 8; ++p) node_of_role[static_cast<size_t>(role_of[static_cast<size_t>(p)])] = process_nodes[static_cast<size_t>(p)];
        for (int r = 0; r < s.size(); ++r) {
            const auto succ = ring_successors(s, r, 1, node_of_role, true);
            REQUIRE(succ.size() == 1);
            const Coord me = coord_of(s, r), peer = coord_of(s, succ[0]);
            CHECK(peer.tp == me.tp);
            CHECK(peer.pp == me.pp);
            CHECK(peer.dp != me.dp);
            CHECK(node_of_role[static_cast<size_t>(succ[0])] != node_of_role[static_cast<size_t>(r)]);
            CHECK(ring_predecessors(s, succ[0], 1, node_of_role, true) == std::vector<int>{r});
        }
    }
    // Block keeps each TP pair on one node (its TP sums stay on-node); cyclic spreads them.
    const auto block = assign_roles(s, process_nodes, Placement::block);
    for (int p = 0; p < 8; p += 2) {
        CHECK(coord_of(s, block[static_cast<size_t>(p)]).dp == coord_of(s, block[static_cast<size_t>(p + 1)]).dp);
        CHECK(coord_of(s, block[static_cast<size_t>(p)]).pp == coord_of(s, block[static_cast<size_t>(p + 1)]).pp);
    }
}
