#include "node_local_copies.hpp"

#include "flashrec/errors.hpp"
#include "flashrec/ft/snapshot.hpp"

namespace flashrec::recovery {

Versions committed_versions(const std::string& job, const std::string& key, const std::set<std::int64_t>& rejected) {
    Versions v;
    std::vector<std::int64_t> steps;
    try {
        steps = ft::SnapshotReader(job, key).committed_steps();
    } catch (const Error&) {
        return v;
    }
    std::erase_if(steps, [&](std::int64_t s) { return rejected.contains(s); });
    if (!steps.empty()) v.newest = steps[0];
    if (steps.size() > 1) v.older = steps[1];
    return v;
}

std::vector<HeldCopy> node_local_copies(const std::string& job, const std::string& store_prefix,
                                        const topology::Shape& shape, int me,
                                        const std::vector<int>& node_of_role,
                                        const std::function<std::set<std::int64_t>(const std::string&)>& rejected) {
    std::vector<HeldCopy> found;
    if (me < 0 || static_cast<size_t>(me) >= node_of_role.size()) return found;
    for (int r = 0; r < shape.size() && static_cast<size_t>(r) < node_of_role.size(); ++r) {
        if (r == me || node_of_role[static_cast<size_t>(r)] != node_of_role[static_cast<size_t>(me)]) continue;
        const std::string key = store_prefix + topology::role_key(topology::coord_of(shape, r));
        const Versions v = committed_versions(job, key, rejected(key));
        if (v.newest >= 0) found.push_back({r, v});
    }
    return found;
}

}  // namespace flashrec::recovery
