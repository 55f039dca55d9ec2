// The value types of flashrec's API (roles, redundancy kinds, element types, phases): public,
// and free of MPI so that code which only names them needs nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace flashrec {

// A logical role: the process's coordinate in the data/tensor/pipeline-parallel grid.
// Roles, not MPI ranks, name state: ranks change at every repair, roles do not.
struct Role {
    int dp = 0, tp = 0, pp = 0;
    std::string key() const;  // "dp3.tp0.pp0"
    bool operator==(const Role&) const = default;
};

// How a protected buffer is kept safe (docs/ARCHITECTURE.md, "Protection").
enum class Redundancy {
    replicated,  // identical on every DP peer (parameters under DP/ZeRO-1): local snapshot only
    sharded,     // unique to this role (optimizer shard): snapshot + copies on k ring successors
    envelope,    // small per-role metadata (RNG, loader position): travels with every snapshot
};

// A DP role's part [first, last) of an array (ZeRO-1 sharding), from Runtime::shard_range.
// Named members, so that a lambda can capture the range itself: clang before 16 cannot capture
// structured bindings (a C++20 feature). `auto [first, last] = rt.shard_range(n)` works too.
struct ShardRange {
    std::size_t first = 0;
    std::size_t last = 0;
    std::size_t size() const { return last - first; }
    bool operator==(const ShardRange&) const = default;
};

// Element type of a protected buffer, recorded in checkpoints.
enum class DType { u8, i32, i64, f32, f64 };

template <class T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }

// Where a step is, for the controller's hang detection and for fault injection.
// tp_exchange / pp_exchange: inside a Step's tensor- / pipeline-parallel exchange.
enum class Phase { forward, allreduce, sync, optimizer, replication, recovery, tp_exchange, pp_exchange };

// What a reducing step collective leaves: the sum, or the sum divided by the group's size
// (one float division per element, after the fixed-order sum).
enum class Reduce { sum, mean };

}  // namespace flashrec
