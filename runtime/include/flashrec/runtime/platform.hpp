// What a role's state was computed on (issue 29, item 4): a trainer built with -march=native gives
// other bits on another CPU generation, so a replacement or relaunch there would diverge silently.
// The runtime keeps this process's fingerprint in a protected envelope buffer of its own
// (kBufferName), so it travels with every snapshot, ring copy and HDF5 checkpoint of the role; a
// restore compares the writer's with its own (docs/recovery.md, "Platform fingerprint").
// Internal: not part of the public flashrec.hpp.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashrec::runtime::platform {

// The runtime's own protected buffer; trainers may not register names starting "flashrec.".
inline constexpr char kBufferName[] = "flashrec.platform";
inline constexpr std::size_t kBufferBytes = 1024;

struct Fingerprint {
    std::string cpu_model;       // /proc/cpuinfo "model name" (or "unknown")
    std::string cpu_flags;       // XXH3-64 of the "flags" line, 16 hex digits
    std::string gpu_model;       // the CUDA device of the role's state; "none" without one
    std::string flashrec_build;  // "<version> <GNU build-id of the flashrec code>"
    std::string trainer_build;   // GNU build-id of the executable (or "xxh3:<hash of the file>")
    bool operator==(const Fingerprint&) const = default;
};

// The buffer's bytes: "field=value\n" lines, NUL-padded to kBufferBytes; a value too long is cut.
void encode(const Fingerprint& fingerprint, std::span<std::byte> out);
// nullopt: the buffer holds no fingerprint (all zero: a checkpoint from a flashrec without one).
std::optional<Fingerprint> decode(std::span<const std::byte> in);

struct Difference {
    std::string field;   // cpu_model | cpu_flags | gpu_model | flashrec_build | trainer_build
    std::string writer;  // the value in the state restored
    std::string here;    // this process's
};
// The fields that differ, in the order above; empty: the same platform. Pure.
std::vector<Difference> compare(const Fingerprint& writer, const Fingerprint& here);

// /proc/cpuinfo's text: the first processor's "model name" and "flags" (on arm64 "Features").
struct CpuInfo {
    std::string model, flags;
};
CpuInfo parse_cpuinfo(std::string_view text);
std::string flags_hash(std::string_view flags);

// A named fake for tests (the part under test is recording and comparing, not /proc/cpuinfo):
// FLASHREC_FAKE_CPU_FLAGS="<scope>:<flags>" replaces this process's CPU flags when its scope
// matches: all | replacements (a hot spare or spawned process that took a role) | relaunched (a
// process of a warm relaunch). nullopt: unset or out of scope. Throws flashrec::Error on a bad value.
inline constexpr char kFakeCpuFlagsEnv[] = "FLASHREC_FAKE_CPU_FLAGS";
std::optional<std::string> fake_cpu_flags(const char* value, bool replacement, bool relaunched);

// This process's fingerprint: /proc/cpuinfo (or the fake), `gpu_model`, the build ids.
Fingerprint probe(const std::string& gpu_model, bool replacement, bool relaunched);

}  // namespace flashrec::runtime::platform
