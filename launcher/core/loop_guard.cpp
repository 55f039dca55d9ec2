#include "loop_guard.hpp"

#include <algorithm>

namespace flashrec::launcher {

void RestartLoopGuard::on_step(std::int64_t step) {
    if (step <= newest_step_) return;  // replayed after a restart: the same ground again
    newest_step_ = step;
    seen_.clear();
}

std::optional<int> RestartLoopGuard::repeats(const FailureSignature& failure, Restart kind) const {
    const auto it = std::find_if(seen_.begin(), seen_.end(),
                                 [&](const Seen& s) { return s.failure == failure && s.kind == kind; });
    if (it == seen_.end()) return std::nullopt;
    return it->incident;
}

void RestartLoopGuard::restarted(const FailureSignature& failure, Restart kind, int incident) {
    seen_.push_back({failure, kind, incident});
}

}  // namespace flashrec::launcher
