// Fault injection, a first-class feature: train.yaml `faults:` and `--fault` specs make this
// process kill, exit or stop itself at a chosen (step, phase), so users can rehearse failures.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "flashrec/ft/records.hpp"
#include "flashrec/runtime/config.hpp"

namespace flashrec::runtime {

class FaultInjector {
public:
    FaultInjector() = default;
    FaultInjector& operator=(FaultInjector&& other) noexcept {
        faults_ = std::move(other.faults_);
        fired_ = std::move(other.fired_);
        armed_ = other.armed_;
        me_ = other.me_;
        return *this;  // announce_ stays: it belongs to the process, not to the list of faults
    }
    // Only the process that first held a role fires that role's faults: a replacement replays
    // the same step and must not fail again.
    FaultInjector(std::vector<config::Fault> faults, bool original_process);
    // This process now holds role `role` (or is hot spare number `spare_index`, role < 0).
    void set_identity(const config::Fault& who);
    // Fires a matching fault: SIGKILL, _exit(code) or SIGSTOP. Thread-safe; each fault once.
    // The record goes to `announce` first (the runtime sends and flushes it to the launcher).
    void at(std::int64_t step, config::Phase phase);
    using Announce = std::function<void(const ft::records::FaultInjected&)>;
    void announce_to(Announce announce) { announce_ = std::move(announce); }

private:
    std::mutex mutex_;  // the replication thread fires faults too
    std::vector<config::Fault> faults_;
    std::vector<bool> fired_;
    bool armed_ = false;
    config::Fault me_;
    Announce announce_;
};

}  // namespace flashrec::runtime
