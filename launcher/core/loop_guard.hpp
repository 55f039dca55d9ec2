// Restarts that cannot loop: the same failure (its classification, at the same step) that comes
// back after a restart of the same kind, with no new step made in between, would come back after
// every further one (users of other tools report dozens of identical restart cycles). Progress is
// the one thing that clears what was seen: a step beyond every step completed before. Replayed
// steps are not progress. A different kind of restart (a warm relaunch, then HDF5) is an
// escalation, not a loop. Pure, like restart_policy.hpp; docs/launcher.md, "Restarts that cannot loop".
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "death_policy.hpp"

namespace flashrec::launcher {

struct FailureSignature {
    std::string classification;  // the rule's: job_lost, relaunch_requested, ...
    std::int64_t step = -1;      // the step the job died in
    // How mpirun ended (its wait status): a job whose mpirun was SIGKILLed from outside, then
    // whose relaunch lost a node's ranks (mpirun exit 1), did not fail the same way twice (the
    // soak's relaunch-node-loss, issue 29); a loop repeats its ending too.
    int mpirun_status = 0;
    // Whether the attempt completed a step (replayed ones count): a job killed in its loop, then a
    // relaunch that lost a node's ranks before its first step and whose mpirun the launcher ended
    // (SIGKILL both times, the same roles lost) is not the same failure twice (the soak, seed
    // 402); a relaunch that replays to the same failure is, and so are two relaunches that die
    // before their first step. (Which ranks the launcher saw go before mpirun is not part of it:
    // that depends on how fast their connections closed.)
    bool stepped = false;
    bool operator==(const FailureSignature&) const = default;
};

class RestartLoopGuard {
public:
    // A step completed: one beyond every earlier step is progress, and forgets every failure seen.
    void on_step(std::int64_t step);
    // The incident that had the same failure and was followed by a restart of `kind`, since the
    // last progress; nullopt when starting `kind` now is not a loop.
    std::optional<int> repeats(const FailureSignature& failure, Restart kind) const;
    // A restart of `kind` starts for `incident`'s failure.
    void restarted(const FailureSignature& failure, Restart kind, int incident);
    std::int64_t newest_step() const { return newest_step_; }

private:
    struct Seen {
        FailureSignature failure;
        Restart kind;
        int incident;
    };
    std::int64_t newest_step_ = -1;
    std::vector<Seen> seen_;
};

}  // namespace flashrec::launcher
