#include "timeouts.hpp"

#include <algorithm>
#include <cstdio>

#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/control_plane.hpp"

namespace flashrec::launcher {

namespace {

// "300 ms", "10 s", "1.25 s"
std::string span(milliseconds ms) {
    const long long v = ms.count();
    char buf[64];
    if (v < 1000) std::snprintf(buf, sizeof buf, "%lld ms", v);
    else if (v % 1000 == 0) std::snprintf(buf, sizeof buf, "%lld s", v / 1000);
    else std::snprintf(buf, sizeof buf, "%.2f s", static_cast<double>(v) / 1000);
    return buf;
}

FailureKind kind(std::string failure, std::vector<Candidate> candidates, std::string after_that) {
    // Stable: of two limits with the same value the one listed first (the more specific) acts.
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.after < b.after; });
    return {std::move(failure), std::move(candidates), std::move(after_that)};
}

}  // namespace

Timeouts timeouts_of(const config::Config& cfg) {
    const auto& d = cfg.detection;
    const auto& r = cfg.recovery;
    Timeouts t{};
    t.heartbeat = milliseconds(d.heartbeat_ms);
    t.check_period = milliseconds(std::clamp(d.heartbeat_ms, 10, 100));
    t.hang_timeout = milliseconds(d.hang_timeout_ms);
    // A rank that waited behind a hung peer looks stalled until its own next heartbeat.
    t.stall_confirm = 2 * t.heartbeat + t.check_period;
    t.node_silent_window = 3 * t.heartbeat + milliseconds(500);
    t.phase_deadline = milliseconds(r.phase_deadline_ms);
    t.max_epochs = r.max_epochs;
    // Longer than the runtime's own recovery deadlines can take: a backstop for when they failed too.
    t.stall_limit = milliseconds(std::max<std::int64_t>(2LL * d.hang_timeout_ms, (r.max_epochs * 6LL + 1) * r.phase_deadline_ms));
    t.startup_limit = milliseconds(d.startup_timeout_ms);
    t.reconnect_for = ft::HeartbeatClientOptions{}.reconnect_for;
    t.record_ack_limit = milliseconds(ft::kRecordAckLimitMs);
    t.warm_relaunches = r.warm_relaunches;
    t.cold_restarts = kMaxColdRestarts;
    return t;
}

TimeoutTable timeout_table(const config::Config& cfg) {
    const Timeouts t = timeouts_of(cfg);
    TimeoutTable table;
    table.limits = {
        {"heartbeat", span(t.heartbeat), "detection.heartbeat_ms"},
        {"hang check period", span(t.check_period), "min(heartbeat, 100 ms), at least 10 ms"},
        {"hang timeout", span(t.hang_timeout), "detection.hang_timeout_ms"},
        {"stall confirmation", span(t.stall_confirm), "2 x heartbeat + check period"},
        {"node silent window", span(t.node_silent_window), "3 x heartbeat + 500 ms"},
        {"recovery phase deadline", span(t.phase_deadline), "recovery.phase_deadline_ms (then exit 75)"},
        {"recovery epochs", std::to_string(t.max_epochs), "recovery.max_epochs (then exit 75)"},
        {"job stall limit", span(t.stall_limit), "max(2 x hang timeout, (6 x max_epochs + 1) x phase deadline)"},
        {"startup limit", span(t.startup_limit), "detection.startup_timeout_ms (launch -> every role registered)"},
        {"lost rank's last words", span(kLostSettle), "kLostSettle"},
        {"reconnect of a cut connection", span(kReconnectWait), "kReconnectWait"},
        {"mpirun's end after every rank left", span(kMpirunEndGrace), "kMpirunEndGrace"},
        {"final records after mpirun exited", span(kFinalRecordsLimit), "kFinalRecordsLimit"},
        {"teardown (SIGKILL loop)", span(kTeardownLimit), "kTeardownLimit"},
        {"SIGTERM before SIGKILL", span(kInterruptGrace), "kInterruptGrace"},
        {"spawn trap after a spawn", span(kSpawnDaemonGrace), "kSpawnDaemonGrace"},
        {"ranks' tier-2 record", span(kRelaunchRecordWait), "kRelaunchRecordWait"},
        {"rank's wait for the record ack", span(t.record_ack_limit), "ft::kRecordAckLimitMs"},
        {"rank's control-plane reconnect", span(t.reconnect_for), "ft::HeartbeatClientOptions::reconnect_for"},
        {"warm relaunch budget", std::to_string(t.warm_relaunches), "recovery.warm_relaunches"},
        {"HDF5 restart budget", std::to_string(t.cold_restarts), "kMaxColdRestarts (needs checkpoint.dir)"},
        {"restart loop", "2 x the same failure", "same classification, step and mpirun ending, both in or both before a first step, no new step between (exit 80)"},
    };
    const std::string relaunch = "warm relaunch (" + std::to_string(t.warm_relaunches) + "), then HDF5 (" +
                                 std::to_string(t.cold_restarts) + "), then exit 75; the same failure twice: exit 80";
    const std::string in_job = "in-job recovery, each phase under the phase deadline (" + span(t.phase_deadline) +
                               "), at most " + std::to_string(t.max_epochs) + " epochs; then exit 75 -> " + relaunch;
    table.failures = {
        kind("process killed (crash, SIGKILL, OOM)",
             {{"its connection closes, then kLostSettle", kLostSettle, "classified (connection lost), replaced in-job"},
              {"hang timeout + check period", t.hang_timeout + t.check_period, "SIGKILL (no EOF came)"}},
             in_job),
        kind("process hung (SIGSTOP, frozen)",
             {{"hang timeout + check period", t.hang_timeout + t.check_period, "SIGKILL, then as a killed process"},
              {"job stall limit", t.stall_limit, "job_stalled: the MPI job is ended"}},
             in_job),
        kind("step loop stuck, heartbeats on",
             {{"stall confirmation (a peer moved past it)", t.stall_confirm, "SIGKILL, then as a killed process"},
              {"job stall limit (no role moves)", t.stall_limit, "job_stalled: the MPI job is ended"}},
             relaunch),
        kind("node lost (no TCP reset)",
             {{"hang timeout + check period (all its ranks within the silent window)", t.hang_timeout + t.check_period,
               "node_unreachable: the job is ended, the node drained (Slurm)"},
              {"job stall limit", t.stall_limit, "job_stalled: the MPI job is ended"}},
             "teardown (" + span(kTeardownLimit) + " at most), then a warm relaunch off the node (" +
                 std::to_string(t.warm_relaunches) + "), then HDF5 (" + std::to_string(t.cold_restarts) +
                 "), then exit 75; the restart-loop rule does not count a node's failure"),
        kind("stuck recovery phase",
             {{"recovery phase deadline", t.phase_deadline, "exit 75 (ending_job): the MPI job ends"},
              {"job stall limit", t.stall_limit, "job_stalled: the MPI job is ended"}},
             relaunch),
        kind("start-up stuck (a node that cannot start its processes, MPI_Init waiting for one)",
             {{"startup limit", t.startup_limit, "startup_stuck: the MPI job is ended"}}, relaunch),
        kind("launcher lost",
             {{"rank's client notices, reconnects (backoff 50 ms .. 1 s)", milliseconds(0), "training goes on"},
              {"rank's control-plane reconnect", t.reconnect_for, "it gives up: trains on without a control plane"}},
             "nothing ends the job: no hang detection, relaunch or event log; at its end each rank waits for its "
             "last record's ack at most " + span(t.record_ack_limit) + "; segments stay in /dev/shm"),
    };
    return table;
}

std::string format_timeout_table(const TimeoutTable& table) {
    std::string out = "timeouts (docs/launcher.md, \"Timeout hierarchy\")\n";
    char line[512];
    std::snprintf(line, sizeof line, "  %-36s %-22s %s\n", "limit", "value", "from");
    out += line;
    for (const auto& l : table.limits) {
        std::snprintf(line, sizeof line, "  %-36s %-22s %s\n", l.name.c_str(), l.value.c_str(), l.from.c_str());
        out += line;
    }
    out += "which fires first\n";
    for (const auto& f : table.failures) {
        out += "  " + f.failure + "\n";
        int n = 0;
        for (const auto& c : f.in_order) {
            std::snprintf(line, sizeof line, "    %s %-58s %-8s -> %s\n", n++ == 0 ? "first" : "then ", c.limit.c_str(),
                          span(c.after).c_str(), c.then.c_str());
            out += line;
        }
        out += "    after: " + f.after_that + "\n";
    }
    return out;
}

}  // namespace flashrec::launcher
