// The spare pool's MPI side: hot spares parked inside MPI, and spawned (cold) replacements.
#pragma once
#include <string>
#include <vector>

#include "flashrec/ft/comm.hpp"

namespace flashrec::spares {

enum class Wake { released, recovery };

// A hot spare waits here, inside MPI on `universe`, until the job ends (released) or a failure
// revokes `universe` (recovery). Costs no CPU while waiting beyond MPI's progress engine.
Wake park(const ft::Comm& universe);
// Sent by the leader at the end of the job to every parked spare.
void release(const ft::Comm& universe, const std::vector<int>& spare_ranks);

// Parent side (collective over `survivors`): starts `count` new processes running `argv` (argv[0]
// is the executable) on `host` (empty: wherever the launcher has room), and merges them in.
// The result orders the survivors first, then the new processes.
ft::Comm spawn_and_merge(const ft::Comm& survivors, int count, const std::vector<std::string>& argv,
                         const std::string& host);
// Child side: true if this process was started by spawn_and_merge.
bool was_spawned();
// Child side: the merged communicator the parents got from spawn_and_merge.
ft::Comm join_parents();

}  // namespace flashrec::spares
