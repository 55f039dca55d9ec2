// The incident book: every failure the launcher records (the `failure` records), from hung and
// lost ranks, device errors and the job's deaths, with what the ranks said that explains them
// (faults fired, exit codes asked for, MPI errors, spares released). A stalled rank is confirmed
// before it is killed; a lost rank gets a moment for its last words; a whole node silent at once
// is the node's failure. Pure: time passed in, effects returned.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "failure_record.hpp"
#include "job_effects.hpp"
#include "job_inputs.hpp"
#include "job_view.hpp"
#include "node_watch.hpp"

namespace flashrec::launcher {

// Where a hung rank is killed from (KillRank::on_node; none = kill(2) here, which for a process
// on another host is `remote`: its node goes). mpirun's ranks on this host are this launcher's
// descendants. Under Slurm a rank on another node whose other ranks still send heartbeats, and
// under direct launch every rank on this host (a task of srun's step, a child of slurmstepd), is
// killed by a step of the job on its node: that rank alone, and its node stays in the job.
std::optional<KillOnNode> kill_route(const RankIncident& rank, const JobView& job, const NodeBook& nodes,
                                     SteadyTime now);

class IncidentBook {
public:
    // `stall_confirm`: how long a stall is watched before the rank is killed; `silent_window`:
    // how close together a node's ranks must go silent for the node's failure.
    IncidentBook(std::chrono::milliseconds stall_confirm, std::chrono::milliseconds silent_window)
        : stall_confirm_(stall_confirm), silent_nodes_(silent_window) {}

    // A hung rank. Returns a forced death when its whole node went silent and the node must go.
    std::optional<ForcedDeath> on(const RankHung& hung, const JobView& job, NodeWatch& nodes, Now now, Effects& fx);
    void on(const RankLost& lost, const JobView& job, Now now, Effects& fx);
    void on(const ft::records::FaultInjected& fault);
    void on(const ft::records::EndingJob& ending);
    void on(const ft::records::MpiErrorSeen& error) { ++mpi_errors_[error.error_class]; }
    void on(const ft::records::SpareReleased& released) { released_pids_.insert(released.pid); }
    // The leader's job_stats: its step loop ended (spares leave without BYE from now on).
    void on(const ft::records::JobStats&) { loop_ended_ = true; }
    // An in-job recovery (`by`: "in-job tier 1 (hot)") of `failed` roles: their incidents of this
    // attempt are recovered; under Slurm their nodes are given up on.
    void on_recovery(const ft::records::Recovery& recovery, const std::string& by, const JobView& job, NodeWatch& nodes,
                     std::int64_t steps_done, Now now, Effects& fx);
    // Stalls whose confirmation time is up; lost ranks whose last words had time to arrive.
    void on_tick(const JobView& job, NodeWatch& nodes, Now now, Effects& fx);

    // A restart for incident `id` completed (`by` is what recovered it), or failed (`by`: what was tried).
    void restart_ended(int id, const std::string& by, bool completed);
    // Records an incident (its id, time and rule are filled in) and logs its failure record.
    Incident& add(Incident incident, Now now, Effects& fx);
    // A new attempt: what belonged to the last one is forgotten.
    void new_attempt();

    // A rank lost but not yet recorded, or a tier-1 incident of this attempt not yet recovered.
    bool repairing(int attempt) const;
    // The first failure since the job last made progress (the start of a repair's detect phase).
    std::optional<SteadyTime> first_failure_since_progress() const { return first_failure_; }
    void note_failure(SteadyTime at) {
        if (!first_failure_) first_failure_ = at;
    }
    void progressed() { first_failure_.reset(); }
    // The highest 75/76/77/78 a rank's ending_job record asked for this attempt, 0 if none.
    int requested_exit_code() const;
    bool killed_by_us(int pid) const { return killed_pids_.count(pid) > 0; }
    const std::vector<Incident>& all() const { return incidents_; }
    const std::set<std::string>& fired_faults() const { return fired_texts_; }
    std::vector<int> pending_lost_pids() const;

private:
    struct PendingLost {
        RankIncident incident;
        SteadyTime seen;
        WallTime when;
        std::int64_t job_step;  // the job's last step when the loss was seen (it may settle much later)
    };
    struct PendingStall {
        RankHung hung;
        SteadyTime until;
        SteadyTime latest;  // a repair under way defers `until`, never past this
    };
    // In-job recoveries of this attempt, to link incidents classified after their record arrived.
    struct RecoveryNote {
        std::set<std::string> roles;
        SteadyTime at;
        std::string by;
        double ms = -1;
    };

    std::optional<ForcedDeath> confirmed_hang(const RankHung& hung, const JobView& job, NodeWatch& nodes, Now now,
                                              Effects& fx);
    // The latest in-job recovery of `role` recorded at or after `since`, if any.
    const RecoveryNote* recovery_of(const std::string& role, SteadyTime since) const;
    // true: `lost` was settled (recorded, or known to be no failure); false: wait on.
    bool settle(const PendingLost& lost, const JobView& job, NodeWatch& nodes, Now now, Effects& fx);
    std::int64_t step_of(int pid, std::int64_t last_step_tag, std::int64_t last_step) const;
    double since_injection_ms(int pid, WallTime at) const;

    std::vector<Incident> incidents_;
    std::map<int, int> mpi_errors_;                           // error class -> count
    std::map<int, ft::records::FaultInjected> faults_fired_;  // by pid
    std::set<std::string> fired_texts_;
    std::map<int, int> exit_requests_;  // pid -> 75/76/77/78 from its ending_job record (this attempt)
    std::set<std::string> answered_losses_;  // EndingJob::lost_roles of this attempt
    std::set<int> released_pids_;       // hot spares released at the end of the job
    std::set<int> killed_pids_;         // hung ranks this launcher killed
    std::vector<PendingLost> pending_lost_;
    std::vector<PendingStall> pending_stalls_;
    std::vector<RecoveryNote> recovery_notes_;
    std::optional<SteadyTime> first_failure_;
    std::chrono::milliseconds stall_confirm_;
    SilentNodes silent_nodes_;
    bool loop_ended_ = false;  // the leader's job_stats arrived this attempt
};

}  // namespace flashrec::launcher
