#include "direct_launch.hpp"

#include "flashrec/errors.hpp"
#include "flashrec/ft/contract.hpp"

namespace flashrec::launcher {

DirectLaunch::Variables mca_environment(const std::vector<std::string>& flags) {
    DirectLaunch::Variables vars;
    const auto value_after = [&](std::size_t i, std::size_t count) {
        if (i + count >= flags.size())
            throw Error("direct launch: the mpirun flag '" + flags[i] + "' lacks its value(s) in the wrapper's flags");
    };
    for (std::size_t i = 0; i < flags.size(); ++i) {
        const std::string& flag = flags[i];
        if (flag == "--mca" || flag == "--prtemca" || flag == "--pmixmca") {
            value_after(i, 2);
            // PRRTE's and PMIx's own settings have no daemon to go to under srun.
            if (flag == "--mca") vars.emplace_back("OMPI_MCA_" + flags[i + 1], flags[i + 2]);
            i += 2;
        } else if (flag == "--with-ft") {
            value_after(i, 1);
            if (flags[i + 1] != "ulfm")
                throw Error("direct launch: '--with-ft " + flags[i + 1] + "' is not ULFM, the only fault tolerance flashrec runs");
            vars.emplace_back("OMPI_MCA_mpi_ft_enable", "1");
            ++i;
        } else if (flag == "-x") {
            value_after(i, 1);
            const std::string& assignment = flags[i + 1];
            const auto eq = assignment.find('=');
            if (eq == std::string::npos || eq == 0)
                throw Error("direct launch: '-x " + assignment + "' names no value; only -x NAME=VALUE has an environment form");
            vars.emplace_back(assignment.substr(0, eq), assignment.substr(eq + 1));
            ++i;
        } else if (flag == "--oversubscribe") {
            // Slots are Slurm's tasks; nothing to say.
        } else {
            throw Error("direct launch: the wrapper's mpirun flag '" + flag +
                        "' has no environment form for srun's tasks (launcher/core/direct_launch.cpp)");
        }
    }
    return vars;
}

DirectLaunch::DirectLaunch(const std::vector<std::string>& mpirun_flags, std::string hostfile,
                           const std::string& mpi_prefix)
    : variables_(mca_environment(mpirun_flags)) {
    // mpirun tells its ranks where Open MPI lives; srun does not (without it a relocated Open MPI
    // looks for its help and parameter files under the prefix it was built for).
    if (!mpi_prefix.empty()) variables_.emplace_back("OPAL_PREFIX", mpi_prefix);
    variables_.emplace_back("SLURM_HOSTFILE", std::move(hostfile));
    variables_.emplace_back(ft::env::kDirectLaunch, "1");
    // Slurm's pmix plugin runs MPI_Init's modex fence (with data) on its ring and the closing
    // barrier (no data) on its tree; with the tree, peers left MPI_Init while the tree's root
    // node's process still waited in the modex, and their first message killed it (SIGSEGV in
    // ob1, 16 of 100 starts); both fences on the ring: 0 of 400 (docs/ulfm-traps.md trap 16).
    variables_.emplace_back("SLURM_PMIX_FENCE", "ring");
}

const std::vector<std::string>& DirectLaunch::step_options() {
    // --mpi=pmix: Slurm's PMIx server stands in for PRRTE's. --no-kill: the step outlives a lost
    // node; --kill-on-bad-exit=0: and a task that ends badly. --overlap: it may share CPUs with a
    // step that runs this launcher (srun flashrec-launch).
    static const std::vector<std::string> options = {"--mpi=pmix", "--no-kill", "--kill-on-bad-exit=0", "--overlap"};
    return options;
}

std::vector<std::string> DirectLaunch::command(int processes, const std::vector<std::string>& program_and_args) const {
    std::vector<std::string> argv{"srun"};
    argv.insert(argv.end(), step_options().begin(), step_options().end());
    argv.insert(argv.end(), {"--ntasks", std::to_string(processes), "--distribution", "arbitrary"});
    argv.insert(argv.end(), program_and_args.begin(), program_and_args.end());
    return argv;
}

}  // namespace flashrec::launcher
