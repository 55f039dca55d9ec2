// The figures of the job's end (summary and job_end record): replacements, steps replayed and the
// time lost, from the ranks' recovery records, the launcher's relaunch records and the hangs.
// Pure: docs/launcher.md, "Summary at exit", says what each part counts.
#pragma once
#include <cstdint>
#include <vector>

#include "flashrec/ft/records.hpp"

namespace flashrec::launcher {

// A hang, in ms since the job started: from the fault (or the last heartbeat) to the kill.
struct HangSpan {
    double start_ms = 0, end_ms = 0;
};

// What a warm relaunch or HDF5 restart record contributes.
struct RestartCost {
    std::int64_t steps_replayed = 0;
    double total_ms = 0;
};

struct ReportTotals {
    int in_job = 0, hot = 0, spawned = 0;  // roles replaced in-job, by a hot spare, by a spawn
    std::int64_t steps_replayed = 0;
    double hang_ms = 0, recovery_ms = 0, restart_ms = 0, replay_ms = 0;
    double lost_ms() const { return hang_ms + recovery_ms + restart_ms + replay_ms; }
};

// Hangs at the same time (a frozen node) cost their overlap once: the union of their spans.
// Replayed steps cost `median_step_ms` each. The ranks' own records of a relaunch
// ("replacement": "relaunch") are counted through the launcher's restart records instead.
ReportTotals report_totals(const std::vector<ft::records::Recovery>& recoveries,
                           const std::vector<RestartCost>& restarts, std::vector<HangSpan> hangs,
                           double median_step_ms);

}  // namespace flashrec::launcher
