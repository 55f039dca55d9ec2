// Bounds the recovery phases that MPI gives no way to interrupt (shrink, spawn, merge, split).
// A phase that outlives its deadline ends this process with kExitForRelaunch (leave_process: by
// SIGKILL over shared memory, after the before_exit hook's record): the MPI job then dies as a
// whole and the launcher warm-relaunches it (tier 2) instead of everyone hanging.
#pragma once
#include "flashrec/ft/contract.hpp"  // kExitForRelaunch
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace flashrec::ft {

class Watchdog {
public:
    Watchdog();
    ~Watchdog();
    Watchdog(const Watchdog&) = delete;
    Watchdog& operator=(const Watchdog&) = delete;

    // Arms the watchdog for `phase`; re-arming replaces the previous phase.
    void arm(std::string phase, int epoch, std::chrono::milliseconds budget);
    void disarm();
    // Called on the watchdog's thread just before it ends the process, with what happened and
    // the exit code: the runtime sends the launcher an ending_job record. Set before arming.
    using BeforeExit = std::function<void(const std::string& why, int exit_code)>;
    void before_exit(BeforeExit hook);

private:
    void run();
    std::mutex mutex_;
    std::condition_variable cv_;
    bool armed_ = false, stopping_ = false;
    std::string phase_;
    int epoch_ = 0;
    std::chrono::milliseconds budget_{0};
    std::chrono::steady_clock::time_point deadline_;
    BeforeExit before_exit_;
    std::thread thread_;
};

}  // namespace flashrec::ft
