// Known-harmless MPI noise is dropped from the ranks' output; everything else passes (noise_filter.hpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "noise_filter.hpp"

using flashrec::launcher::is_known_noise;

TEST_CASE("libevent's epoll warnings are noise") {
    CHECK(is_known_noise("[warn] Epoll ADD(4) on fd 17 failed. Old events were 0; read change was 1 (add); "
                         "write change was 0 (none); close change was 0 (none): Bad file descriptor\n"));
    CHECK(is_known_noise("[warn] Epoll MOD(1) on fd 9 failed. Old events were 6; read change was 0 (none); "
                         "write change was 2 (del); close change was 0 (none): Bad file descriptor"));
    CHECK(is_known_noise("[warn] Epoll DEL(2) on fd 23 failed."));
}

TEST_CASE("everything else passes through") {
    CHECK_FALSE(is_known_noise(""));
    CHECK_FALSE(is_known_noise("step 20 loss 0.1234\n"));
    CHECK_FALSE(is_known_noise("final_checksum=0123456789abcdef\n"));
    CHECK_FALSE(is_known_noise("flashrec[dp1 pid 42]: fault injected: role=1:step=20 (pid 42)\n"));
    // Other libevent warnings are not known to be harmless.
    CHECK_FALSE(is_known_noise("[warn] Epoll ADD(4) on fd 17 succeeded\n"));
    CHECK_FALSE(is_known_noise("[warn] event_base_loop: reentrant invocation\n"));
    // A rank that prints the text inside its own line is not filtered.
    CHECK_FALSE(is_known_noise("my log: [warn] Epoll ADD(4) on fd 17 failed.\n"));
}

TEST_CASE("every listed pattern is named and explained") {
    for (const auto& p : flashrec::launcher::kKnownNoise) {
        CHECK_FALSE(p.name.empty());
        CHECK_FALSE(p.why.empty());
        CHECK(p.regex.front() == '^');
    }
}
