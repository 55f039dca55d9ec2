// NodeLiveness (launcher/node_liveness.hpp) with a fake clock: a node is lost when all its ranks
// fall silent for the node timeout while most other nodes keep sending heartbeats; never from
// the launcher's own pause, nor from a machine on which every heartbeat comes late.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "node_liveness.hpp"

namespace fl = flashrec::launcher;
using namespace std::chrono_literals;
using Clock = fl::NodeLiveness::Clock;
using Nodes = std::vector<std::string>;

namespace {

// A job of `nodes` nodes with `ranks` ranks each ("n<i>", roles "r<i>.<j>"), a fake clock, and
// heartbeats sent by every rank of the nodes that are not `silent`.
struct Scenario {
    fl::NodeLiveness liveness{1000ms, 100ms};
    Clock::time_point now = Clock::time_point{} + 1h;
    int nodes;
    int ranks;
    std::vector<bool> silent;

    Scenario(int nodes_, int ranks_) : nodes(nodes_), ranks(ranks_), silent(static_cast<std::size_t>(nodes_), false) {
        for (int n = 0; n < nodes; ++n)
            for (int r = 0; r < ranks; ++r) liveness.watch(role(n, r), node(n), now);
    }
    static std::string node(int n) { return "n" + std::to_string(n); }
    static std::string role(int n, int r) { return "r" + std::to_string(n) + "." + std::to_string(r); }

    // `period` of time passes in which every rank not silent beats once; the launcher checks
    // after every heartbeat round. Returns the nodes lost, in order.
    Nodes run(std::chrono::milliseconds total, std::chrono::milliseconds period = 100ms) {
        Nodes lost;
        for (auto t = 0ms; t < total; t += period) {
            now += period;
            for (int n = 0; n < nodes; ++n)
                if (!silent[static_cast<std::size_t>(n)])
                    for (int r = 0; r < ranks; ++r) liveness.heard(role(n, r), now);
            for (auto& l : liveness.check(now)) lost.push_back(l);
        }
        return lost;
    }
};

}  // namespace

TEST_CASE("a frozen node is lost after the node timeout, once, and not before") {
    Scenario s(4, 2);
    CHECK(s.run(2s).empty());
    s.silent[2] = true;
    CHECK(s.run(900ms).empty());  // silent 900 ms: not yet
    CHECK(s.run(200ms) == Nodes{"n2"});
    CHECK(s.run(3s).empty());  // reported once
    CHECK(s.liveness.lost("n2"));
    CHECK_FALSE(s.liveness.lost("n1"));
}

TEST_CASE("a node with one rank still beating is not lost") {
    Scenario s(3, 2);
    s.run(1s);
    for (int i = 0; i < 30; ++i) {
        s.now += 100ms;
        s.liveness.heard(Scenario::role(0, 0), s.now);  // n0's second rank is silent, its first is not
        s.liveness.heard(Scenario::role(1, 0), s.now);
        s.liveness.heard(Scenario::role(2, 1), s.now);
        CHECK(s.liveness.check(s.now).empty());
    }
}

TEST_CASE("a loaded machine, every heartbeat late: no node is lost however long the gaps") {
    Scenario s(4, 1);
    s.run(1s);
    // Every rank beats every 1.5 s instead of every 100 ms: each node is silent for longer than the
    // node timeout between two of its beats, but so is every other node: no evidence piles up.
    CHECK(s.run(60s, 1500ms).empty());
    // The nodes beat in turn, one every 400 ms (each node every 1.6 s): still nothing.
    for (int i = 0; i < 100; ++i) {
        s.now += 400ms;
        s.liveness.heard(Scenario::role(i % 4, 0), s.now);
        CHECK(s.liveness.check(s.now).empty());
    }
}

TEST_CASE("a node whose ranks are slowed 5x while the others run is lost only once the others beat enough") {
    Scenario s(3, 1);
    s.run(1s);
    // n2 beats every 1.2 s; the others every 100 ms: n2 is silent past the timeout with the
    // others' evidence there, which is what a frozen node looks like too.
    Nodes lost;
    for (int i = 0; i < 30 && lost.empty(); ++i) {
        s.now += 100ms;
        s.liveness.heard(Scenario::role(0, 0), s.now);
        s.liveness.heard(Scenario::role(1, 0), s.now);
        if (i % 12 == 11) s.liveness.heard(Scenario::role(2, 0), s.now);
        lost = s.liveness.check(s.now);
    }
    CHECK(lost == Nodes{"n2"});
}

TEST_CASE("the launcher itself paused: heartbeats queued meanwhile are read before anyone is judged") {
    Scenario s(3, 1);
    s.run(1s);
    s.now += 3s;  // this process did not run for 3 s
    // It reads n0's and n1's queued heartbeats, checks, and only then reaches n2's.
    s.liveness.heard(Scenario::role(0, 0), s.now);
    s.liveness.heard(Scenario::role(1, 0), s.now);
    CHECK(s.liveness.check(s.now).empty());
    s.now += 10ms;
    s.liveness.heard(Scenario::role(2, 0), s.now);
    CHECK(s.run(3s).empty());
}

TEST_CASE("two nodes frozen at once are both lost; a node alone is never judged") {
    Scenario s(5, 1);
    s.run(1s);
    s.silent[1] = s.silent[3] = true;
    const auto lost = s.run(1500ms);
    CHECK(lost == Nodes{"n1", "n3"});

    Scenario alone(1, 2);
    alone.run(1s);
    alone.silent[0] = true;
    CHECK(alone.run(10s).empty());
}

TEST_CASE("ranks that left do not make their node silent; a lost node heard again is a zombie") {
    Scenario s(3, 1);
    s.run(1s);
    s.liveness.forget(Scenario::role(2, 0));  // n2's only rank finished
    s.silent[2] = true;
    CHECK(s.run(3s).empty());

    Scenario z(3, 1);
    z.run(1s);
    z.silent[1] = true;
    CHECK(z.run(1200ms) == Nodes{"n1"});
    // Thawed: its rank beats again. It stays lost, and the caller is told to end it.
    CHECK(z.liveness.heard(Scenario::role(1, 0), z.now) == fl::NodeLiveness::Heard::from_lost_node);
    CHECK(z.liveness.lost("n1"));
    CHECK(z.liveness.heard("nobody", z.now) == fl::NodeLiveness::Heard::unknown_rank);
}

TEST_CASE("each node's longest silence is the longest time between its ranks' heartbeats") {
    Scenario s(3, 2);
    s.run(1s);  // every 100 ms
    CHECK(s.liveness.silences().at("n0").longest == 100ms);
    CHECK(s.liveness.silences().at("n0").heartbeats == 20);  // 2 ranks x 10 rounds
    s.silent[1] = true;
    s.run(700ms);  // below the node timeout: not lost, and not yet a silence anyone heard end
    s.silent[1] = false;
    CHECK(s.run(100ms).empty());
    CHECK_FALSE(s.liveness.lost("n1"));
    // The first heartbeat after the gap ends an 800 ms silence; the node's other rank beating at
    // the same instant ends none (the node was just heard).
    CHECK(s.liveness.silences().at("n1").longest == 800ms);
    CHECK(s.liveness.silences().at("n0").longest == 100ms);
    // A node that is never heard after its registration has no figure.
    fl::NodeLiveness quiet(1000ms, 100ms);
    quiet.watch("r", "n", Clock::time_point{} + 1h);
    CHECK(quiet.silences().empty());
}
