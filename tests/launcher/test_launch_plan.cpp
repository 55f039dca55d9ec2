// The launcher's layout logic without MPI or Slurm: where ranks go inside an allocation, what a
// relaunch does with lost nodes (spare node, or doubling up), and what mpirun is given.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "flashrec/errors.hpp"
#include "launch_plan.hpp"

namespace fl = flashrec::launcher;

namespace {

flashrec::config::Config job(int nodes, int ranks_per_node, int hot_spares = 0) {
    flashrec::config::Config cfg;
    cfg.job.nodes = nodes;
    cfg.job.ranks_per_node = ranks_per_node;
    cfg.job.dp = nodes * ranks_per_node;
    cfg.job.hot_spares = hot_spares;
    return cfg;
}

flashrec::slurm::Allocation allocation(std::vector<std::string> nodes, int active, int spare) {
    return flashrec::slurm::split_nodes(std::move(nodes), active, spare);
}

std::vector<std::string> nodes_of(const fl::Layout& layout) {
    std::vector<std::string> out;
    for (const auto& p : layout.processes) out.push_back(p.node);
    return out;
}

}  // namespace

TEST_CASE("inside an allocation the active nodes carry the ranks, the rest is in reserve") {
    const auto alloc = allocation({"n1", "n2", "n3", "n4", "n5"}, 4, 1);
    const auto layout = fl::make_layout(job(4, 2), "n1", &alloc);
    CHECK(layout.slurm);
    CHECK_FALSE(layout.virtual_nodes);
    CHECK(layout.nodes == std::vector<std::string>{"n1", "n2", "n3", "n4"});
    CHECK(nodes_of(layout) == std::vector<std::string>{"n1", "n1", "n2", "n2", "n3", "n3", "n4", "n4"});
    CHECK(layout.reserve_nodes == std::vector<std::string>{"n5"});
    CHECK(layout.spawn_host() == "n5");
    CHECK(layout.role_of_rank() == "0,1,2,3,4,5,6,7");
    // One line per rank (--map-by seq), then the empty spare node so PRRTE has a daemon there.
    CHECK(layout.hostfile() == "n1\nn1\nn2\nn2\nn3\nn3\nn4\nn4\nn5\n");
}

TEST_CASE("hot spares wait on the spare node, which is then listed once") {
    const auto alloc = allocation({"n1", "n2", "n3"}, 2, 1);
    const auto layout = fl::make_layout(job(2, 1, 2), "n1", &alloc);
    CHECK(nodes_of(layout) == std::vector<std::string>{"n1", "n2", "n3", "n3"});
    CHECK(layout.hostfile() == "n1\nn2\nn3\nn3\n");
}

TEST_CASE("a lost node's ranks move together to a spare node; the other roles stay put") {
    const auto alloc = allocation({"n1", "n2", "n3", "n4", "n5", "n6"}, 4, 2);
    const auto layout = fl::make_layout(job(4, 2), "n1", &alloc);
    const auto r = fl::replace_nodes(layout, {"n3"});
    CHECK(r.replaced == std::vector<std::pair<std::string, std::string>>{{"n3", "n5"}});
    CHECK(r.doubled_up.empty());
    CHECK(nodes_of(r.layout) == std::vector<std::string>{"n1", "n1", "n2", "n2", "n5", "n5", "n4", "n4"});
    CHECK(r.layout.nodes == std::vector<std::string>{"n1", "n2", "n5", "n4"});
    CHECK(r.layout.reserve_nodes == std::vector<std::string>{"n6"});
    CHECK(r.layout.role_of_rank() == layout.role_of_rank());
    // A second loss takes the next spare.
    const auto again = fl::replace_nodes(r.layout, {"n1"});
    CHECK(again.replaced == std::vector<std::pair<std::string, std::string>>{{"n1", "n6"}});
    CHECK(again.layout.reserve_nodes.empty());
    CHECK(again.layout.spawn_host().empty());
}

TEST_CASE("with no spare node left the lost node's ranks double up on the others, fewest first") {
    const auto alloc = allocation({"n1", "n2", "n3", "n4"}, 4, 0);
    const auto layout = fl::make_layout(job(4, 2), "n1", &alloc);
    const auto r = fl::replace_nodes(layout, {"n2"});
    CHECK(r.replaced.empty());
    CHECK(r.doubled_up == std::vector<std::string>{"n2"});
    CHECK(r.layout.nodes == std::vector<std::string>{"n1", "n3", "n4"});
    CHECK(nodes_of(r.layout) == std::vector<std::string>{"n1", "n1", "n4", "n3", "n3", "n3", "n4", "n4"});
    // Every role keeps its index: the runtime gets the same role order.
    CHECK(r.layout.role_of_rank() == layout.role_of_rank());
}

TEST_CASE("a lost spare node leaves the reserve, and hot spares on it move") {
    const auto alloc = allocation({"n1", "n2", "n3", "n4"}, 2, 2);
    const auto layout = fl::make_layout(job(2, 1, 1), "n1", &alloc);
    CHECK(layout.spare_node == "n3");
    const auto r = fl::replace_nodes(layout, {"n3"});
    CHECK(r.replaced.empty());
    CHECK(r.layout.reserve_nodes == std::vector<std::string>{"n4"});
    CHECK(r.layout.spare_node == "n4");
    CHECK(nodes_of(r.layout) == std::vector<std::string>{"n1", "n2", "n4"});
}

TEST_CASE("losing every active node is an error, not an empty job") {
    const auto alloc = allocation({"n1"}, 1, 0);
    const auto layout = fl::make_layout(job(1, 1), "n1", &alloc);
    CHECK_THROWS_WITH_AS(fl::replace_nodes(layout, {"n1"}), doctest::Contains("every active node"), flashrec::Error);
}

TEST_CASE("on one machine: virtual nodes, no hostfile, no spawn host") {
    const auto layout = fl::make_layout(job(2, 2, 1), "host");
    CHECK(layout.virtual_nodes);
    CHECK_FALSE(layout.slurm);
    CHECK(nodes_of(layout) == std::vector<std::string>{"node0", "node0", "node1", "node1", "node2"});
    CHECK(layout.spawn_host().empty());
}

TEST_CASE("dry run: protection.every, the failure cost per k in steps, and the start-up replay probe") {
    flashrec::config::Protection p;
    CHECK(fl::interval_text(p) == "snapshot every step");
    CHECK(fl::failure_cost_estimate(p).find("k = 1: restore + 0.0 steps replayed (0 at worst); protection costs 1 of "
                                            "a snapshot's exposed time per step") != std::string::npos);
    CHECK(fl::replay_check_text(p).empty());  // k = 1 replays no completed step
    p.every = 8;
    CHECK(fl::interval_text(p).find("snapshot every 8 steps") != std::string::npos);
    const std::string eight = fl::failure_cost_estimate(p);
    CHECK(eight.find("k = 8: restore + 3.5 steps replayed (7 at worst); protection costs 0.125 of a snapshot's "
                     "exposed time per step") != std::string::npos);
    CHECK(eight.find("not known before the job runs") != std::string::npos);
    CHECK(fl::replay_check_text(p).find("the first 8 steps run twice") != std::string::npos);
    p.replay_check = "off";
    CHECK(fl::replay_check_text(p).empty());
    p = {};
    p.every = flashrec::config::Protection::kAuto;
    CHECK(fl::interval_text(p).find("k = 1, 2, 4 ... 64 chosen while the job runs") != std::string::npos);
    const std::string automatic = fl::failure_cost_estimate(p);
    CHECK(automatic.find("from k = 1:") != std::string::npos);
    CHECK(automatic.find("to k = 64: restore + 31.5 steps replayed (63 at worst)") != std::string::npos);
    CHECK(fl::replay_check_text(p).find("the first 64 steps run twice") != std::string::npos);
}
