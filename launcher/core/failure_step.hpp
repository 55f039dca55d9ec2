#pragma once
// The step a lost or hung rank failed in, for the summary and the event log's incidents.
#include <cstdint>
#include <optional>

namespace flashrec::launcher {

// From what the launcher knows, best first:
// - `fault_step`: the step of a fault this rank fired (its fault_injected record), if any: exact;
// - `last_step_tag`: the rank's last heartbeat tag (-1 in the optimizer). It is up to one heartbeat
//   interval old, so a rank killed soon after it started still shows 0 (why the summary once said
//   "at step 0" for a rank killed in step 20);
// - `last_completed_step`: the newest step the job completed (the leader's `step` events, -1
//   before the first): no rank can have failed before the step after it.
// Without a fault: the larger of the tag and last_completed_step + 1; -1 when neither says anything.
std::int64_t failure_step(std::optional<std::int64_t> fault_step, std::int64_t last_step_tag,
                          std::int64_t last_completed_step);

}  // namespace flashrec::launcher
