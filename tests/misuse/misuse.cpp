// Misuse fails at the call (issue 15, case 7): protect() with a null or empty (not sharded) buffer, or after
// the step loop started, throws flashrec::UsageError naming the buffer; with --throw-at N the
// trainer leaves by an exception in step N, and under plain mpirun its own /dev/shm segments
// must be gone afterwards. Prints OK/FAIL lines (run by ctest through fr-run, 1 rank).
#include <dirent.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashrec/flashrec.hpp"

namespace {
template <class F>
void expect_refused(const char* what, F&& call, const std::string& buffer) {
    try {
        call();
        std::printf("FAIL %s: accepted\n", what);
    } catch (const flashrec::UsageError& e) {
        const bool named = e.buffer() == buffer && std::string(e.what()).find("'" + buffer + "'") != std::string::npos;
        std::printf("%s %s: %s\n", named ? "OK" : "FAIL", what, e.what());
    } catch (const std::exception& e) {
        std::printf("FAIL %s: not a UsageError: %s\n", what, e.what());
    }
}

int segments_of(const std::string& job) {
    int n = 0;
    if (DIR* dir = ::opendir("/dev/shm")) {
        const std::string prefix = "flashrec." + job + ".";
        while (const dirent* e = ::readdir(dir)) n += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
        ::closedir(dir);
    }
    return n;
}
}  // namespace

int main(int argc, char** argv) {
    long throw_at = -1;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--throw-at") throw_at = std::stol(argv[i + 1]);
    const std::string job = "t-misuse";
    try {
        flashrec::Runtime rt(argc, argv);
        std::vector<float> w(64, 1.0f), late(8, 0.0f);
        expect_refused("null buffer", [&] {
            rt.protect("nullbuf", nullptr, 16, flashrec::DType::f32, flashrec::Redundancy::replicated);
        }, "nullbuf");
        // Empty is refused but for a ZeRO shard, which is empty on the roles past the end of a
        // buffer smaller than dp (ft.recovery_uneven_shards).
        expect_refused("empty buffer", [&] {
            rt.protect("emptybuf", std::span<float>(), flashrec::Redundancy::replicated);
        }, "emptybuf");
        rt.protect("w", std::span(w), flashrec::Redundancy::sharded);
        for (auto step : rt.steps()) {
            if (step.index() == 0)
                expect_refused("protect inside the loop", [&] {
                    rt.protect("late", std::span(late), flashrec::Redundancy::sharded);
                }, "late");
            if (step.index() == throw_at) {
                std::printf("segments while running: %d\n", segments_of(job));
                throw std::runtime_error("the trainer failed in step " + std::to_string(throw_at));
            }
            step.update([&] {
                for (auto& x : w) x += 1.0f;
            });
        }
        std::printf("OK loop ended\n");
    } catch (const std::exception& e) {
        // ~Runtime has run: this process's stores must be gone (no launcher will use them).
        const int left = segments_of(job);
        std::printf("%s exception left %d segment(s) of job %s: %s\n", left == 0 ? "OK" : "FAIL", left,
                    job.c_str(), e.what());
        std::fflush(stdout);
        return 3;
    }
    std::fflush(stdout);
    return 0;
}
