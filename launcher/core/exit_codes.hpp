// flashrec-launch's exit codes (docs/launcher.md, "Exit codes"): what the shell returns and
// what the restart policy decides, in one header that neither has to include the other for.
#pragma once
#include "flashrec/ft/contract.hpp"

namespace flashrec::launcher {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // the job failed and no tier could bring it back
inline constexpr int kExitUsage = ft::kExitBadConfig;  // bad command line or train.yaml
// 75/76/77/78/81 are the ranks' own requests (ft/contract.hpp) that the launcher could not serve.
inline constexpr int kExitNeedsRelaunch = ft::kExitForRelaunch;  // tier 2 needed, relaunch budget spent
inline constexpr int kExitStateLost = ft::kExitStateLost;        // tier 3 needed, no checkpoint to use
inline constexpr int kExitNoSpares = ft::kExitNoSpare;           // spares exhausted, no checkpoint to use
inline constexpr int kExitDeterministic = ft::kExitDeterministicError;  // a rank left by a deterministic error: never relaunched
inline constexpr int kExitRequeued = 79;     // spares exhausted: checkpoint written, Slurm job requeued
// The same failure (classification and step) came back after a restart of the same kind, with no
// new step made in between: another such restart would loop (restart_loop.hpp).
inline constexpr int kExitRestartLoop = 80;
inline constexpr int kExitPlatformMismatch = ft::kExitPlatformMismatch;  // a restore refused another platform: never relaunched

}  // namespace flashrec::launcher
