// The ranks' output as the launcher reads it (rank_output.hpp): lines cut from arbitrary chunks,
// and PRRTE's lost-daemon report, the only foreign text it parses.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "rank_output.hpp"

using namespace flashrec::launcher;

TEST_CASE("lines survive any chunking; the rest is passed on at the end") {
    const std::string text = "step 0 loss 1.0\nflashrec[dp0.tp0.pp0 pid 5]: hello\n\nno newline";
    for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{7}, text.size()}) {
        LineSplitter splitter;
        std::vector<std::string> lines;
        const auto sink = [&](const std::string& l) { lines.push_back(l); };
        for (std::size_t at = 0; at < text.size(); at += chunk)
            splitter.feed(std::string_view(text).substr(at, chunk), sink);
        CHECK(lines.size() == 3);
        splitter.finish(sink);
        REQUIRE(lines.size() == 4);
        CHECK(lines[0] == "step 0 loss 1.0\n");
        CHECK(lines[2] == "\n");
        CHECK(lines[3] == "no newline\n");
        splitter.finish(sink);  // nothing left twice
        CHECK(lines.size() == 4);
    }
}

TEST_CASE("a runaway line without newline is passed on once it is too long") {
    LineSplitter splitter(8);
    std::vector<std::string> lines;
    splitter.feed("0123456789", [&](const std::string& l) { lines.push_back(l); });
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] == "0123456789");
}

TEST_CASE("PRRTE's lost daemon names its node; nothing else does") {
    CHECK(prrte_lost_daemon_node("  Remote daemon: [prterun-fn1-123@1,2] on node fn3\n") == "fn3");
    CHECK(prrte_lost_daemon_node("Remote daemon:    [x] on node fn5.cluster") == "fn5.cluster");
    CHECK_FALSE(prrte_lost_daemon_node("flashrec: fault injected: role=1:step=3 (pid 1, unix_us 2)\n"));
    CHECK_FALSE(prrte_lost_daemon_node("Remote daemon: gone\n"));
}
