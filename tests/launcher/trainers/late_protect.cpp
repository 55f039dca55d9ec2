// A trainer with a deterministic mistake, written as a new user would: it calls protect() inside
// the step loop (at --late-step, default 2) and does not catch what that throws. Every relaunch
// would fail the same way; flashrec-launch must end the job at once with its own exit code
// (tests/launcher/CMakeLists.txt: ft.launch.deterministic_error_ends_at_once).
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "flashrec/flashrec.hpp"

int main(int argc, char** argv) {
    long late_step = 2;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::strcmp(argv[i], "--late-step") == 0) late_step = std::atol(argv[i + 1]);
    flashrec::Runtime rt(argc, argv);
    std::vector<float> w(64, 1.0f), late(8, 0.0f);
    rt.protect("w", std::span(w), flashrec::Redundancy::sharded);
    for (auto step : rt.steps()) {
        if (step.index() == late_step) rt.protect("late", std::span(late), flashrec::Redundancy::sharded);
        step.update([&] {
            for (auto& x : w) x += 1.0f;
        });
    }
    return 0;
}
