// The order in which the core's effects are carried out, without re-entry.
//
// The rule: effects run one at a time, in the order the core decided them (first in, first out),
// and never from inside another. An effect that reports back (KillRank, StartAttempt,
// TeardownAttempt) hands its result to the core when it is carried out, and what the core answers
// queues behind every effect already waiting; so do the effects of inputs the shell hands in while
// it carries one out (a teardown drains the ranks' output and the controller's inbox). To keep
// "decided before" the same as "done before" across an attempt, an effect that ends or begins an
// attempt (TeardownAttempt, StartAttempt) or the job (Finish) comes last in what one input brings:
// push() refuses anything else as a bug in the core.
#pragma once
#include <deque>
#include <optional>
#include <stdexcept>

#include "job_effects.hpp"

namespace flashrec::launcher {

class EffectOrderError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

// Throws EffectOrderError when `fx` has an attempt's or the job's boundary anywhere but last.
void check_effect_order(const Effects& fx);

class EffectQueue {
public:
    // Queues what one input brought, behind what is waiting (check_effect_order first).
    void push(Effects fx);
    // The next effect to carry out, nullopt when none is waiting.
    std::optional<Effect> pop();
    bool empty() const { return queue_.empty(); }

private:
    std::deque<Effect> queue_;
};

}  // namespace flashrec::launcher
