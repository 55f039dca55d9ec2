#include "flashrec/ft/watchdog.hpp"

#include <unistd.h>

#include <cstdio>

namespace flashrec::ft {

Watchdog::Watchdog() : thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void Watchdog::arm(std::string phase, int epoch, std::chrono::milliseconds budget) {
    std::lock_guard lock(mutex_);
    armed_ = true;
    phase_ = std::move(phase);
    epoch_ = epoch;
    budget_ = budget;
    deadline_ = std::chrono::steady_clock::now() + budget;
    cv_.notify_all();
}

void Watchdog::disarm() {
    std::lock_guard lock(mutex_);
    armed_ = false;
    cv_.notify_all();
}

void Watchdog::run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
        if (!armed_) {
            cv_.wait(lock);
            continue;
        }
        if (cv_.wait_until(lock, deadline_) == std::cv_status::timeout && armed_ &&
            std::chrono::steady_clock::now() >= deadline_) {
            std::fprintf(stderr,
                         "flashrec[pid %d]: recovery epoch %d: phase '%s' missed its deadline of "
                         "%lld ms; ending this process so the launcher relaunches the job (tier 2)\n",
                         static_cast<int>(getpid()), epoch_, phase_.c_str(),
                         static_cast<long long>(budget_.count()));
            std::fflush(stderr);
            _exit(kExitForRelaunch);
        }
    }
}

}  // namespace flashrec::ft
