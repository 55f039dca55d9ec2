// One timeout hierarchy: every time limit and budget that decides what becomes of a failing job,
// named once here with the value a train.yaml gives it, and which of them fires first for each
// kind of failure. The parts that act on a limit take it from here (timeouts_of, the constants),
// so the table `flashrec-launch --dry-run` prints is the one the launcher runs by. Pure: no I/O,
// no clock. docs/launcher.md, "Timeout hierarchy".
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include "flashrec/runtime/config.hpp"

namespace flashrec::launcher {

using std::chrono::milliseconds;

// The launcher's fixed limits.
inline constexpr milliseconds kLostSettle{300};          // a lost rank's last words (records) before it is classified
inline constexpr milliseconds kReconnectWait{5000};      // a cut connection whose local process lives may reconnect
inline constexpr milliseconds kMpirunEndGrace{10000};    // mpirun's grace once every rank left (then SIGKILL)
inline constexpr milliseconds kFinalRecordsLimit{10000};  // connections awaited after mpirun exited (a bound, not a judgement)
inline constexpr milliseconds kTeardownLimit{10000};     // the SIGKILL loop over the old job's processes
inline constexpr milliseconds kDrainLimit{1000};         // output still in the pipes after mpirun exits
inline constexpr milliseconds kInterruptGrace{5000};     // SIGTERM to the job before SIGKILL
inline constexpr milliseconds kSpawnDaemonGrace{10000};  // PRRTE losing the spare node's daemon after a spawn is the spawn trap
inline constexpr milliseconds kRelaunchRecordWait{2000};  // the ranks' own tier-2 record after resuming
inline constexpr milliseconds kRemoteKillLimit{5000};  // srun killing one hung rank on its node (1.2 s seen on the loaded test cluster)
inline constexpr milliseconds kNodeCheckLimit{30000};   // srun starting `true` on a node the launch may have lost
inline constexpr int kMaxColdRestarts = 2;               // HDF5 restarts (tier 3) per launch

// What this config makes of the limits that depend on it.
struct Timeouts {
    milliseconds heartbeat;           // detection.heartbeat_ms
    milliseconds check_period;        // the controller's hang check: min(heartbeat, 100 ms), at least 10 ms
    milliseconds hang_timeout;        // detection.hang_timeout_ms: no heartbeat for this long is a hang
    milliseconds stall_confirm;       // a `stalled` rank is watched this long before the kill
    milliseconds node_silent_window;  // a node's ranks all silent within this window: the node failed
    milliseconds phase_deadline;      // recovery.phase_deadline_ms: a recovery phase MPI cannot interrupt
    int max_epochs;                   // recovery.max_epochs
    milliseconds stall_limit;         // no role's step tag moving this long ends the job (job_stalled)
    milliseconds startup_limit;       // detection.startup_timeout_ms: launch -> every active role registered
    milliseconds reconnect_for;       // a rank's control-plane client reconnects this long, then goes on without
    milliseconds record_ack_limit;    // a leaving rank's wait for the launcher's ack (ft::kRecordAckLimitMs)
    int warm_relaunches;              // recovery.warm_relaunches
    int cold_restarts;                // kMaxColdRestarts
};
Timeouts timeouts_of(const config::Config& cfg);

// One limit of the table.
struct TimeoutLimit {
    std::string name;
    std::string value;  // "1.00 s", "2 relaunches"
    std::string from;   // the config key, the formula or the named constant
};

// A limit that can end one kind of failure, and when (from the failure).
struct Candidate {
    std::string limit;
    milliseconds after;
    std::string then;  // what happens when it fires
};

// For one kind of failure: the candidates in the order they fire (the first one acts).
struct FailureKind {
    std::string failure;
    std::vector<Candidate> in_order;
    std::string after_that;  // the restarts and budgets that follow
};

struct TimeoutTable {
    std::vector<TimeoutLimit> limits;
    std::vector<FailureKind> failures;
};
TimeoutTable timeout_table(const config::Config& cfg);
// The table as aligned text (--dry-run).
std::string format_timeout_table(const TimeoutTable& table);

}  // namespace flashrec::launcher
