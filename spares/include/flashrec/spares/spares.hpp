// The spare pool's MPI side: hot spares parked inside MPI, and spawned (cold) replacements.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "flashrec/ft/comm.hpp"

namespace flashrec::spares {

enum class Wake { released, recovery };

// A hot spare waits here, inside MPI on `universe`, until the job ends (released) or a failure
// revokes `universe` (recovery). Costs no CPU while waiting beyond MPI's progress engine.
// Given `on_slot_sizes`, it also takes the leader's slot sizes (send_slot_sizes) and hands
// them to it, still parked.
using SlotSizesHandler = std::function<void(const std::vector<std::size_t>& slot_bytes)>;
Wake park(const ft::Comm& universe, const SlotSizesHandler& on_slot_sizes = {});
// Sent by the leader at the end of the job to every parked spare.
void release(const ft::Comm& universe, const std::vector<int>& spare_ranks);
// Sent by the leader once it knows them: the sizes of the snapshot slots a role's stores take
// (its own store's two, then each held replica's two), so that a parked spare can make them
// ahead of time. At most kMaxSlotSizes.
inline constexpr int kMaxSlotSizes = 64;
void send_slot_sizes(const ft::Comm& universe, const std::vector<int>& spare_ranks,
                     const std::vector<std::size_t>& slot_bytes);

// Parent side (collective over `survivors`): starts `count` new processes running `argv` (argv[0]
// is the executable) on `host` (empty: wherever the launcher has room), and merges them in.
// The result orders the survivors first, then the new processes.
ft::Comm spawn_and_merge(const ft::Comm& survivors, int count, const std::vector<std::string>& argv,
                         const std::string& host);
// Child side: true if this process was started by spawn_and_merge.
bool was_spawned();
// Child side: the merged communicator the parents got from spawn_and_merge.
ft::Comm join_parents();

// ---- the pool: who takes dead roles, and the hot spares parked now ----------------------

// Who takes a repair's dead roles: idle hot spares first, spawned processes for the rest (when
// recovery.spawn is on). `kind` is what the recovery record reports: "none" (nobody died: a
// step the trainer abandoned), "hot", "spawned" or "hot+spawned". Pure.
struct Replacements {
    int to_spawn = 0;
    std::string kind;
};
Replacements replacements_for(int dead_roles, int idle_spares, bool spawn);

// What a spawned replacement runs and where: `exe` with the job's arguments (start_args[0]
// replaced) and `--flashrec-node <node>`, on `spare_host` when given (FLASHREC_SPARE_HOST),
// else on a virtual-node job on the node after the last ("node<nodes>"), else on this node.
struct SpawnCommand {
    std::vector<std::string> argv;
    std::string host;  // empty: wherever the launcher has room
};
SpawnCommand spawn_command(const std::vector<std::string>& start_args, const std::string& exe,
                           const char* spare_host, bool virtual_nodes, int nodes, const std::string& this_node);
// This process's executable (/proc/self/exe resolved), or "/proc/self/exe" if it cannot be read.
std::string this_executable();

// The hot spares parked now, as ranks of the job's `universe`.
class Pool {
public:
    // After a repair: every process the plan gave no role (role_of_process[p] < 0).
    void assign(const std::vector<int>& role_of_process);
    // At the job's start: ranks [first, end) of `universe`.
    void assign_range(int first, int end);
    const std::vector<int>& ranks() const { return ranks_; }
    // The job ended: the leader releases every parked spare (see release() above).
    void release_all(const ft::Comm& universe) const { release(universe, ranks_); }
    void send_slot_sizes_to_all(const ft::Comm& universe, const std::vector<std::size_t>& slot_bytes) const {
        send_slot_sizes(universe, ranks_, slot_bytes);
    }

private:
    std::vector<int> ranks_;
};

}  // namespace flashrec::spares
