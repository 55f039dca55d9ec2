#include "flashrec/runtime/deterministic_end.hpp"

#include <cstdlib>

namespace flashrec::runtime {

namespace {
// One Runtime per process; std::terminate has no context argument.
DeterministicEnd* g_current = nullptr;

std::string describe_error(const Error& e) {
    if (dynamic_cast<const UsageError*>(&e)) return std::string("flashrec::UsageError: ") + e.what();
    if (dynamic_cast<const ConfigError*>(&e)) return std::string("flashrec::ConfigError: ") + e.what();
    return {};
}
}  // namespace

DeterministicEnd::DeterministicEnd(std::function<void(const std::string&)> send) : send_(std::move(send)) {
    if (g_current) return;  // a second Runtime in one process: the first one reports
    g_current = this;
    previous_ = std::set_terminate(&DeterministicEnd::on_terminate);
}

DeterministicEnd::~DeterministicEnd() {
    if (g_current != this) return;
    // An exception unwinds through the Runtime: the trainer caught it outside the Runtime's scope.
    // Which exception is not known here, so the record says what the API refused before.
    if (std::uncaught_exceptions() > 0 && !noted_.empty())
        send_once("left by an exception after the API refused a call of the trainer's: " + noted_);
    std::set_terminate(previous_);
    g_current = nullptr;
}

void DeterministicEnd::noted(const Error& error) {
    if (noted_.empty()) noted_ = describe_error(error);
}

std::string DeterministicEnd::describe(const std::exception_ptr& error) {
    if (!error) return {};
    try {
        std::rethrow_exception(error);
    } catch (const Error& e) {
        return describe_error(e);
    } catch (...) {
    }
    return {};
}

void DeterministicEnd::send_once(const std::string& why) {
    if (sent_ || why.empty()) return;
    sent_ = true;
    try {
        send_(why);
    } catch (...) {  // leaving anyway: the launcher then sees an ordinary crash
    }
}

void DeterministicEnd::on_terminate() {
    // An uncaught error: the process aborts without unwinding (no destructor runs), so the
    // record goes now, then the previous handler says what was thrown and aborts as before.
    if (DeterministicEnd* self = g_current) {
        self->send_once(describe(std::current_exception()));
        if (self->previous_) self->previous_();
    }
    std::abort();
}

}  // namespace flashrec::runtime
