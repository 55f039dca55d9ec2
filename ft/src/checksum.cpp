#include "flashrec/ft/checksum.hpp"

#include <xxhash.h>

#include <cstdio>

namespace flashrec::ft {

std::uint64_t checksum(const void* data, std::size_t bytes) { return XXH3_64bits(data, bytes); }

std::string checksum_hex(std::uint64_t value) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
    return text;
}

}  // namespace flashrec::ft
