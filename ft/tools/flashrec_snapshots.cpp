// flashrec-snapshots: inspect or remove a job's node-local snapshots (/dev/shm) on this node.
//   flashrec-snapshots verify <job>   every store's newest committed version, verified
//   flashrec-snapshots remove <job>   unlink every segment of the job
// `verify` exits 1 when some store has no complete version: what a warm relaunch would find.
#include <cstdio>
#include <map>
#include <string>

#include "flashrec/ft/snapshot.hpp"

int main(int argc, char** argv) {
    if (argc != 3 || (std::string(argv[1]) != "verify" && std::string(argv[1]) != "remove")) {
        std::fprintf(stderr, "usage: flashrec-snapshots verify|remove <job>\n");
        return 2;
    }
    const std::string job = argv[2];
    try {
        flashrec::ft::validate_job_name(job);
        if (std::string(argv[1]) == "remove") {
            std::printf("removed %d segment(s) of job %s\n", flashrec::ft::remove_all(job), job.c_str());
            return 0;
        }
        // "/flashrec.<job>.<key>.<slot>" -> key
        std::map<std::string, int> keys;
        const std::string prefix = "/flashrec." + job + ".";
        for (const auto& name : flashrec::ft::list_segments(job)) {
            const std::string key = name.substr(prefix.size(), name.rfind('.') - prefix.size());
            if (!key.starts_with(flashrec::ft::kBlankKeyPrefix)) keys[key]++;  // a spare's, empty
        }
        int bad = 0;
        for (const auto& [key, slots] : keys) {
            const auto status = flashrec::ft::verify_snapshot(job, key);
            if (status.ok)
                std::printf("ok    %-48s version %lld (epoch %lld, slot %d)\n", key.c_str(),
                            static_cast<long long>(status.step), static_cast<long long>(status.epoch),
                            status.slot);
            else
                std::printf("BAD   %-48s %s\n", key.c_str(), status.problem.c_str());
            bad += status.ok ? 0 : 1;
        }
        std::printf("%zu store(s), %d without a complete version\n", keys.size(), bad);
        return bad == 0 && !keys.empty() ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "flashrec-snapshots: %s\n", e.what());
        return 2;
    }
}
