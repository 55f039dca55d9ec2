// The spare pool's policy (spares/): who takes dead roles, what a spawned replacement runs, and
// which ranks stay parked.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "flashrec/spares/spares.hpp"

using namespace flashrec::spares;

TEST_CASE("hot spares first, spawned processes for the rest, when spawning is on") {
    CHECK(replacements_for(0, 1, true).kind == "none");  // an abandoned step: nobody died
    CHECK(replacements_for(0, 1, true).to_spawn == 0);
    CHECK(replacements_for(1, 1, true).kind == "hot");
    CHECK(replacements_for(1, 1, true).to_spawn == 0);
    CHECK(replacements_for(2, 1, true).kind == "hot+spawned");
    CHECK(replacements_for(2, 1, true).to_spawn == 1);
    CHECK(replacements_for(2, 0, true).kind == "spawned");
    CHECK(replacements_for(2, 0, true).to_spawn == 2);
    // Spawning off: the missing roles are the plan's missing_spares, nothing is spawned.
    CHECK(replacements_for(2, 1, false).to_spawn == 0);
    CHECK(replacements_for(2, 1, false).kind == "hot");
}

TEST_CASE("a spawned replacement runs this executable with the job's arguments, on the spare node") {
    const std::vector<std::string> args{"./trainer", "--config", "train.yaml"};
    const SpawnCommand here = spawn_command(args, "/opt/trainer", nullptr, false, 2, "vm");
    CHECK(here.argv == std::vector<std::string>{"/opt/trainer", "--config", "train.yaml", "--flashrec-node", "vm"});
    CHECK(here.host.empty());
    // Virtual nodes on one machine: the node after the job's last.
    CHECK(spawn_command(args, "/opt/trainer", nullptr, true, 2, "node0").argv.back() == "node2");
    // FLASHREC_SPARE_HOST names both the host and the node.
    const SpawnCommand there = spawn_command(args, "/opt/trainer", "n5", true, 2, "node0");
    CHECK(there.argv.back() == "n5");
    CHECK(there.host == "n5");
}

TEST_CASE("the pool holds the ranks the plan gave no role") {
    Pool pool;
    pool.assign_range(4, 6);
    CHECK(pool.ranks() == std::vector<int>{4, 5});
    pool.assign({0, 2, -1, 1, -1});
    CHECK(pool.ranks() == std::vector<int>{2, 4});
}
