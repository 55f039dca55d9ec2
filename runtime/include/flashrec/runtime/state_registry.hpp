// The trainer's state as registered with Runtime::protect(): the buffers, in registration
// order, and the rules a registration must pass. Owned by Runtime::Impl.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/protection.hpp"
#include "flashrec/types.hpp"

namespace flashrec {

// A buffer the trainer registered with protect().
struct ProtectedBuffer {
    std::string name;
    void* data;
    std::size_t bytes;
    DType type;
    Redundancy kind;
    int device = -1;  // CUDA device of a buffer in device memory; -1: host memory
};

}  // namespace flashrec

namespace flashrec::runtime {

class StateRegistry {
public:
    // `refused(error)` runs just before a UsageError is thrown at the trainer's call (the
    // Runtime remembers it as a deterministic error: deterministic_end.hpp).
    explicit StateRegistry(std::function<void(const Error&)> refused = {}) : refused_(std::move(refused)) {}

    // Registers `buffer`, or throws UsageError / Error naming it: registered after the step
    // loop started, empty, null, a name used twice or not 1-63 characters without '/' or
    // spaces, a device buffer on another CUDA device than the others, a name starting "flashrec."
    // (the runtime's own buffers: `internal`).
    void add(ProtectedBuffer buffer, bool loop_started, bool internal = false);

    const std::vector<ProtectedBuffer>& buffers() const { return buffers_; }
    // The buffer named `name`, or null.
    const ProtectedBuffer* find(const std::string& name) const;
    bool has_device_buffers() const;
    // The buffers as the protection sees them (ft's replica format is over these).
    std::vector<ft::ProtectedRegion> regions() const;

private:
    [[noreturn]] void refuse(const UsageError& error) const;

    std::function<void(const Error&)> refused_;
    std::vector<ProtectedBuffer> buffers_;
};

}  // namespace flashrec::runtime
