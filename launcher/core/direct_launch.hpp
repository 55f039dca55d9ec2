// Direct launch (slurm.launch: srun): every active rank and hot spare is a task of one
// `srun --mpi=pmix` step, with no mpirun and no PRRTE (docs/slurm.md, "Direct launch").
//
// What mpirun got as flags from tools/fr-mpirun (ULFM, pml, BTLs of mpi.transport, the
// interface, ...) the tasks get as OMPI_MCA_* variables: the flags are read from the wrapper as
// for the mpirun mode (wrapper_flags), never copied, and turned into the environment here.
// Placement is the mpirun mode's hostfile: srun's arbitrary distribution takes its first
// process-count lines, rank i on line i's node (the reserve nodes after them stay empty).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace flashrec::launcher {

class DirectLaunch {
public:
    using Variables = std::vector<std::pair<std::string, std::string>>;

    // `mpirun_flags`: the wrapper's flags (wrapper_flags); `mpi_prefix`: where Open MPI lives
    // (OPAL_PREFIX for the tasks; "" when unknown). Throws flashrec::Error naming a flag that has
    // no environment form (such a wrapper cannot be used for a direct launch).
    DirectLaunch(const std::vector<std::string>& mpirun_flags, std::string hostfile, const std::string& mpi_prefix);

    // The step's options that keep it alive through the loss of a task or a node.
    static const std::vector<std::string>& step_options();

    // argv: srun <step options> --ntasks N --distribution arbitrary <program_and_args...>
    std::vector<std::string> command(int processes, const std::vector<std::string>& program_and_args) const;
    // What every task gets besides the launch's own variables: the MPI settings, OPAL_PREFIX,
    // the hostfile (SLURM_HOSTFILE) and FLASHREC_DIRECT_LAUNCH=1 (ft/pmix_failure_events.hpp).
    const Variables& variables() const { return variables_; }

private:
    Variables variables_;
};

// The wrapper's mpirun flags as OMPI_MCA_* variables: `--mca k v` is OMPI_MCA_k=v, `--with-ft
// ulfm` is OMPI_MCA_mpi_ft_enable=1, `-x K=V` is K=V; `--oversubscribe` has no meaning for srun.
// Throws flashrec::Error on anything else.
DirectLaunch::Variables mca_environment(const std::vector<std::string>& mpirun_flags);

}  // namespace flashrec::launcher
