// flashrec-launch: runs a flashrec training job and keeps it alive.
//   flashrec-launch <train.yaml> [--dry-run] [--resume] [--fault SPEC]... [--events FILE]
// docs/launcher.md is the manual; `--help` the short form.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <iostream>
#include <string>
#include <vector>

#include "classification.hpp"
#include "flashrec/errors.hpp"
#include "flashrec/flashrec.hpp"
#include "launch_plan.hpp"
#include "supervisor.hpp"

namespace {

constexpr const char* kFooter = R"(Exit codes: 0 finished; 1 failed; 2 bad usage or train.yaml; 75 the MPI job died and
the warm-relaunch budget is spent; 76 state lost and no HDF5 checkpoint; 77 spares exhausted and
no HDF5 checkpoint; 79 spares exhausted, checkpoint written and the Slurm job requeued; 128+N
stopped by signal N. Manual: docs/launcher.md.)";

}  // namespace

int main(int argc, char** argv) {
    using namespace flashrec::launcher;
    CLI::App app{"flashrec-launch: start a flashrec training job (mpirun with ULFM), watch it through the control\n"
                 "plane, turn hangs into fail-stop failures, relaunch it from node-local snapshots when the MPI\n"
                 "job dies as a whole, and write the job's event log.",
                 "flashrec-launch"};
    app.footer(kFooter);
    app.set_version_flag("--version", std::string("flashrec-launch ") + flashrec::version());
    PlanRequest request;
    bool dry_run = false;
    bool classification = false;
    SupervisorOptions options;
    app.add_option("train.yaml", request.config_path, "The job's configuration (docs/config.md)");
    app.add_flag("--dry-run", dry_run, "Print the layout and the exact mpirun command, start nothing");
    app.add_flag("--resume", options.resume, "Start from the newest complete HDF5 checkpoint in checkpoint.dir");
    bool resume_if_checkpoint = false;
    app.add_flag("--resume-if-checkpoint", resume_if_checkpoint,
                 "--resume when checkpoint.dir holds a complete checkpoint, else start at step 0 (the sbatch "
                 "templates use it, so a requeued job goes on where it stopped)");
    app.add_option("--fault", request.faults,
                   "Inject a fault (repeatable), e.g. role=1:step=10:phase=forward:action=stop; grammar in "
                   "docs/config.md")
        ->type_name("SPEC")
        ->allow_extra_args(false);
    app.add_option("--events", request.events, "Event log (JSON lines); default logging.events or <job.name>.events.jsonl")
        ->type_name("FILE");
    app.add_option("--metrics-bind", options.metrics_bind,
                   "Address of the metrics endpoint when detection.metrics is on (default 127.0.0.1)")
        ->type_name("ADDR");
    app.add_flag("--classification", classification, "Print the error classification table and exit");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "flashrec-launch: error: %s\nusage: flashrec-launch <train.yaml> [--dry-run] [--resume] "
                             "[--fault SPEC]... [--events FILE]   (--help for more)\n",
                     e.what());
        return kExitUsage;
    }
    if (classification) {
        std::fputs(format_table().c_str(), stdout);
        return kExitOk;
    }
    // `srun flashrec-launch train.yaml` runs one copy per task: task 0 is the launcher, the
    // others have nothing to do (mpirun starts the ranks on every node by itself).
    if (const char* task = std::getenv("SLURM_PROCID"); task && std::getenv("SLURM_STEP_ID") && std::string(task) != "0") {
        std::printf("flashrec-launch: task %s of Slurm step %s.%s: the launcher runs in task 0; this task exits\n", task,
                    std::getenv("SLURM_JOB_ID") ? std::getenv("SLURM_JOB_ID") : "?", std::getenv("SLURM_STEP_ID"));
        return kExitOk;
    }
    if (request.config_path.empty()) {
        std::fprintf(stderr, "flashrec-launch: error: a train.yaml is required\nusage: flashrec-launch <train.yaml> "
                             "[--dry-run] [--resume] [--fault SPEC]... [--events FILE]   (--help for more)\n");
        return kExitUsage;
    }
    LaunchPlan plan;
    try {
        plan = make_launch_plan(request);
    } catch (const flashrec::ConfigError& e) {
        std::fprintf(stderr, "flashrec-launch: %s\n", e.what());
        return kExitUsage;
    } catch (const flashrec::Error& e) {
        // SlurmError included: an allocation too small for job.nodes + job.spare_nodes, ...
        std::fprintf(stderr, "flashrec-launch: error: %s\n", e.what());
        return kExitUsage;
    }
    if (resume_if_checkpoint && !options.resume) {
        std::string why;
        const std::optional<std::int64_t> step = newest_checkpoint(plan.cfg, why);
        options.resume = step.has_value();
        std::fprintf(stderr, "flashrec-launch: --resume-if-checkpoint: %s\n",
                     step ? ("resuming from the checkpoint of step " + std::to_string(*step)).c_str()
                          : ("starting at step 0 (" + why + ")").c_str());
    }
    if (dry_run) {
        print_dry_run(plan, options.resume, std::cout);
        return kExitOk;
    }
    try {
        return supervise(plan, options);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "flashrec-launch: error: %s\n", e.what());
        return kExitFailed;
    }
}
