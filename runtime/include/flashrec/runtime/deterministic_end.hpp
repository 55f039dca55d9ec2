// A deterministic error: a UsageError or ConfigError raised at the trainer's own call (protect()
// inside the step loop, a trainer parameter missing from train.yaml). Every relaunch would raise
// it again at the same place, so a process that leaves by one tells the launcher with a typed
// record, ending_job with ft::kExitDeterministicError (78), and the launcher ends the job at once
// instead of relaunching it. The record is sent only when the process really leaves by it (a
// trainer may catch the error and go on): from std::terminate for an uncaught error, or from the
// Runtime's teardown while the error unwinds the trainer's stack. Owned by Runtime::Impl.
#pragma once
#include <exception>
#include <functional>
#include <string>

#include "flashrec/errors.hpp"

namespace flashrec::runtime {

class DeterministicEnd {
public:
    // `send(why)`: the ending_job record, acknowledged or not, before the process goes on leaving.
    explicit DeterministicEnd(std::function<void(const std::string& why)> send);
    ~DeterministicEnd();
    DeterministicEnd(const DeterministicEnd&) = delete;
    DeterministicEnd& operator=(const DeterministicEnd&) = delete;

    // The API refuses a call of the trainer's with `error`, thrown next. If the process leaves
    // while an exception unwinds (the trainer caught it outside the Runtime's scope), this is
    // what it leaves by: a trainer that caught it and went on would meet it again on a relaunch.
    void noted(const Error& error);

    // "flashrec::UsageError: <what>"; empty for an exception that is not deterministic.
    static std::string describe(const std::exception_ptr& error);

private:
    static void on_terminate();
    void send_once(const std::string& why);

    std::function<void(const std::string&)> send_;
    std::string noted_;
    bool sent_ = false;
    std::terminate_handler previous_ = nullptr;
};

}  // namespace flashrec::runtime
