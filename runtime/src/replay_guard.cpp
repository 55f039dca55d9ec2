#include "replay_guard.hpp"

#include <cmath>

#include "flashrec/ft/checksum.hpp"
#include "flashrec/runtime/platform.hpp"

namespace flashrec::runtime {

void ReplayGuard::note_versions_to_replay(std::int64_t restored, const std::vector<std::string>& stores) {
    checks_.clear();
    replay_from_ = restored;
    for (const auto& key : stores) {
        try {
            const ft::SnapshotReader reader(job_, key);
            for (std::int64_t v : reader.committed_steps())
                if (v > restored)
                    if (auto header = reader.committed_header(v)) checks_.emplace(v, Check{key, *header});
        } catch (const Error& e) {  // a check that cannot be made is no reason to stop the job
            log_("replay check: cannot read the headers of " + key + ": " + e.what());
        }
    }
}

bool ReplayGuard::check_replayed(std::int64_t version, const std::string& role) {
    bool exact = true;
    if (checks_.empty()) return exact;
    const auto [first, last] = checks_.equal_range(version);
    for (auto it = first; it != last; ++it) {
        const Check& check = it->second;
        std::optional<ft::CommittedHeader> now;
        try {
            now = ft::SnapshotReader(job_, check.store).committed_header(version);
        } catch (const Error& e) {
            log_("replay check: cannot read " + check.store + ": " + e.what());
        }
        // Not rewritten by this replay (the store left the ring): nothing to compare.
        if (!now || (now->slot == check.before.slot && now->generation == check.before.generation)) continue;
        // The platform buffer records who wrote the version: a replacement on another platform
        // rewrites it, which is no divergence of the trainer's steps.
        // A buffer hashed by another algorithm than before (the GPU hash turned on or off by the
        // process that rewrote it) cannot be compared by checksum either.
        auto comparable = [&](const ft::CommittedHeader& header) {
            BufferChecksums sums;
            for (std::size_t i = 0; i < header.checksums.size(); ++i) {
                const bool same_algorithm = i >= header.algorithms.size() || i >= check.before.algorithms.size() ||
                                            i >= now->algorithms.size() ||
                                            check.before.algorithms[i] == now->algorithms[i];
                if (header.checksums[i].first != platform::kBufferName && same_algorithm)
                    sums.push_back(header.checksums[i]);
            }
            return sums;
        };
        const auto diverged = first_divergence(comparable(check.before), comparable(*now));
        if (!diverged) {
            if (debug_)
                log_("replay check: version " + std::to_string(version) + " of " + check.store +
                     " is bitwise the version committed before the failure");
            continue;
        }
        const std::string before = ft::checksum_hex(diverged->before), replayed = ft::checksum_hex(diverged->replayed);
        log_("replay diverged: version " + std::to_string(version) + " of " + check.store + ", buffer '" +
             diverged->buffer + "', hashes " + replayed + " after replaying from version " + std::to_string(replay_from_) +
             " but " + before + " as first committed. The steps are not deterministic: the trainer must "
             "draw its data from step.data_seed() and keep every state that changes across steps in protect()ed "
             "buffers (docs/snapshots.md, \"Checking that replay is exact\")");
        emit_(ft::records::ReplayDiverged{role, check.store, version, replay_from_, diverged->buffer, before, replayed}
                  .to_json());
        exact = false;
    }
    // Versions up to this one are past: a later failure notes its own.
    checks_.erase(checks_.begin(), checks_.upper_bound(version));
    return exact;
}

void ReplayGuard::probe_rewound(std::int64_t to, std::chrono::steady_clock::time_point started) {
    probe_.to = to;
    probe_rewound_at_ = std::chrono::steady_clock::now();
    probe_restore_ms_ = std::chrono::duration<double, std::milli>(probe_rewound_at_ - started).count();
}

ft::records::ReplayProbe ReplayGuard::probe_verdict(bool everyone_exact) {
    const ReplayProbe probe = probe_;
    probe_ = {};
    ft::records::ReplayProbe record;
    record.from = probe.from;
    record.to = probe.to;
    record.steps = probe.to - probe.from;
    record.passed = everyone_exact;
    record.restore_ms = std::round(probe_restore_ms_ * 1000) / 1000;
    record.replay_ms = std::round(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                           probe_rewound_at_)
                                      .count() *
                                  1000) /
                       1000;
    return record;
}

}  // namespace flashrec::runtime
