// Time as the launcher's core sees it: passed in with every input (a fake clock in tests), never
// read. Both clocks: steady for durations, the wall clock for the event log's unix times.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

namespace flashrec::launcher {

using SteadyClock = std::chrono::steady_clock;
using WallClock = std::chrono::system_clock;
using SteadyTime = SteadyClock::time_point;
using WallTime = WallClock::time_point;

struct Now {
    SteadyTime steady;
    WallTime wall;
};

inline double ms_between(SteadyTime a, SteadyTime b) { return std::chrono::duration<double, std::milli>(b - a).count(); }
inline double round3(double v) { return std::round(v * 1000.0) / 1000.0; }
inline std::int64_t unix_ms(WallTime t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
// "12.3 ms", "4.56 s", "2.1 min"; "?" for a negative duration (not measured).
inline std::string human_ms(double ms) {
    char buf[64];
    if (ms < 0) return "?";
    if (ms < 1000) std::snprintf(buf, sizeof buf, "%.1f ms", ms);
    else if (ms < 120000) std::snprintf(buf, sizeof buf, "%.2f s", ms / 1000);
    else std::snprintf(buf, sizeof buf, "%.1f min", ms / 60000);
    return buf;
}

}  // namespace flashrec::launcher
