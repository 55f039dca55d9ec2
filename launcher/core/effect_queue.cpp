#include "effect_queue.hpp"

#include <string>

namespace flashrec::launcher {

namespace {
const char* boundary_name(const Effect& effect) {
    if (std::holds_alternative<TeardownAttempt>(effect)) return "TeardownAttempt";
    if (std::holds_alternative<StartAttempt>(effect)) return "StartAttempt";
    if (std::holds_alternative<Finish>(effect)) return "Finish";
    return nullptr;
}
}  // namespace

void check_effect_order(const Effects& fx) {
    for (std::size_t i = 0; i + 1 < fx.size(); ++i)
        if (const char* name = boundary_name(fx[i]))
            throw EffectOrderError(std::string("the launcher's core put ") + name + " at " + std::to_string(i + 1) +
                                   " of " + std::to_string(fx.size()) +
                                   " effects: an attempt's or the job's boundary must come last");
}

void EffectQueue::push(Effects fx) {
    check_effect_order(fx);
    for (auto& effect : fx) queue_.push_back(std::move(effect));
}

std::optional<Effect> EffectQueue::pop() {
    if (queue_.empty()) return std::nullopt;
    Effect next = std::move(queue_.front());
    queue_.pop_front();
    return next;
}

}  // namespace flashrec::launcher
