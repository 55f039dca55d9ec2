// The job's phase and current attempt, and the read-only view of the job that each part of the
// core (incident book, restart tracker, progress, node watch, report) gets with an input.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "classification.hpp"
#include "rank_view.hpp"
#include "flashrec/runtime/config.hpp"
#include "job_time.hpp"
#include "launch_layout.hpp"

namespace flashrec::launcher {

// Where the job stands; JobCore moves it only along the phase table below.
enum class JobPhase : std::uint8_t {
    running,                 // mpirun runs; failures are detected and recorded
    ending,                  // the launcher ended mpirun (a job-level decision, or it lingered)
    stopping,                // a signal asked the job to stop: SIGTERM went to mpirun
    awaiting_final_records,  // mpirun exited without every role_finished: the attempt's connections close
    tearing_down,            // the attempt is being torn down; what its ranks still say is history
    done,                    // the job is over
};
std::string_view to_string(JobPhase phase);

// The phase table: the moves the job may make (staying in a phase is always allowed).
//   running                -> ending, stopping, awaiting_final_records
//   ending                 -> stopping, awaiting_final_records
//   stopping               -> awaiting_final_records
//   awaiting_final_records -> tearing_down
//   tearing_down           -> running (the next attempt), done
//   done                   -> (nothing)
bool phase_move_allowed(JobPhase from, JobPhase to);
// A move the table does not hold is a bug in the core, not a state of the job.
class IllegalPhaseMove : public std::logic_error {
public:
    IllegalPhaseMove(JobPhase from, JobPhase to);
};
// Throws IllegalPhaseMove unless phase_move_allowed(from, to).
void check_phase_move(JobPhase from, JobPhase to);

// The attempt (one start of mpirun) the job is in.
struct CurrentAttempt {
    int index = 0;
    std::string kind;  // initial | warm_relaunch | cold_restart | checkpoint_for_requeue
    LaunchKind launch;
    int pid = 0;  // mpirun's
    SteadyTime start{};
    int status = 0;  // mpirun's wait status, once it exited
    SteadyTime exit_time{};
};

// A job-level decision taken while mpirun still ran (a whole node silent, the job stalled): the
// launcher kills mpirun, and the death is classified as this.
struct ForcedDeath {
    Observation observation;
    std::string detail;
    SteadyTime first_evidence{};
};

struct JobView {
    const config::Config& cfg;
    const Layout& layout;
    const CurrentAttempt& attempt;
    JobPhase phase;
    int interrupt_signal;  // the signal that asked the job to stop, 0 if none
    const std::set<int>& old_pids;  // processes of earlier attempts
    const std::vector<RankInfo>& ranks;  // the controller's view at the last tick
    const std::set<int>& live_pids;      // of the pids the core asked about, those alive then
    const std::string& local_host;
    std::int64_t last_step;  // the newest completed step (-1 before the first)
    const std::string& slurm_job_id;  // the allocation's job id ("" outside Slurm)
    bool direct_launch;               // the ranks are tasks of an srun step (slurm.launch)

    // The attempt is over for good: what its ranks still say is history.
    bool torn_down() const { return phase == JobPhase::tearing_down || phase == JobPhase::done; }
    bool mpirun_gone() const {
        return phase == JobPhase::awaiting_final_records || phase == JobPhase::tearing_down || phase == JobPhase::done;
    }
    // The current process of `role`, as of the last tick.
    const RankInfo* rank(const std::string& role) const {
        for (const auto& r : ranks)
            if (r.role == role) return &r;
        return nullptr;
    }
    bool alive_here(const std::string& hostname, int pid) const { return hostname == local_host && live_pids.count(pid); }
};

inline bool is_spare_role(const std::string& role) { return role.rfind("spare:", 0) == 0; }

}  // namespace flashrec::launcher
