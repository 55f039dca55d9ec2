#include "protection_ring.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>

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
