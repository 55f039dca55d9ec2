// Placeholder while the HDF5 checkpointer is being written: checkpoints are not taken yet.
#include "flashrec/runtime/checkpointing.hpp"

#include "flashrec/runtime/runtime_impl.hpp"

namespace flashrec::runtime {

struct Checkpointer::State {};

Checkpointer::Checkpointer(const config::Config&, const std::vector<ProtectedBuffer>&,
                           CheckpointIdentity, ft::Comm) {}
Checkpointer::~Checkpointer() = default;
void Checkpointer::committed(std::int64_t) {}
void Checkpointer::finish() {}
void Checkpointer::abort() noexcept {}
void Checkpointer::rebind(CheckpointIdentity, ft::Comm) {}
std::optional<std::int64_t> Checkpointer::newest_complete(const config::Config&, const topology::Shape&,
                                                          std::string& why) {
    why = "HDF5 checkpoints are not available in this build";
    return std::nullopt;
}
void Checkpointer::restore(const config::Config&, const std::vector<ProtectedBuffer>&, const std::string&,
                           std::int64_t) {
    throw Error("HDF5 checkpoints are not available in this build");
}

}  // namespace flashrec::runtime
