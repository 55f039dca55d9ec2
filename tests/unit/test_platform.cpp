// The platform fingerprint (runtime/platform.hpp): its encoding in the protected buffer, the
// comparison a restore makes, /proc/cpuinfo parsing and the named fake's scopes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <cstddef>

#include "flashrec/errors.hpp"
#include "flashrec/runtime/platform.hpp"

using namespace flashrec::runtime::platform;

namespace {
Fingerprint sample() {
    return {"AMD EPYC 7763 64-Core Processor", "0123456789abcdef", "none", "0.1.0 aa11", "bb22cc33"};
}
}  // namespace

TEST_CASE("a fingerprint survives the buffer, and an empty buffer holds none") {
    std::array<std::byte, kBufferBytes> buffer{};
    CHECK_FALSE(decode(buffer).has_value());
    encode(sample(), buffer);
    const auto back = decode(buffer);
    REQUIRE(back.has_value());
    CHECK(*back == sample());
    CHECK(compare(*back, sample()).empty());
}

TEST_CASE("encode cuts a value that does not fit at a line, and clears what was there") {
    std::array<std::byte, 64> small{};
    small.fill(std::byte{'x'});
    Fingerprint f = sample();
    f.gpu_model = std::string(200, 'g');
    encode(f, small);
    const auto back = decode(small);
    REQUIRE(back.has_value());
    CHECK(back->cpu_model == f.cpu_model);
    CHECK(back->gpu_model.empty());  // did not fit: not decoded as a wrong value
}

TEST_CASE("compare names every field that differs, writer's value first") {
    Fingerprint here = sample();
    here.cpu_flags = "fedcba9876543210";
    here.trainer_build = "dd44";
    const auto diff = compare(sample(), here);
    REQUIRE(diff.size() == 2);
    CHECK(diff[0].field == "cpu_flags");
    CHECK(diff[0].writer == "0123456789abcdef");
    CHECK(diff[0].here == "fedcba9876543210");
    CHECK(diff[1].field == "trainer_build");
    Fingerprint gpu = sample();
    gpu.gpu_model = "NVIDIA H100 80GB HBM3";
    REQUIRE(compare(sample(), gpu).size() == 1);
    CHECK(compare(sample(), gpu)[0].field == "gpu_model");
}

TEST_CASE("parse_cpuinfo takes the first processor's model and flags") {
    const char* text =
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "flags\t\t: fpu vme avx512f\n\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n";
    const CpuInfo info = parse_cpuinfo(text);
    CHECK(info.model == "Intel(R) Xeon(R) Platinum 8480+");
    CHECK(info.flags == "fpu vme avx512f");
    CHECK(parse_cpuinfo("processor : 0\nFeatures : fp asimd\n").flags == "fp asimd");
    CHECK(flags_hash("fpu vme avx512f") != flags_hash("fpu vme"));
    CHECK(flags_hash("fpu").size() == 16);
}

TEST_CASE("the fake CPU flags apply only in their scope") {
    CHECK_FALSE(fake_cpu_flags(nullptr, true, true).has_value());
    CHECK(fake_cpu_flags("all:avx", false, false) == std::optional<std::string>("avx"));
    CHECK(fake_cpu_flags("replacements:avx", true, false) == std::optional<std::string>("avx"));
    CHECK_FALSE(fake_cpu_flags("replacements:avx", false, true).has_value());
    CHECK(fake_cpu_flags("relaunched:avx", false, true) == std::optional<std::string>("avx"));
    CHECK_FALSE(fake_cpu_flags("relaunched:avx", true, false).has_value());
    CHECK_THROWS_AS(fake_cpu_flags("spares:avx", true, true), flashrec::Error);
    CHECK_THROWS_AS(fake_cpu_flags("avx", true, true), flashrec::Error);
}

TEST_CASE("probe reads this machine") {
    const Fingerprint f = probe("", false, false);
    CHECK(f.gpu_model == "none");
    CHECK(f.cpu_flags.size() == 16);
    CHECK(f.flashrec_build.rfind("0.1.0 ", 0) == 0);
    CHECK_FALSE(f.trainer_build.empty());
    CHECK(probe("", false, false) == f);  // the same process, the same fingerprint
}
