// Who this process is in the current topology epoch, and that epoch's communicators. Owned by
// Runtime::Impl; a recovery replaces the universe and role, then rebuilds the rest.
#pragma once
#include <chrono>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/runtime/topology.hpp"

namespace flashrec::runtime {

struct Membership {
    int role_index = -1;            // -1 while this process is a parked hot spare
    std::vector<int> node_of_role;  // node ids, equal = same node
    std::vector<int> slot_of_role;  // each role's slot on its node (Runtime::local_slot)
    int own_slot = -1;              // this process's slot as a spare (-1: spawned, none yet)
    int epoch = 0;                  // topology epoch: +1 per repair

    ft::Comm universe;     // every live process: actives and hot spares
    ft::Comm work;         // actives, ordered by role
    ft::Comm dp, tp, pp;   // derived from work
    ft::Comm replication;  // dup of work for the protection thread (handed to it)
    ft::Comm checkpoint;   // dup of work for the checkpointer (handed to it)

    // Derives work, dp, tp, pp, replication and checkpoint from `universe` and role_index
    // (collective over universe; a parked spare gets null communicators).
    void build_communicators(const topology::Shape& shape, std::chrono::steady_clock::time_point deadline);
    // Revokes every communicator this process computes on, so peers blocked in them return.
    void revoke_all() noexcept;
    // Frees every communicator, derived ones first (a clean exit, before MPI_Finalize).
    void free_all();
};

}  // namespace flashrec::runtime
