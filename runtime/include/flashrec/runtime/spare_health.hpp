// A spare's own admission checks (issue 29, item 3): what its node's /dev/shm can give the role's
// snapshot slots. Its report carries the result, and the plan (recovery_plan.hpp,
// admission_problem) decides on every process alike. Internal.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

namespace flashrec::runtime::spare_health {

// A named fake for tests (the part under test is admission, not statvfs):
// FLASHREC_FAKE_SHM_FREE_BYTES="<scope>:<bytes>" makes the room a spare reports `bytes` when its
// scope matches: all | spawned | spare:<i> (hot spare i, as in a fault's role=spare:<i>).
// nullopt: unset or out of scope. Throws flashrec::Error on a bad value.
inline constexpr char kFakeShmEnv[] = "FLASHREC_FAKE_SHM_FREE_BYTES";
std::optional<std::int64_t> fake_shm_room(const char* value, int hot_spare_index, bool spawned);

// The bytes this node's /dev/shm can give a role's stores: its free space (statvfs) plus
// `reserved`, the slots made ahead that the stores would take; or the fake.
std::int64_t shm_room(std::size_t reserved, int hot_spare_index, bool spawned);

}  // namespace flashrec::runtime::spare_health
