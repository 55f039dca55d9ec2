// The device-free parts of the GPU path's groups (docs/gpu.md, "Device collectives for TP and PP",
// "Repairing NCCL: shrink + grow"): the group layout, which communicator each step collective
// runs over, and the repair plan every member of a group computes for its NCCL communicator.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/group_repair.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/runtime/device_groups.hpp"
#include "flashrec/runtime/device_path.hpp"

using namespace flashrec;
using runtime::Group;
using Action = ft::GroupRepairPlan::Action;

TEST_CASE("group layout: every group is the roles that differ in one coordinate, ordered by it") {
    for (topology::Shape shape : {topology::Shape{2, 2, 2}, topology::Shape{3, 2, 1}, topology::Shape{2, 1, 3},
                                  topology::Shape{1, 4, 2}}) {
        for (Group g : {Group::dp, Group::tp, Group::pp}) {
            // The colors partition the roles into groups of the group's size; keys are 0..size-1.
            std::map<int, std::vector<std::pair<int, int>>> by_color;  // color -> (key, role)
            for (int r = 0; r < shape.size(); ++r) {
                const auto c = topology::coord_of(shape, r);
                const auto split = runtime::group_split(shape, c, g);
                by_color[split.color].emplace_back(split.key, r);
            }
            const int size = g == Group::dp ? shape.dp : g == Group::tp ? shape.tp : shape.pp;
            CHECK(by_color.size() == static_cast<std::size_t>(shape.size() / size));
            for (auto& [color, members] : by_color) {
                std::sort(members.begin(), members.end());
                REQUIRE(members.size() == static_cast<std::size_t>(size));
                std::vector<int> roles;
                for (int k = 0; k < size; ++k) {
                    CHECK(members[static_cast<std::size_t>(k)].first == k);
                    roles.push_back(members[static_cast<std::size_t>(k)].second);
                }
                // group_roles lists the same roles in the same order, from any member.
                for (int role : roles) CHECK(runtime::group_roles(shape, topology::coord_of(shape, role), g) == roles);
            }
        }
    }
    // 2 x 2 x 2: tp fastest, then dp, then pp.
    const topology::Shape s{2, 2, 2};
    CHECK(runtime::group_roles(s, {1, 0, 1}, Group::tp) == std::vector<int>{6, 7});
    CHECK(runtime::group_roles(s, {1, 0, 1}, Group::dp) == std::vector<int>{4, 6});
    CHECK(runtime::group_roles(s, {1, 0, 1}, Group::pp) == std::vector<int>{2, 6});
}

TEST_CASE("each step collective runs over its group's communicator") {
    using C = runtime::StepCollective;
    CHECK(runtime::group_of(C::reduce_scatter) == Group::dp);
    CHECK(runtime::group_of(C::allgather) == Group::dp);
    CHECK(runtime::group_of(C::allreduce) == Group::dp);
    CHECK(runtime::group_of(C::tp_allreduce) == Group::tp);
    CHECK(runtime::group_of(C::tp_allgather) == Group::tp);
    CHECK(runtime::group_of(C::pp_send) == Group::pp);
    CHECK(runtime::group_of(C::pp_recv) == Group::pp);
    CHECK(std::string(runtime::group_name(Group::pp)) == "pp");
}

TEST_CASE("the device path runs each collective over the communicator of its group") {
    // Null communicators (no MPI needed): only their addresses tell them apart.
    const ft::Comm dp, tp, pp;
    runtime::DevicePath::Step step{dp, 0, {}, false, {}, &tp, &pp};
    using C = runtime::StepCollective;
    for (C c : {C::reduce_scatter, C::allgather, C::allreduce}) CHECK(&step.comm_for(c) == &dp);
    for (C c : {C::tp_allreduce, C::tp_allgather}) CHECK(&step.comm_for(c) == &tp);
    for (C c : {C::pp_send, C::pp_recv}) CHECK(&step.comm_for(c) == &pp);
    step.pp = nullptr;  // a step without its PP group refuses a PP collective by name
    CHECK_THROWS_WITH_AS(step.comm_for(C::pp_recv), doctest::Contains("pp communicator"), Error);
}

namespace {
ft::GroupMember survivor(int rank, int size) { return {rank, size, true, true}; }
ft::GroupMember newcomer() { return {-1, 0, false, true}; }
}  // namespace

TEST_CASE("repair plan: the first build creates, identity ranks") {
    const std::vector<ft::GroupMember> members{newcomer(), newcomer(), newcomer()};
    const auto plan = ft::plan_group_repair(members, ft::NcclRepair::automatic);
    CHECK(plan.action == Action::create);
    CHECK(plan.rank_of_position == std::vector<int>{0, 1, 2});
}

TEST_CASE("repair plan: one dead member replaced -> shrink it away, grow the replacement in last") {
    // 4 positions; position 1's process died, a hot spare took position 1.
    const std::vector<ft::GroupMember> members{survivor(0, 4), newcomer(), survivor(2, 4), survivor(3, 4)};
    const auto plan = ft::plan_group_repair(members, ft::NcclRepair::automatic);
    CHECK(plan.action == Action::shrink_grow);
    CHECK(plan.excluded == std::vector<int>{1});
    CHECK(plan.survivors == 3);
    CHECK(plan.newcomers == 1);
    CHECK(plan.rank_of_position == std::vector<int>{0, 3, 1, 2});
    CHECK(plan.grow_root == 0);  // position 0 holds new rank 0 and makes the grow id
}

TEST_CASE("repair plan: NCCL ranks already permuted by an earlier repair stay consistent") {
    // After the repair above, position 2 (NCCL rank 1) dies and is replaced.
    const std::vector<ft::GroupMember> members{survivor(0, 4), survivor(3, 4), newcomer(), survivor(2, 4)};
    const auto plan = ft::plan_group_repair(members, ft::NcclRepair::automatic);
    REQUIRE(plan.action == Action::shrink_grow);
    CHECK(plan.excluded == std::vector<int>{1});
    // survivors' old ranks 0, 2, 3 -> 0, 1, 2 in that order; the newcomer gets 3.
    CHECK(plan.rank_of_position == std::vector<int>{0, 2, 3, 1});
    // Every plan is a permutation of 0..n-1.
    std::vector<int> sorted = plan.rank_of_position;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("repair plan: new rank 0 moves when old rank 0 died; its position makes the grow id") {
    const std::vector<ft::GroupMember> members{newcomer(), survivor(1, 3), survivor(2, 3)};
    const auto plan = ft::plan_group_repair(members, ft::NcclRepair::automatic);
    REQUIRE(plan.action == Action::shrink_grow);
    CHECK(plan.excluded == std::vector<int>{0});
    CHECK(plan.rank_of_position == std::vector<int>{2, 0, 1});
    CHECK(plan.grow_root == 1);
}

TEST_CASE("repair plan: a group that lost nobody only shrinks by none (a fresh communicator, no grow)") {
    const std::vector<ft::GroupMember> members{survivor(0, 2), survivor(1, 2)};
    const auto plan = ft::plan_group_repair(members, ft::NcclRepair::automatic);
    CHECK(plan.action == Action::shrink_grow);
    CHECK(plan.excluded.empty());
    CHECK(plan.newcomers == 0);
    CHECK(plan.grow_root == -1);
    CHECK(plan.rank_of_position == std::vector<int>{0, 1});
}

TEST_CASE("repair plan: the fall-backs to abort + re-init") {
    const std::vector<ft::GroupMember> ok{survivor(0, 3), newcomer(), survivor(2, 3)};
    SUBCASE("forced by recovery.nccl_repair: reinit") {
        const auto plan = ft::plan_group_repair(ok, ft::NcclRepair::reinit);
        CHECK(plan.action == Action::reinit);
        CHECK(plan.why.find("reinit") != std::string::npos);
        CHECK(plan.rank_of_position == std::vector<int>{0, 1, 2});
    }
    SUBCASE("an NCCL without grow (2.28) anywhere, with a newcomer") {
        auto members = ok;
        members[1].can_grow = false;
        const auto plan = ft::plan_group_repair(members, ft::NcclRepair::shrink_grow);
        CHECK(plan.action == Action::reinit);
        CHECK(plan.why.find("ncclCommGrow") != std::string::npos);
    }
    SUBCASE("without grow, nobody joining: auto re-initialises, shrink_grow shrinks alone") {
        std::vector<ft::GroupMember> members{survivor(0, 3), survivor(2, 3)};
        for (auto& m : members) m.can_grow = false;
        CHECK(ft::plan_group_repair(members, ft::NcclRepair::automatic).action == Action::reinit);
        const auto plan = ft::plan_group_repair(members, ft::NcclRepair::shrink_grow);
        CHECK(plan.action == Action::shrink_grow);
        CHECK(plan.excluded == std::vector<int>{1});
        CHECK(plan.newcomers == 0);
    }
    SUBCASE("a communicator NCCL failed itself cannot be shrunk") {
        auto members = ok;
        members[2].can_shrink = false;
        const auto plan = ft::plan_group_repair(members, ft::NcclRepair::automatic);
        CHECK(plan.action == Action::reinit);
        CHECK(plan.why.find("position 2") != std::string::npos);
    }
    SUBCASE("members that disagree on the held communicator") {
        auto members = ok;
        members[2].held_size = 4;
        CHECK(ft::plan_group_repair(members, ft::NcclRepair::automatic).action == Action::reinit);
        members[2] = survivor(0, 3);  // two members claim rank 0
        CHECK(ft::plan_group_repair(members, ft::NcclRepair::automatic).action == Action::reinit);
    }
}

TEST_CASE("recovery.nccl_repair names, versions") {
    CHECK(ft::parse_nccl_repair("auto") == ft::NcclRepair::automatic);
    CHECK(ft::parse_nccl_repair("shrink_grow") == ft::NcclRepair::shrink_grow);
    CHECK(ft::parse_nccl_repair("reinit") == ft::NcclRepair::reinit);
    CHECK_THROWS_AS(ft::parse_nccl_repair("grow"), Error);
    CHECK(ft::nccl_repair_name(ft::NcclRepair::reinit) == "reinit");
    CHECK(ft::kNcclGrowSince == 22902);
    CHECK(ft::nccl_version_code(2, 32, 3) > ft::kNcclAbortParentSince);
}
