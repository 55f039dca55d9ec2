#pragma once
// Known-harmless output of Open MPI's own layers (PRRTE, libevent) that the launcher does not pass
// through from the ranks' output. The one list; docs/launcher.md ("Rank output") lists it too.
// Every other line passes through unchanged.
#include <array>
#include <string_view>

namespace flashrec::launcher {

struct NoisePattern {
    std::string_view name;   // for docs and tests
    std::string_view regex;  // ECMAScript, searched in one line of output
    std::string_view why;    // why it is harmless
};

inline constexpr std::array kKnownNoise = {
    NoisePattern{"libevent-epoll",
                 R"(^\[warn\] Epoll (ADD|MOD|DEL)\(\d+\) on fd \d+ failed\.)",
                 "the event loop inside PRRTE/PMIx (libevent) could not change its watch on a descriptor, "
                 "typically one already closed (Bad file descriptor) as processes end; a warning of "
                 "that loop, not a failure of any rank"},
};

// True when `line` (one line, with or without its newline) matches a pattern of kKnownNoise.
bool is_known_noise(std::string_view line);

}  // namespace flashrec::launcher
