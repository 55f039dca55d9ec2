// Heartbeat processing cost on the controller (issue 6's benchmark): N simulated ranks register
// through Controller::feed_hello, then every rank's heartbeat is fed once per round through
// Controller::feed_heartbeat (the code a socket's frame runs, minus the socket). Measures, per
// round of N heartbeats (one heartbeat period of the whole job), the controller's CPU time and
// wall time, and the cost of one hang-detector pass (check_now) over N ranks.
//   bench_heartbeat_cost [--ranks N...] [--rounds R] [--json FILE]
// FFTrainer (§6.1) reports 19 ms of CPU for 32,768 workers.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "controller.hpp"
#include "flashrec/ft/event_log.hpp"
#include "flashrec/ft/wire.hpp"

namespace {

using namespace flashrec::ft;
using namespace flashrec::launcher;

double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

struct Row {
    int ranks = 0;
    double round_cpu_ms = 0, round_wall_ms = 0, ns_per_heartbeat = 0, check_ms = 0, register_ms = 0;
    double cpu_share_at_100ms = 0;  // fraction of one core at one heartbeat per rank per 100 ms
};

Row measure(int ranks, int rounds) {
    std::ofstream sink("/dev/null");
    ControllerOptions options;
    options.bind_address = "127.0.0.1";
    options.token = wire::generate_token();
    options.hang_timeout = std::chrono::hours(1);  // nobody is declared hung while we measure
    options.check_period = std::chrono::hours(1);  // the detector runs only when we call it
    options.event_log = std::make_shared<EventLog>(sink);
    Controller controller(options);

    Row row;
    row.ranks = ranks;
    std::vector<RankSlot> slots;
    slots.reserve(static_cast<std::size_t>(ranks));
    const double t0 = now_ms();
    for (int i = 0; i < ranks; ++i) {
        wire::Hello hello;
        hello.token = options.token;
        hello.role = "dp" + std::to_string(i) + ".tp0.pp0";
        hello.world_rank = i;
        hello.pid = 1000 + i;
        hello.hostname = "node" + std::to_string(i / 8);
        const auto slot = controller.feed_hello(hello);
        if (!slot) {
            std::fprintf(stderr, "feed_hello refused rank %d\n", i);
            std::exit(1);
        }
        slots.push_back(*slot);
    }
    row.register_ms = now_ms() - t0;

    std::vector<double> cpu, wall, check;
    const int warmup = 3;
    for (int r = 0; r < rounds + warmup; ++r) {
        const wire::Heartbeat beat{r + 1, wire::Phase::compute};
        const double c0 = thread_cpu_ms(), w0 = now_ms();
        for (const RankSlot& slot : slots) controller.feed_heartbeat(slot, beat);
        const double c1 = thread_cpu_ms(), w1 = now_ms();
        controller.check_now();
        const double w2 = now_ms();
        if (r < warmup) continue;
        cpu.push_back(c1 - c0);
        wall.push_back(w1 - w0);
        check.push_back(w2 - w1);
    }
    row.round_cpu_ms = median(cpu);
    row.round_wall_ms = median(wall);
    row.ns_per_heartbeat = row.round_wall_ms * 1e6 / ranks;
    row.check_ms = median(check);
    row.cpu_share_at_100ms = (row.round_cpu_ms + row.check_ms) / 100.0;
    if (controller.heartbeat_count() != static_cast<std::uint64_t>(ranks) * static_cast<std::uint64_t>(rounds + warmup)) {
        std::fprintf(stderr, "heartbeats lost: %llu\n", static_cast<unsigned long long>(controller.heartbeat_count()));
        std::exit(1);
    }
    return row;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> ranks;
    int rounds = 50;
    std::string json;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--ranks") {
            while (i + 1 < argc && argv[i + 1][0] != '-') ranks.push_back(std::atoi(argv[++i]));
        } else if (a == "--rounds" && i + 1 < argc) {
            rounds = std::max(1, std::atoi(argv[++i]));
        } else if (a == "--json" && i + 1 < argc) {
            json = argv[++i];
        } else {
            std::fprintf(stderr, "usage: bench_heartbeat_cost [--ranks N...] [--rounds R] [--json FILE]\n");
            return 2;
        }
    }
    if (ranks.empty()) ranks = {1000, 10000, 32768};
    std::vector<Row> rows;
    for (int n : ranks) rows.push_back(measure(n, rounds));
    std::printf("Heartbeat processing on the controller (Controller::feed_heartbeat, %d rounds, median):\n\n", rounds);
    std::printf("| ranks | CPU per round of heartbeats | wall per round | per heartbeat | detector pass (check_now) | "
                "one core busy at 100 ms heartbeats | register all |\n");
    std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const Row& r : rows)
        std::printf("| %d | %.3f ms | %.3f ms | %.0f ns | %.3f ms | %.2f %% | %.1f ms |\n", r.ranks, r.round_cpu_ms,
                    r.round_wall_ms, r.ns_per_heartbeat, r.check_ms, r.cpu_share_at_100ms * 100, r.register_ms);
    std::printf("\n(FFTrainer reports 19 ms of CPU for 32,768 workers.)\n");
    if (!json.empty()) {
        std::ofstream out(json);
        out << "[";
        for (std::size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            out << (i ? "," : "") << "{\"ranks\":" << r.ranks << ",\"round_cpu_ms\":" << r.round_cpu_ms
                << ",\"round_wall_ms\":" << r.round_wall_ms << ",\"ns_per_heartbeat\":" << r.ns_per_heartbeat
                << ",\"check_ms\":" << r.check_ms << ",\"cpu_share_at_100ms\":" << r.cpu_share_at_100ms
                << ",\"register_ms\":" << r.register_ms << "}";
        }
        out << "]\n";
    }
    return 0;
}
