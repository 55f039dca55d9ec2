// The launcher's book of nodes (node_book.hpp): host names to the allocation's nodes, where a
// rank ran, lost and given-up nodes, and what a relaunch has to move off.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "job_nodes.hpp"

using namespace flashrec::launcher;

namespace {

Layout two_nodes_and_a_reserve() {
    Layout l;
    l.slurm = true;
    l.nodes = {"fn1", "fn2"};
    l.processes = {{0, "fn1", "dp0.tp0.pp0", false, -1}, {1, "fn2", "dp1.tp0.pp0", false, -1}};
    l.active_roles = {"dp0.tp0.pp0", "dp1.tp0.pp0"};
    l.reserve_nodes = {"fn3"};
    return l;
}

}  // namespace

TEST_CASE("a reported host is the allocation's node of the same short name") {
    const NodeBook book({"fn1.cluster", "fn2.cluster"});
    CHECK(book.node_of_host("fn2") == "fn2.cluster");
    CHECK(book.node_of_host("fn1.other.domain") == "fn1.cluster");
    CHECK(book.node_of_host("elsewhere") == "");
    // Outside an allocation no host is one of the job's nodes.
    CHECK(NodeBook().node_of_host("fn1") == "");
}

TEST_CASE("a rank ran on the host it reported under Slurm, else on its role's layout node") {
    const NodeBook book({"fn1", "fn2", "fn3"});
    Layout l = two_nodes_and_a_reserve();
    // A replacement spawned onto the reserve node reports that host.
    CHECK(book.node_of_rank(l, "fn3", "dp1.tp0.pp0") == "fn3");
    // A host that is none of the job's nodes: the layout's answer.
    CHECK(book.node_of_rank(l, "login", "dp1.tp0.pp0") == "fn2");
    l.slurm = false;  // virtual nodes: the reported host says nothing
    CHECK(book.node_of_rank(l, "fn3", "dp1.tp0.pp0") == "fn2");
}

TEST_CASE("lost nodes are taken once, given-up nodes stay, and a relaunch moves off them") {
    NodeBook book({"fn1", "fn2", "fn3"});
    const Layout l = two_nodes_and_a_reserve();
    CHECK_FALSE(book.any_lost());
    book.mark_lost("fn2");
    book.mark_lost("fn2");
    CHECK(book.is_lost("fn2"));
    CHECK(book.lost() == std::set<std::string>{"fn2"});
    CHECK(book.given_up_in(l).empty());  // lost is not yet given up on
    for (const auto& node : book.take_lost()) CHECK(book.give_up(node));
    CHECK_FALSE(book.any_lost());
    CHECK(book.take_lost().empty());
    CHECK(book.given_up("fn2"));
    CHECK_FALSE(book.give_up("fn2"));  // already given up on
    CHECK(book.given_up_in(l) == std::set<std::string>{"fn2"});
    // A reserve node given up on is in the set too; one outside the layout is not.
    CHECK(book.give_up("fn3"));
    CHECK(book.give_up("fn9"));
    CHECK(book.given_up_in(l) == std::set<std::string>{"fn2", "fn3"});
}
