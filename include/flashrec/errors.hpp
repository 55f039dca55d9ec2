// Typed errors of flashrec. Part of the public API: a trainer may catch them.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace flashrec {

// Base of every error flashrec throws.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// train.yaml (or a command-line option) is wrong. what() reads "file:line: field: problem".
class ConfigError : public Error {
public:
    ConfigError(std::string file, int line, std::string field, const std::string& problem);
    const std::string& file() const { return file_; }
    int line() const { return line_; }
    const std::string& field() const { return field_; }

private:
    std::string file_;
    int line_;
    std::string field_;
};

// A call the API does not allow as made (protect() after the step loop started, a null or empty
// buffer): thrown at the call, naming the call and the buffer.
class UsageError : public Error {
public:
    UsageError(std::string call, std::string buffer, const std::string& problem)
        : Error(call + ": buffer '" + buffer + "' " + problem), call_(std::move(call)), buffer_(std::move(buffer)) {}
    const std::string& call() const { return call_; }
    const std::string& buffer() const { return buffer_; }

private:
    std::string call_;
    std::string buffer_;
};

// An MPI call failed for a reason that is not a process failure.
class MpiError : public Error {
public:
    MpiError(int code, int error_class, std::string operation, std::string comm_name, int rank,
             const std::string& detail);
    int code() const { return code_; }
    int error_class() const { return class_; }
    const std::string& operation() const { return operation_; }
    const std::string& comm_name() const { return comm_name_; }

private:
    int code_;
    int class_;
    std::string operation_;
    std::string comm_name_;
};

// A peer died (MPIX_ERR_PROC_FAILED / _PENDING): the caller must enter recovery.
class ProcessFailure : public MpiError {
public:
    using MpiError::MpiError;
};

// The communicator was revoked by some rank that saw a failure: enter recovery.
class CommRevoked : public MpiError {
public:
    using MpiError::MpiError;
};

// A recovery phase did not finish before its deadline.
class DeadlineExceeded : public Error {
public:
    DeadlineExceeded(std::string phase, int epoch, double seconds);
    const std::string& phase() const { return phase_; }
    int epoch() const { return epoch_; }

private:
    std::string phase_;
    int epoch_;
};

// A role's state cannot be found complete anywhere in memory (owner and replicas lost).
class ShardLost : public Error {
public:
    ShardLost(std::string role, std::int64_t step, const std::string& detail);
    const std::string& role() const { return role_; }
    std::int64_t step() const { return step_; }

private:
    std::string role_;
    std::int64_t step_;
};

// Stored state (snapshot segment, replica, checkpoint file) failed verification.
class CorruptState : public Error {
public:
    CorruptState(std::string where, std::string buffer, const std::string& detail);
    const std::string& where() const { return where_; }
    const std::string& buffer() const { return buffer_; }

private:
    std::string where_;
    std::string buffer_;
};

}  // namespace flashrec
