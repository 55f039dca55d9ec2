#include "flashrec/ft/restore_round.hpp"

#include <cstring>
#include <memory>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

bool RestoreTarget::any_on_device() const {
    for (bool d : on_device)
        if (d) return true;
    return false;
}

SnapshotView RestoreRound::committed_in(const std::string& key, std::span<const std::span<std::byte>> into) {
    // From the store this process keeps mapped when it has one (no page faults), else from the
    // segment as it is. Either stays mapped while a send of a failed epoch may still read it.
    if (auto store = parts_.stores.find(key)) {
        parts_.quarantine.hold(store);
        return into.empty() ? store->committed(version_) : store->copy_committed(version_, into);
    }
    const SnapshotReader& reader = parts_.quarantine.hold(std::make_unique<SnapshotReader>(parts_.job, key));
    return into.empty() ? reader.committed(version_) : reader.copy_committed(version_, into);
}

std::vector<std::span<std::byte>> RestoreRound::live_host() const {
    std::vector<std::span<std::byte>> live;
    if (parts_.target.any_on_device()) return live;
    for (const auto& r : parts_.target.regions) live.emplace_back(static_cast<std::byte*>(r.data), r.bytes);
    return live;
}

void RestoreRound::restore_own(const std::string& own_store, const std::string& role) {
    const auto& regions = parts_.target.regions;
    // Host state is copied back in the pass that verifies it (the version is read once).
    const std::vector<std::span<std::byte>> live = live_host();
    own_ = committed_in(own_store, live);
    if (!own_.ok) throw ShardLost(role, version_, own_.problem);
    std::vector<std::size_t> device_regions;
    std::vector<std::span<const std::byte>> device_sources;
    for (std::size_t b = 0; b < regions.size(); ++b) {
        if (parts_.target.on_device[b]) {
            device_regions.push_back(b);
            device_sources.push_back(own_.buffers[b].bytes);
            continue;
        }
        if (live.empty()) std::memcpy(regions[b].data, own_.buffers[b].bytes.data(), regions[b].bytes);
    }
    parts_.target.to_device(device_regions, device_sources);
}

void RestoreRound::serve(const std::vector<Serve>& serves) {
    const auto& regions = parts_.target.regions;
    // Tagged by buffer index. The requests stay with the buffers they read (the quarantine) if
    // the wait is cut short.
    Transfers& transfers = parts_.quarantine.hold(std::make_unique<Transfers>(parts_.work));
    std::vector<SnapshotView> held_views;
    held_views.reserve(serves.size());
    for (const Serve& to : serves) {
        if (to.replicated) {
            for (std::size_t b = 0; b < regions.size(); ++b) {
                if (regions[b].replicate) continue;
                // From the live buffer, just restored: it outlives any transfer. A device
                // buffer from the snapshot it was restored from (the same bytes).
                if (parts_.target.on_device[b])
                    transfers.send(own_.buffers[b].bytes.data(), regions[b].bytes, to.to, static_cast<int>(b));
                else
                    transfers.send(regions[b].data, regions[b].bytes, to.to, static_cast<int>(b));
            }
        }
        if (to.payload_store) {
            // Sent straight from the held slot, or from the dead owner's own snapshot on this
            // node (verified in full as it is read); kept beyond this call (the quarantine).
            held_views.push_back(committed_in(*to.payload_store, {}));
            const auto& view = held_views.back();
            if (!view.ok) throw ShardLost(to.owner, version_, view.problem);
            // The sharded and envelope buffers, by region: a ring copy read back in the replica
            // format; an own snapshot holds every buffer in registration order.
            std::vector<std::span<const std::byte>> held;
            if (to.own_snapshot) {
                for (std::size_t b = 0; b < regions.size(); ++b)
                    held.push_back(regions[b].replicate ? view.buffers.at(b).bytes : std::span<const std::byte>());
            } else {
                held = payload_by_region(view, regions);
            }
            // Every sharded and envelope buffer, an empty shard too: its receive is posted.
            for (std::size_t b = 0; b < regions.size(); ++b)
                if (regions[b].replicate)
                    transfers.send(held[b].data(), held[b].size(), to.to, static_cast<int>(b));
        }
    }
    transfers.wait("restore");
}

void RestoreRound::receive(int replicated_from, int payload_from) {
    const auto& regions = parts_.target.regions;
    Transfers& transfers = parts_.quarantine.hold(std::make_unique<Transfers>(parts_.work));
    // Device buffers arrive in host staging (MPI cannot write device memory here), quarantined
    // like the requests: after a revoke, MPI may still write into a matched receive's buffer.
    std::vector<std::size_t> device_regions;
    std::vector<std::span<const std::byte>> device_sources;
    for (std::size_t b = 0; b < regions.size(); ++b) {
        const int source = regions[b].replicate ? payload_from : replicated_from;
        if (parts_.target.on_device[b]) {
            const std::span<std::byte> staging = parts_.quarantine.buffer(regions[b].bytes);
            device_regions.push_back(b);
            device_sources.emplace_back(staging.data(), staging.size());
            transfers.receive(staging.data(), regions[b].bytes, source, static_cast<int>(b));
            continue;
        }
        transfers.receive(regions[b].data, regions[b].bytes, source, static_cast<int>(b));
    }
    transfers.wait("restore");
    parts_.target.to_device(device_regions, device_sources);
}

}  // namespace flashrec::ft
