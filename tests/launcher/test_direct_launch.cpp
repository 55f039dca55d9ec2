// Direct launch (slurm.launch: srun) without Slurm: the wrapper's mpirun flags as the tasks'
// environment, and the srun line a plan starts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "direct_launch.hpp"
#include "flashrec/errors.hpp"
#include "launch_plan.hpp"

namespace fl = flashrec::launcher;

namespace {

// What tools/fr-mpirun gives mpirun for mpi.transport: tcp on the test cluster (its shape).
const std::vector<std::string> kTcpFlags = {
    "--with-ft", "ulfm", "--oversubscribe", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
    "--mca", "btl_tcp_if_include", "10.200.0.0/24", "--mca", "mpi_add_procs_cutoff", "16384",
    "--mca", "async_mpi_finalize", "true", "--mca", "coll", "^han"};

std::string value_of(const fl::DirectLaunch::Variables& vars, const std::string& name) {
    const auto it = std::find_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    return it == vars.end() ? "(unset)" : it->second;
}

fl::LaunchPlan direct_plan(int hot_spares) {
    fl::LaunchPlan plan;
    plan.cfg.job.nodes = 2;
    plan.cfg.job.ranks_per_node = 2;
    plan.cfg.job.dp = 4;
    plan.cfg.job.hot_spares = hot_spares;
    plan.cfg.job.spare_nodes = 1;
    plan.cfg.slurm.launch = "srun";
    plan.cfg.recovery.spawn = false;
    plan.cfg.launch.args = {"--steps", "40"};
    plan.cfg.launch.mpirun_args = {"--bind-to", "none"};
    plan.program = "/work/build/mlp_trainer";
    plan.config_path = "/work/train.yaml";
    plan.events_path = "/work/job.events.jsonl";
    plan.wrapper = "/work/tools/fr-mpirun";
    plan.allocation = flashrec::slurm::split_nodes({"n1", "n2", "n3"}, 2, 1);
    plan.layout = fl::make_layout(plan.cfg, "n1", &*plan.allocation);
    plan.direct.emplace(kTcpFlags, plan.hostfile_path().string(), fl::mpi_prefix());
    return plan;
}

}  // namespace

TEST_CASE("the wrapper's flags become OMPI_MCA_* variables; ULFM is switched on by the environment") {
    const auto vars = fl::mca_environment(kTcpFlags);
    CHECK(value_of(vars, "OMPI_MCA_mpi_ft_enable") == "1");
    CHECK(value_of(vars, "OMPI_MCA_pml") == "ob1");
    CHECK(value_of(vars, "OMPI_MCA_btl") == "tcp,self");  // mpi.transport carried over
    CHECK(value_of(vars, "OMPI_MCA_btl_tcp_if_include") == "10.200.0.0/24");
    CHECK(value_of(vars, "OMPI_MCA_coll") == "^han");
    CHECK(vars.size() == 7);  // --oversubscribe has no form, and needs none
    const auto with_x = fl::mca_environment({"-x", "FI_PROVIDER=tcp", "--prtemca", "plm_slurm_args", "--no-kill"});
    CHECK(with_x == fl::DirectLaunch::Variables{{"FI_PROVIDER", "tcp"}});
}

TEST_CASE("a flag with no environment form is refused, by name") {
    CHECK_THROWS_WITH_AS(fl::mca_environment({"--bind-to", "core"}),
                         doctest::Contains("mpirun flag '--bind-to' has no environment form"), flashrec::Error);
    CHECK_THROWS_WITH_AS(fl::mca_environment({"--mca", "btl"}), doctest::Contains("'--mca' lacks its value"),
                         flashrec::Error);
    CHECK_THROWS_WITH_AS(fl::mca_environment({"--with-ft", "none"}), doctest::Contains("is not ULFM"), flashrec::Error);
    CHECK_THROWS_WITH_AS(fl::mca_environment({"-x", "PATH"}), doctest::Contains("names no value"), flashrec::Error);
}

TEST_CASE("a direct plan starts one srun step of every rank and hot spare, with no mpirun") {
    const fl::LaunchPlan plan = direct_plan(2);
    fl::LaunchKind kind;
    kind.faults = {"role=dp1,step=5,kind=kill"};
    const auto argv = plan.command(kind, plan.layout);
    CHECK(argv == std::vector<std::string>{"srun", "--mpi=pmix", "--no-kill", "--kill-on-bad-exit=0", "--overlap",
                                           "--ntasks", "6", "--distribution", "arbitrary", "/work/build/mlp_trainer",
                                           "--steps", "40", "--config", "/work/train.yaml", "--fault",
                                           "role=dp1,step=5,kind=kill"});
    // The hostfile's first 6 lines: rank i on line i's node; the hot spares on the spare node.
    CHECK(plan.layout.hostfile().starts_with("n1\nn1\nn2\nn2\nn3\nn3\n"));
    const auto vars = plan.rank_variables(kind, plan.layout);
    const fl::DirectLaunch::Variables all(vars.begin(), vars.end());
    CHECK(value_of(all, "FLASHREC_DIRECT_LAUNCH") == "1");
    CHECK(value_of(all, "SLURM_HOSTFILE") == "/work/job.events.jsonl.hosts");
    CHECK(value_of(all, "OMPI_MCA_mpi_ft_enable") == "1");
    CHECK(value_of(all, "FLASHREC_ROLE_OF_RANK") == "0,1,2,3");
    // Both of MPI_Init's fences on Slurm's ring (the start-up crash, docs/ulfm-traps.md trap 16).
    CHECK(value_of(all, "SLURM_PMIX_FENCE") == "ring");
    // Where Open MPI lives, as mpirun would have told the ranks: the libmpi this test runs.
    CHECK(std::filesystem::exists(value_of(all, "OPAL_PREFIX") + "/lib"));
}

TEST_CASE("without direct launch the plan runs the wrapper, and the ranks hear nothing of srun") {
    fl::LaunchPlan plan = direct_plan(0);
    plan.direct.reset();
    const auto argv = plan.command({}, plan.layout);
    CHECK(argv.front() == "/work/tools/fr-mpirun");
    CHECK(std::find(argv.begin(), argv.end(), "--bind-to") != argv.end());  // launch.mpirun_args
    const auto vars = plan.rank_variables({}, plan.layout);
    const fl::DirectLaunch::Variables all(vars.begin(), vars.end());
    CHECK(value_of(all, "FLASHREC_DIRECT_LAUNCH") == "(unset)");
}
