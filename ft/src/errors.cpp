#include "flashrec/errors.hpp"

namespace flashrec {

ConfigError::ConfigError(std::string file, int line, std::string field, const std::string& problem)
    : Error(file + (line > 0 ? ":" + std::to_string(line) : std::string()) + ": " +
            (field.empty() ? std::string() : field + " ") + problem),
      file_(std::move(file)),
      line_(line),
      field_(std::move(field)) {}

MpiError::MpiError(int code, int error_class, std::string operation, std::string comm_name, int rank,
                   const std::string& detail)
    : Error("rank " + std::to_string(rank) + ": " + operation + " on '" + comm_name + "' failed: " +
            detail + " (MPI error class " + std::to_string(error_class) + ")"),
      code_(code),
      class_(error_class),
      operation_(std::move(operation)),
      comm_name_(std::move(comm_name)) {}

DeadlineExceeded::DeadlineExceeded(std::string phase, int epoch, double seconds)
    : Error("recovery epoch " + std::to_string(epoch) + ": phase '" + phase +
            "' missed its deadline of " + std::to_string(seconds) + " s"),
      phase_(std::move(phase)),
      epoch_(epoch) {}

ShardLost::ShardLost(std::string role, std::int64_t step, const std::string& detail)
    : Error("state of role " + role + " is lost in memory at step " + std::to_string(step) + ": " +
            detail),
      role_(std::move(role)),
      step_(step) {}

CorruptState::CorruptState(std::string where, std::string buffer, const std::string& detail)
    : Error(where + ": buffer '" + buffer + "': " + detail),
      where_(std::move(where)),
      buffer_(std::move(buffer)) {}

}  // namespace flashrec
