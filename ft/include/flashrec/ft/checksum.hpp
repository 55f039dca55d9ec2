// The one checksum flashrec uses for snapshots, replicas and checkpoint files: XXH3-64
// (much faster than CRC32 on the CPU, and 64 bits make an accidental match implausible).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace flashrec::ft {

std::uint64_t checksum(const void* data, std::size_t bytes);
// 16 lowercase hex digits, as written in manifests and logs.
std::string checksum_hex(std::uint64_t value);

}  // namespace flashrec::ft
