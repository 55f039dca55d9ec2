#include "flashrec/runtime/fault_injector.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace flashrec::runtime {

FaultInjector::FaultInjector(std::vector<config::Fault> faults, bool original_process)
    : faults_(std::move(faults)), fired_(faults_.size(), false), armed_(original_process) {}

void FaultInjector::set_identity(const config::Fault& who) { me_ = who; }

void FaultInjector::at(std::int64_t step, config::Phase phase) {
    if (!armed_) return;
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < faults_.size(); ++i) {
        const auto& f = faults_[i];
        const bool targets_me = f.spare ? (me_.spare && f.spare_index == me_.spare_index)
                                        : (!me_.spare && f.dp == me_.dp && f.tp == me_.tp &&
                                           f.pp == me_.pp);
        // A spare has no step of its own while parked: its faults fire on the phase alone.
        const bool now = f.phase == phase && (f.spare ? true : f.step == step);
        if (!targets_me || !now || fired_[i]) continue;
        fired_[i] = true;
        // The wall-clock time lets a benchmark measure detection (injection -> noticed).
        const auto unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                 std::chrono::system_clock::now().time_since_epoch()).count();
        std::fprintf(stderr, "flashrec: fault injected: %s (pid %d, unix_us %lld)\n", f.text.c_str(),
                     static_cast<int>(getpid()), static_cast<long long>(unix_us));
        std::fflush(stderr);
        if (announce_)
            announce_({f.text, static_cast<std::int32_t>(getpid()), static_cast<std::int64_t>(unix_us),
                       config::to_string(f.action), f.action == config::Action::exit ? f.exit_code : 0,
                       f.step, config::to_string(phase)});
        switch (f.action) {
            case config::Action::kill: raise(SIGKILL); break;
            case config::Action::exit: _exit(f.exit_code);
            case config::Action::stop: raise(SIGSTOP); break;
        }
    }
}

}  // namespace flashrec::runtime
