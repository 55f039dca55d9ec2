// What a recovery epoch decides, as a pure function of what every live process reported, so
// every process computes the same plan without another round of messages.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "flashrec/runtime/topology.hpp"

namespace flashrec::recovery {

// Committed snapshot versions a process can vouch for (verified), newest first; -1 = none.
struct Versions {
    std::int64_t newest = -1, older = -1;
    bool has(std::int64_t v) const { return v >= 0 && (v == newest || v == older); }
};

struct HeldCopy {
    int owner_role = -1;
    Versions versions;
};

// One live process's report. Roles are role indices; -1 for a hot spare or a new process.
struct Report {
    int role = -1;
    std::string node;            // node name ("node2" or a hostname)
    std::int64_t id = 0;         // stable process id: spares are taken in id order
    std::int64_t step = -1;      // the step it was in when recovery began
    bool has_replicated = false; // its role has replicated buffers
    Versions own;
    std::vector<HeldCopy> held;
    // Its state is still what the job started from (the trainer's initialisation, or the
    // --resume checkpoint) and no version has been committed everywhere yet: a failure now
    // loses nothing a replacement cannot rebuild the same way.
    bool pristine = false;
    // Own snapshots of the other roles placed on this process's node, as they are in its
    // /dev/shm: a process that dies on a live node leaves them intact (issue 15, case 2).
    std::vector<HeldCopy> local;
    // A live role: the bytes its snapshot stores take in /dev/shm, what a spare taking a role
    // needs there (spare admission, docs/recovery.md).
    std::int64_t shm_need = 0;
    // A spare (role -1), checked by itself as it reports: what its node's /dev/shm can give its
    // stores (free space plus the slots it made ahead; -1: not checked), and a check it failed on
    // its own (its GPU), empty when none.
    std::int64_t shm_room = -1;
    std::string unhealthy;
    // Its slot on its node (which of the node's GPUs it uses, Runtime::local_slot): a role's
    // current slot, a hot spare's own; -1 for a spawned process, which has none yet.
    int slot = -1;
};
std::string serialize(const Report& r);
Report deserialize(const std::string& text);  // throws flashrec::Error on garbage

struct Replacement {
    int role = -1;
    int process = -1;            // index into the reports (= rank in the new universe)
    int replicated_from = -1;    // role that sends the replicated buffers (-1: none needed)
    int payload_from = -1;       // role that sends the sharded + envelope buffers
    // payload_from sends them from the dead owner's own snapshot on its node (the ring copy
    // is gone with its holder), not from a ring copy it holds.
    bool payload_from_local = false;
};

// A spare the plan passed over because it failed its admission check.
struct RejectedSpare {
    int process = -1;    // index into the reports
    std::string reason;
    bool operator==(const RejectedSpare&) const = default;
};

// Why `spare` may not take a role whose stores need `shm_need` bytes of /dev/shm: its own failed
// check, or too little room; empty: admitted. (Its process answers: it is in the exchange.) Pure.
std::string admission_problem(const Report& spare, std::int64_t shm_need);
// Plan::slot_of_role from the reports and who holds which role after the repair. Pure.
std::vector<int> slots_after(const std::vector<Report>& reports, const std::vector<int>& role_of_process,
                             int n_roles);
// The /dev/shm bytes a role needs: the most any live role's stores take (a dead role's are like
// its peers'). Pure.
std::int64_t shm_need(const std::vector<Report>& reports);
// How many spares would pass admission now: how many dead roles hot spares can take (the rest
// are spawned). Pure.
int admissible_spares(const std::vector<Report>& reports);

struct Plan {
    std::vector<int> dead_roles;
    std::vector<Replacement> replacements;
    int missing_spares = 0;      // dead roles without a spare to take them
    // Spares tried for a dead role, in id order, that failed admission (never given a role);
    // spares not needed were not tried.
    std::vector<RejectedSpare> rejected_spares;
    std::int64_t version = -1;   // R: the newest version complete for every role; -1 if none
    std::string problem;         // why there is no version (which role's state is lost)
    std::vector<int> role_of_process;  // after the repair (-1: stays a spare)
    std::vector<int> node_of_role;     // node ids (equal id = same node) after the repair
    // Each role's slot on its node after the repair (docs/gpu.md, "The replacement's GPU"): a
    // live role keeps its own; a replacement takes the lowest slot of its node that no live role
    // and no other spare there holds (the dead role's, when it died on that node; else the
    // spare's own), so it never takes a GPU a live process uses.
    std::vector<int> slot_of_role;
    std::int64_t steps_replayed = 0;   // completed steps that will run again
    bool from_checkpoint = false;      // tier 3: every role restores `version` from HDF5
    std::int64_t furthest_step = -1;   // the furthest step any live process had reached
    // A failure before the first version was committed everywhere (every live role pristine):
    // survivors keep their untouched state, replacements build theirs as at the start, and
    // the job protects `version` again before its first step.
    bool initial = false;
};

// in_job: live roles restore their own newest snapshots (they are current). relaunch: a live
// role may be restored in place from a replica when its node's own snapshots lack the version.
enum class Mode { in_job, relaunch };
Plan plan_repair(const topology::Shape& shape, const std::vector<Report>& reports, Mode mode = Mode::in_job);

// This process's part in the job a recovery leaves. (Whether the state restored is the job's
// initial one is the plan's: Plan::initial.)
enum class Part {
    survivor,   // kept its role: restores its own snapshot and sends the replacements theirs
    recovered,  // took a dead role: its state arrives from the survivors (or the checkpoint)
    spare,      // holds no role: parks again
};

// What one recovery decided for one process, applied in one place (Runtime::Impl::apply).
// How long each phase of a recovery took on this process, in the order they ended.
struct Timeline {
    std::chrono::steady_clock::time_point start, last;
    std::int64_t noticed_unix_us = 0;  // wall clock: comparable with the fault injector's
    std::int64_t in_loop_unix_us = 0;  // wall clock when "resumed" ended (back in the loop)
    // GPU path: the failed NCCL communicator's release before the runtime heard of the failure;
    // begin() makes it the first phase, "nccl_release".
    double nccl_release_ms = 0;
    std::vector<std::pair<std::string, double>> phases;  // name, ms
    bool debug = false;  // logging.level: debug prints every phase as it ends
    void begin();
    void mark(const std::string& phase);
};

struct RepairOutcome {
    Plan plan;
    int role = -1;              // this process's role index from now on (-1: a spare)
    Part part = Part::spare;
    int tier = 1;               // 1: from memory, in the job; 2: warm relaunch; 3: HDF5 checkpoint
    std::string replacement;    // who took the dead roles: none | hot | spawned | hot+spawned | relaunch
    Timeline timeline;          // the phases so far; apply() starts it from the epoch's, later phases add to it
};
// The outcome of an in-job plan for the process at `process` (its rank in the new universe)
// that held role `current_role` (-1: a spare or a new process). Pure.
RepairOutcome outcome_of(Plan plan, int process, int current_role, std::string replacement);

}  // namespace flashrec::recovery
