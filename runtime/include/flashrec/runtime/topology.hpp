// Logical roles and where they live. Pure functions: no MPI, so they are unit-tested alone.
#pragma once
#include <string>
#include <vector>

namespace flashrec::topology {

struct Shape {
    int dp = 1, tp = 1, pp = 1;
    int size() const { return dp * tp * pp; }
};

struct Coord {
    int dp = 0, tp = 0, pp = 0;
    bool operator==(const Coord&) const = default;
};

// Roles are numbered with tp fastest, then dp, then pp, so a block placement keeps a TP group
// on one node (TP traffic is the heaviest) and spreads DP across nodes.
int role_index(const Shape& shape, const Coord& c);
Coord coord_of(const Shape& shape, int role_index);
std::string role_key(const Coord& c);  // "dp3.tp0.pp1": names state, segments and files

enum class Placement { block, cyclic };
Placement parse_placement(const std::string& name);

// Which role each active process takes. `node_of_process[i]` is the node id of the i-th active
// process (processes in world-rank order). block: fill node after node; cyclic: deal roles
// round-robin over nodes. Returns role index per process.
std::vector<int> assign_roles(const Shape& shape, const std::vector<int>& node_of_process,
                              Placement placement);

// The DP ring of a role: its DP peers (same tp, pp) in dp order. Replicas of a role's sharded
// state go to `k` successors on this ring; node-aware placement skips peers on the owner's node
// while peers on other nodes remain. `node_of_role[r]` is the node holding role r.
std::vector<int> ring_successors(const Shape& shape, int owner_role, int k,
                                 const std::vector<int>& node_of_role, bool node_aware);
// Roles whose replicas this role holds (the inverse of ring_successors), in ring order.
std::vector<int> ring_predecessors(const Shape& shape, int holder_role, int k,
                                   const std::vector<int>& node_of_role, bool node_aware);

}  // namespace flashrec::topology
