#include "flashrec/ft/watchdog.hpp"

#include <unistd.h>

#include <cstdio>

#include "flashrec/ft/leaving.hpp"

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

void Watchdog::before_exit(BeforeExit hook) {
    std::lock_guard lock(mutex_);
    before_exit_ = std::move(hook);
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
            const std::string why = "recovery epoch " + std::to_string(epoch_) + ": phase '" + phase_ +
                                    "' missed its deadline of " + std::to_string(budget_.count()) + " ms";
            std::fprintf(stderr, "flashrec[pid %d]: %s; ending this process so the launcher relaunches the job (tier 2)\n",
                         static_cast<int>(getpid()), why.c_str());
            std::fflush(stderr);
            if (before_exit_) before_exit_(why, kExitForRelaunch);
            leave_process(kExitForRelaunch);
        }
    }
}

}  // namespace flashrec::ft
