#include "protection_ring.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <cctype>
#include <cstdio>

#include "flashrec/ft/ring_offer.hpp"
#include "flashrec/ft/snapshot.hpp"

namespace flashrec::runtime {

std::string ProtectionRing::store_prefix() const {
    std::string prefix = node_;
    for (char& c : prefix)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
    return prefix + ".";
}

std::string ProtectionRing::own_segment() const {
    return store_prefix() + topology::role_key(topology::coord_of(shape_, membership_.role_index));
}

std::string ProtectionRing::held_segment(int owner) const {
    return store_prefix() + ft::peer_role_key(topology::role_key(topology::coord_of(shape_, owner)),
                                              topology::role_key(topology::coord_of(shape_, membership_.role_index)));
}

std::vector<std::string> ProtectionRing::own_and_held_segments() const {
    std::vector<std::string> keys{own_segment()};
    for (int r : held_roles) keys.push_back(held_segment(r));
    return keys;
}

void ProtectionRing::unlink_own_segments() const {
    for (const auto& key : own_and_held_segments()) ft::unlink_snapshot(job_, key);
}

void ProtectionRing::start(std::int64_t version, Start in) {
    const bool node_aware = in.settings.placement == "node-aware";
    const int k = in.settings.replicas;
    const int me = membership_.role_index;
    if (fresh_snapshots) {
        // A new job must never restore a version an earlier job of the same name left behind.
        unlink_own_segments();
        fresh_snapshots = false;
    }
    ft::ProtectionSetup setup;
    setup.job = job_;
    setup.store_prefix = store_prefix();
    setup.role_key = topology::role_key(topology::coord_of(shape_, me));
    setup.chunk_bytes = static_cast<std::size_t>(in.settings.chunk_bytes);
    const auto successors = topology::ring_successors(shape_, me, k, membership_.node_of_role, node_aware);
    held_roles = topology::ring_predecessors(shape_, me, k, membership_.node_of_role, node_aware);

    // What this process's stores hold already: after a repair, every store whose (owner,
    // holder) pair survived holds the recovered version (headers only: cheap). The first
    // snapshot then makes only what is missing. Ring successors learn it, and the size of what
    // they will hold for each predecessor, in one allgather.
    const auto holds = [&](const std::string& key) {
        const auto steps = ft::SnapshotReader(job_, key).committed_steps();
        return std::find(steps.begin(), steps.end(), version) != steps.end();
    };
    const std::string own_key = own_segment();
    ft::SnapshotScope scope;
    scope.own = !holds(own_key);
    std::vector<std::string> keys{own_key};
    ft::RingOffer offer;  // what this role holds at `version`, and its payload's layout
    offer.payload = ft::payload_layout(in.regions);
    for (int r : held_roles) {
        keys.push_back(held_segment(r));
        const bool held = holds(keys.back());
        scope.receive_from.push_back(!held);
        if (held) offer.holds.push_back(r);
    }
    // Like the recovery reports: a process that dies inside the exchange can leave it failed on
    // some processes and complete with its part blank on others, so everyone goes on only if
    // everyone got every part intact (agree), and a failure abandons the step (resume_at()).
    in.before_exchange();
    const ft::Comm& work = membership_.work;
    std::string torn;
    try {
        const auto gathered = ft::allgather_strings(work, offer.encode());
        const auto offer_of = [&](int r) { return ft::RingOffer::decode(gathered[static_cast<size_t>(r)]); };
        for (int r : successors) {
            scope.send_to.push_back(!offer_of(r).holds_payload_of(me));
            setup.successors.push_back({r, topology::role_key(topology::coord_of(shape_, r)), {}});
        }
        for (int r : held_roles)
            setup.predecessors.push_back({r, topology::role_key(topology::coord_of(shape_, r)), offer_of(r).payload});
    } catch (const Error& e) {
        torn = e.what();
    }
    if (!work.agree(torn.empty() ? 1 : 0, in.deadline))
        throw CommRevoked(0, 0, "exchange of snapshot layouts", work.name(), work.rank(),
                          torn.empty() ? "another process did not get every layout" : "a torn exchange: " + torn);
    // Stores of pairs that no longer exist are unmapped once transfers of the aborted epoch
    // cannot touch them any more (the quarantine); their segments stay until the job ends.
    for (auto& dropped : stores->keep_only(keys)) in.quarantine.hold(std::move(dropped));
    setup.regions = std::move(in.regions);
    setup.pool = stores;
    in.complete(setup);
    protection = std::make_unique<ft::Protection>(std::move(setup), std::move(in.replication));
    state_ready_ = std::move(in.state_ready);
    first_scope_ = std::move(scope);
}

void ProtectionRing::snapshot(std::int64_t version) {
    if (state_ready_) state_ready_();
    ft::SnapshotScope scope;
    if (first_scope_) scope = *std::exchange(first_scope_, std::nullopt);
    protection->start_snapshot(version, membership_.epoch, std::move(scope));
    snapshot_version = version;
}

void ProtectionRing::retire(ft::Quarantine& quarantine) {
    if (!protection) return;
    protection->abort();
    quarantine.epoch_aborted();
    quarantine.hold(std::move(protection));
}

void ProtectionRing::make_blank_slots(const std::vector<std::size_t>& slot_bytes, const std::string& tag) {
    blanks_made_ = true;
    // On a thread of its own at the lowest priority: the spare stays responsive to a failure
    // meanwhile (a takeover uses whatever is made by then), and the job's ranks may share
    // this node's cores (nice values are per thread; the main thread becomes the trainer's).
    blank_maker_ = std::jthread([pool = stores, job = job_, tag, slot_bytes] {
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 19);
        try {
            pool->make_blanks(job, tag, slot_bytes);
        } catch (const Error& e) {
            // Not fatal: a role this spare takes over makes its slots then.
            std::fprintf(stderr, "flashrec[spare pid %d]: could not make snapshot slots ahead: %s\n",
                         static_cast<int>(getpid()), e.what());
        }
    });
}

void ProtectionRing::drop_blanks() {
    stores->drop_blanks();
    if (blank_maker_.joinable()) blank_maker_.join();  // unlinks what it was making
}

}  // namespace flashrec::runtime
