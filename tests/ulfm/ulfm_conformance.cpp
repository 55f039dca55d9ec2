// One case of flashrec's ULFM conformance set (tests/ulfm/conformance.py runs them all):
//   ulfm_conformance <kind> <op>
// The last rank dies (<kind>) 200 ms after a barrier while the others are in <op>; they revoke,
// shrink, and prove the shrunk communicator works (an allreduce of the right sum). Kinds:
//   kill segv abort        signals (SIGKILL, SIGSEGV, SIGABRT)
//   exit3 _exit3           exit(3) / _exit(3): a non-zero exit, the death trap 1 is about (exit(3)
//                          ends by SIGKILL unless --keep-exit-codes: trap 14)
//   exit0                  exit(0) without MPI_Finalize
//   end76 end77            flashrec's own refusals as the runtime ends them (end_job:
//                          ft::leave_process with kExitStateLost / kExitNoSpare, its progress
//                          ticker still running)
//   none                   nobody dies: rank r computes 1 + 1.5 r detector timeouts (1 s at
//                          least; 1 s with the detector off) without an MPI call, then a barrier must succeed everywhere:
//                          the ranks that reach the barrier first watch peers still computing,
//                          and the in-band detector must not declare those failed (trap 11)
// Ops: allreduce, allreduce4m (4 MiB of floats: over shm Open MPI's segmented ring, by
// tools/coll-rules-shm.conf), recv (from the victim), anysource (rank 0: MPI_ANY_SOURCE), agree,
// spawn (MPI_Comm_spawn of one child over MPI_COMM_WORLD, then a barrier).
// --no-ticker: without the progress ticker (the control experiment for kind `none`).
// --no-exit-notices: without ft::ExitNotices (the control experiment for exits over sm: trap 1).
// --keep-exit-codes: exit(n) ends with its code (the control experiment for trap 14); by default
// it ends by SIGKILL, as in a flashrec rank's step loop (ft::nonzero_exits_by_signal).
// --no-pmix-keeper: under direct launch, without ft::keep_pmix_connection (the control experiment
// for trap 17: Slurm cancels the step when a dead task shared its node).
// --live-on-ms N: after the repair the survivors go on for N ms (a barrier on the shrunk
// communicator every 10 ms), as a job's training does, before they report: an MPI job that ends
// under its survivors after a repair (PRRTE's count of its ended processes, docs/ulfm-traps.md
// trap 14) then shows as a survivor that never reported.
// Under a controller (FLASHREC_CONTROL set: conformance.py --control-plane) each process keeps a
// control-plane connection as a flashrec rank does, and hands the losses the controller passes on
// (PEER_LOST) to ULFM through ft::ExitNotices, as the runtime does.
// Each process prints one typed line, `conformance: {json}`, which the driver reads:
//   victim:    {"role":"victim","kind":..,"death_unix_us":..}  just before it dies
//   survivor:  {"role":"survivor","rank":..,"error":"PROC_FAILED|REVOKED|SUCCESS|OTHER(<n>)",
//               "error_unix_us":..,"shrink":"SUCCESS|..","shrunk_size":..,"sum_ok":..,
//               "live_on_ms":..,"live_on":"SUCCESS|<the first failed barrier's error>"}
//   computing: {"role":"computer","rank":..,"barrier":"SUCCESS|..."}
// and "finalized rank <r>" after MPI_Finalize returns. The runtime's own progress ticker
// (ft/progress_ticker.hpp) and its way of ending (ft/leaving.hpp: by SIGKILL) run exactly as in a
// flashrec job: on when the in-band detector is on.
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/control_plane.hpp"
#include "flashrec/ft/exit_notices.hpp"
#include "flashrec/ft/leaving.hpp"
#include "flashrec/ft/pmix_connection_keeper.hpp"
#include "flashrec/ft/pmix_failure_events.hpp"
#include "flashrec/ft/progress_ticker.hpp"

namespace {

long long unix_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string error_name(int rc) {
    if (rc == MPI_SUCCESS) return "SUCCESS";
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (cls == MPIX_ERR_PROC_FAILED) return "PROC_FAILED";
    if (cls == MPIX_ERR_PROC_FAILED_PENDING) return "PROC_FAILED_PENDING";
    if (cls == MPIX_ERR_REVOKED) return "REVOKED";
    return "OTHER(" + std::to_string(cls) + ")";
}

[[noreturn]] void die(const std::string& kind) {
    std::printf("conformance: {\"role\":\"victim\",\"kind\":\"%s\",\"death_unix_us\":%lld}\n", kind.c_str(),
                unix_us());
    std::fflush(stdout);
    if (kind == "kill") raise(SIGKILL);
    if (kind == "segv") raise(SIGSEGV);
    if (kind == "abort") std::abort();
    if (kind == "exit3") std::exit(3);
    if (kind == "_exit3") _exit(3);
    if (kind == "exit0") std::exit(0);  // without MPI_Finalize: PRRTE's "terminated without sync"
    if (kind == "end76") flashrec::ft::leave_process(flashrec::ft::kExitStateLost);
    if (kind == "end77") flashrec::ft::leave_process(flashrec::ft::kExitNoSpare);
    std::printf("FAIL unknown kind '%s'\n", kind.c_str());
    std::fflush(stdout);
    _exit(2);
}

char* self_path = nullptr;  // argv[0]: what the spawn op starts

int run_op(const std::string& op, int rank, int victim) {
    int x = 1, y = 0;
    if (op == "allreduce") return MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (op == "allreduce4m") {
        static std::vector<float> in(1 << 20, 1.0f), out(1 << 20);
        return MPI_Allreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    if (op == "recv") return MPI_Recv(&y, 1, MPI_INT, victim, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (op == "anysource")
        return MPI_Recv(&y, 1, MPI_INT, rank == 0 ? MPI_ANY_SOURCE : victim, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (op == "agree") {
        int flag = 1;
        return MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
    }
    if (op == "spawn") {
        // The survivors spawn one child while the victim (which never joins) dies. A spawn
        // that completed before the death was noticed is fine; the barrier after it must then
        // report the death.
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_set(info, "map_by", "slot:OVERSUBSCRIBE");
        char child_flag[] = "--child";
        char* args[] = {child_flag, nullptr};
        MPI_Comm inter = MPI_COMM_NULL;
        int errcode = 0;
        const int rc = MPI_Comm_spawn(self_path, args, 1, info, 0, MPI_COMM_WORLD, &inter, &errcode);
        MPI_Info_free(&info);
        if (rc != MPI_SUCCESS) return rc;
        MPI_Comm_free(&inter);  // both sides free it (docs/ulfm-traps.md trap 5)
        return MPI_Barrier(MPI_COMM_WORLD);
    }
    std::printf("FAIL unknown op '%s'\n", op.c_str());
    std::fflush(stdout);
    _exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    self_path = argv[0];
    if (argc == 2 && std::strcmp(argv[1], "--child") == 0) {  // spawned by the spawn op
        MPI_Init(&argc, &argv);
        MPI_Comm parent = MPI_COMM_NULL;
        MPI_Comm_get_parent(&parent);
        if (parent != MPI_COMM_NULL) MPI_Comm_free(&parent);
        std::printf("conformance: {\"role\":\"child\"}\n");
        std::fflush(stdout);
        MPI_Finalize();
        return 0;
    }
    bool no_ticker = false, no_exit_notices = false, keep_exit_codes = false, no_pmix_keeper = false;  // the control experiments
    long long live_on_ms = 0;
    for (int i = 3; i < argc; ++i) {
        if (std::strcmp(argv[i], "--no-ticker") == 0) no_ticker = true;
        else if (std::strcmp(argv[i], "--no-exit-notices") == 0) no_exit_notices = true;
        else if (std::strcmp(argv[i], "--keep-exit-codes") == 0) keep_exit_codes = true;
        else if (std::strcmp(argv[i], "--no-pmix-keeper") == 0) no_pmix_keeper = true;
        else if (std::strcmp(argv[i], "--live-on-ms") == 0 && i + 1 < argc) live_on_ms = std::atoll(argv[++i]);
        else argc = 0;
    }
    if (argc < 3 || live_on_ms < 0) {
        std::fprintf(stderr, "usage: ulfm_conformance <kind> <op> [--no-ticker] [--no-exit-notices] [--keep-exit-codes] [--no-pmix-keeper] "
                             "[--live-on-ms N]\n");
        return 2;
    }
    const std::string kind = argv[1], op = argv[2];
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    // Under direct launch, as the runtime does: a death must not reach Slurm's PMIx server.
    if (flashrec::ft::failure_events_kept_local() && !no_pmix_keeper) (void)flashrec::ft::keep_pmix_connection();
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const auto detector = flashrec::ft::read_in_band_detector();
    std::optional<flashrec::ft::ProgressTicker> ticker;
    if (const auto interval = flashrec::ft::ticker_interval(detector); interval && !no_ticker)
        ticker.emplace(*interval);
    flashrec::ft::leave_by_signal(detector.on);
    flashrec::ft::nonzero_exits_by_signal(!keep_exit_codes);
    std::optional<flashrec::ft::ExitNotices> exit_notices;
    if (!no_exit_notices) exit_notices.emplace(rank == 0);
    flashrec::ft::StepProgress progress;
    std::unique_ptr<flashrec::ft::HeartbeatClient> control;
    if (auto options = flashrec::ft::HeartbeatClientOptions::from_environment("rank:" + std::to_string(rank), rank)) {
        if (exit_notices)
            options->on_peer_lost = [sink = exit_notices->loss_sink()](const flashrec::ft::wire::MpiProcess& lost) {
                sink(lost.nspace, lost.rank);
            };
        control = std::make_unique<flashrec::ft::HeartbeatClient>(std::move(*options), progress);
    }
    if (rank == 0)
        std::printf("conformance: {\"role\":\"setup\",\"detector\":%s,\"detector_thread\":%s,\"period_s\":%g,"
                    "\"timeout_s\":%g,\"ticker_ms\":%lld,\"exit_notices\":%s,\"control_plane\":%s}\n",
                    detector.on ? "true" : "false", detector.own_thread ? "true" : "false", detector.period_s,
                    detector.timeout_s, ticker ? static_cast<long long>(ticker->interval().count()) : 0LL,
                    exit_notices && exit_notices->active() ? "true" : "false", control ? "true" : "false");
    std::fflush(stdout);
    const int victim = size - 1;
    MPI_Barrier(MPI_COMM_WORLD);

    if (kind == "none") {
        // Open MPI reports its default timeout (10 s) with the detector off: nothing to outlast then.
        const double timeout = detector.on ? std::max(1.0, detector.timeout_s) : 1.0;
        const double seconds = timeout * (1 + 1.5 * rank);
        const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
        volatile double sink = 0;
        while (std::chrono::steady_clock::now() < end) sink = sink + 1;  // no MPI call meanwhile
        const int rc = MPI_Barrier(MPI_COMM_WORLD);
        std::printf("conformance: {\"role\":\"computer\",\"rank\":%d,\"seconds\":%g,\"barrier\":\"%s\"}\n", rank,
                    seconds, error_name(rc).c_str());
    } else {
        if (rank == victim) {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            die(kind);  // with the ticker still running, as in a flashrec process
        }
        const int rc = run_op(op, rank, victim);
        const long long error_at = unix_us();
        if (rc != MPI_SUCCESS) MPIX_Comm_revoke(MPI_COMM_WORLD);
        MPI_Comm shrunk = MPI_COMM_NULL;
        int shrunk_size = -1, sum_ok = 0, live_on_rc = MPI_SUCCESS;
        const int shrink_rc = MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk);
        if (shrink_rc == MPI_SUCCESS) {
            MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
            MPI_Comm_size(shrunk, &shrunk_size);
            int one = 1, sum = 0;
            sum_ok = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, shrunk) == MPI_SUCCESS && sum == shrunk_size;
            // A count, not a deadline: every survivor must enter the same number of barriers. An
            // error may reach one survivor only, so they agree before each barrier whether all go
            // on: one leaving alone would leave the others waiting in a barrier until the timeout.
            int all_go_on = sum_ok;
            MPIX_Comm_agree(shrunk, &all_go_on);  // the flag is uniform even when it reports a failure
            for (long long i = 0; all_go_on && i < live_on_ms / 10; ++i) {
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
                live_on_rc = MPI_Barrier(shrunk);
                all_go_on = live_on_rc == MPI_SUCCESS;
                MPIX_Comm_agree(shrunk, &all_go_on);
            }
            MPI_Comm_free(&shrunk);
        }
        std::printf("conformance: {\"role\":\"survivor\",\"rank\":%d,\"error\":\"%s\",\"error_unix_us\":%lld,"
                    "\"shrink\":\"%s\",\"shrunk_size\":%d,\"sum_ok\":%s,\"live_on_ms\":%lld,\"live_on\":\"%s\"}\n",
                    rank, error_name(rc).c_str(), error_at, error_name(shrink_rc).c_str(), shrunk_size,
                    sum_ok ? "true" : "false", live_on_ms, error_name(live_on_rc).c_str());
    }
    std::fflush(stdout);
    ticker.reset();  // before MPI_Finalize
    control.reset();  // BYE: this process leaves on purpose
    exit_notices.reset();
    MPI_Finalize();
    std::printf("finalized rank %d\n", rank);
    std::fflush(stdout);
    return 0;
}
