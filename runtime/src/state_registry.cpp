#include "flashrec/runtime/state_registry.hpp"

#include <algorithm>

#include "flashrec/errors.hpp"

namespace flashrec::runtime {

void StateRegistry::add(ProtectedBuffer buffer, bool loop_started, bool internal) {
    const std::string& name = buffer.name;
    if (!internal && name.rfind("flashrec.", 0) == 0)
        refuse(UsageError("protect", name, "uses the prefix 'flashrec.', which is the runtime's own "
                                           "(its platform fingerprint): choose another name"));
    if (loop_started)
        refuse(UsageError("protect", name,
                          "was registered after the step loop started: register every buffer before "
                          "rt.steps() begins (a buffer added later has no snapshot or replica, so a "
                          "recovery could not restore it)"));
    // A ZeRO shard is empty on the roles past the end of a buffer smaller than dp; every other
    // kind of buffer is the same size on every role, and an empty one is a mistake.
    if (buffer.bytes == 0 && buffer.kind != Redundancy::sharded)
        refuse(UsageError("protect", name, "is empty (0 bytes): there is nothing to protect"));
    if (buffer.data == nullptr && buffer.bytes > 0) refuse(UsageError("protect", name, "is a null pointer"));
    if (find(name)) throw Error("protect: buffer '" + name + "' is registered twice");
    if (name.empty() || name.size() > 63 || name.find_first_of("/ \t") != std::string::npos)
        throw Error("protect: buffer name '" + name + "' must be 1-63 characters without '/' or spaces");
    if (buffer.device >= 0)
        for (const auto& b : buffers_)
            if (b.device >= 0 && b.device != buffer.device)
                throw Error("protect: buffer '" + name + "' is on CUDA device " + std::to_string(buffer.device) +
                            " and buffer '" + b.name + "' on device " + std::to_string(b.device) +
                            ": a process's device buffers must all be on one device");
    buffers_.push_back(std::move(buffer));
}

void StateRegistry::refuse(const UsageError& error) const {
    if (refused_) refused_(error);
    throw error;
}

const ProtectedBuffer* StateRegistry::find(const std::string& name) const {
    for (const auto& b : buffers_)
        if (b.name == name) return &b;
    return nullptr;
}

bool StateRegistry::has_device_buffers() const {
    return std::any_of(buffers_.begin(), buffers_.end(), [](const ProtectedBuffer& b) { return b.device >= 0; });
}

std::vector<ft::ProtectedRegion> StateRegistry::regions() const {
    std::vector<ft::ProtectedRegion> regions;
    for (const auto& b : buffers_)
        regions.push_back({b.name, b.data, b.bytes, b.kind != Redundancy::replicated});
    return regions;
}

}  // namespace flashrec::runtime
