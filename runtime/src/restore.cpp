// Restore after a repair (docs/recovery.md), both sides, each top to bottom: a survivor brings
// its own state back to version R and serves the replacements (restore_and_serve); a
// replacement receives its role's state (receive_state). The transfers themselves are
// ft::RestoreRound's, the mirror of the snapshot's ft::SnapshotRound; what to restore from is the
// plan's (recovery_plan.hpp). An in-job repair runs them from recovery.cpp (a survivor) and
// loop_start (a replacement, once the trainer registered its buffers), a warm relaunch from
// warm_restore.
#include <span>
#include <string>
#include <vector>

#include "flashrec/ft/restore_round.hpp"
#include "runtime_impl.hpp"

namespace flashrec {

ft::RestoreTarget Runtime::Impl::restore_target() {
    ft::RestoreTarget target;
    target.regions = state.regions();
    for (const auto& b : state.buffers()) target.on_device.push_back(b.device >= 0);
    target.to_device = [this](const std::vector<std::size_t>& which,
                              const std::vector<std::span<const std::byte>>& from) {
        device.restore(state.buffers(), which, from);
    };
    return target;
}

void Runtime::Impl::restore_and_serve(const recovery::Plan& plan) {
    const std::string me = topology::role_key(coord());
    // Nothing changed state yet: the live buffers are the initial state.
    if (plan.initial) return;
    if (plan.from_checkpoint) {
        restore_checkpoint(me, plan.version);
        return;
    }
    const ft::RestoreTarget target = restore_target();
    ft::RestoreRound round({cfg.job.name, *ring.stores, quarantine, membership.work, target}, plan.version);
    // Own state back to version R: a memcpy from node-local shared memory (device buffers: H2D).
    round.restore_own(ring.own_segment(), me);
    // Then every replacement that this process serves.
    std::vector<ft::RestoreRound::Serve> serves;
    for (const auto& rep : plan.replacements) {
        ft::RestoreRound::Serve to;
        to.to = rep.role;
        to.replicated = rep.replicated_from == membership.role_index;
        to.owner = topology::role_key(topology::coord_of(shape, rep.role));
        if (rep.payload_from == membership.role_index) {
            to.own_snapshot = rep.payload_from_local;
            to.payload_store = rep.payload_from_local ? ring.store_prefix() + to.owner : ring.held_segment(rep.role);
            if (rep.payload_from_local)
                log("serving " + to.owner + "'s state of version " + std::to_string(plan.version) +
                    " from its own snapshot on this node (its process died, the node lives)");
        }
        if (to.replicated || to.payload_store) serves.push_back(std::move(to));
    }
    round.serve(serves);
}

void Runtime::Impl::receive_state(const recovery::Plan& plan) {
    const recovery::Replacement* mine = nullptr;
    for (const auto& rep : plan.replacements)
        if (rep.role == membership.role_index) mine = &rep;
    if (!mine) throw Error("recovery: this process took role " + std::to_string(membership.role_index) +
                           " but the plan has no restore sources for it");
    if (plan.initial) {
        // Nobody had changed state yet: build this role's initial state as the job's start did
        // (the trainer initialised the buffers before loop_start; --resume reads the checkpoint).
        if (started.from_checkpoint) restore_checkpoint(topology::role_key(coord()), plan.version);
        return;
    }
    if (plan.from_checkpoint) {
        restore_checkpoint(topology::role_key(coord()), plan.version);
        return;
    }
    watchdog.arm("restore", membership.epoch, std::chrono::milliseconds(cfg.recovery.phase_deadline_ms));
    const ft::RestoreTarget target = restore_target();
    ft::RestoreRound({cfg.job.name, *ring.stores, quarantine, membership.work, target}, plan.version)
        .receive(mine->replicated_from, mine->payload_from);
}

void Runtime::Impl::restore_checkpoint(const std::string& role_key, std::int64_t version) {
    const auto& buffers = state.buffers();
    if (!state.has_device_buffers()) {
        runtime::Checkpointer::restore(cfg, buffers, role_key, version);
        return;
    }
    // HDF5 reads into host memory: device buffers go through host staging.
    std::vector<ProtectedBuffer> through_host = buffers;
    std::vector<std::vector<std::byte>> host;
    host.reserve(buffers.size());
    std::vector<std::size_t> which;
    std::vector<std::span<const std::byte>> sources;
    for (std::size_t b = 0; b < buffers.size(); ++b) {
        if (buffers[b].device < 0) continue;
        host.emplace_back(buffers[b].bytes);
        through_host[b].data = host.back().data();
        through_host[b].device = -1;
        which.push_back(b);
        sources.emplace_back(host.back().data(), host.back().size());
    }
    runtime::Checkpointer::restore(cfg, through_host, role_key, version);
    device.restore(state.buffers(), which, sources);
}

}  // namespace flashrec
