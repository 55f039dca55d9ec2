// What a process can read of the snapshots in its node's /dev/shm: its own stores, the ring
// copies it holds, and the own snapshots of the other roles placed on its node. A process that
// dies on a live node leaves the last ones intact; a survivor there serves them in-job (issue 15,
// case 2), so a correlated *process* failure does not need HDF5.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "flashrec/runtime/recovery_plan.hpp"
#include "flashrec/runtime/topology.hpp"

namespace flashrec::recovery {

// Committed versions held in (job, key), by their verified headers: reading every byte here
// cost 0.7 s for 64 MiB stores. The version chosen is verified in full when it is read.
// `rejected` versions failed that full verification earlier; a store whose segments cannot even
// be opened (a corrupt header) holds nothing usable.
Versions committed_versions(const std::string& job, const std::string& key,
                            const std::set<std::int64_t>& rejected = {});

// The own snapshots of the roles placed on role `me`'s node (node_of_role, before the failure),
// `me` excluded, found under this node's store prefix. Roles with none are left out.
std::vector<HeldCopy> node_local_copies(const std::string& job, const std::string& store_prefix,
                                        const topology::Shape& shape, int me,
                                        const std::vector<int>& node_of_role,
                                        const std::function<std::set<std::int64_t>(const std::string&)>& rejected);

}  // namespace flashrec::recovery
