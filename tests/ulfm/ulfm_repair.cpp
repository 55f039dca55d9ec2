// Proves Open MPI's ULFM works here, with flashrec's own Comm layer:
//   --mode shrink : 4 ranks, one SIGKILLed while the rest are inside MPI_Allreduce; survivors
//                   revoke, shrink to 3, agree, and finish an allreduce with the right sum.
//   --mode spawn  : the same, then MPI_Comm_spawn one replacement and merge back to 4 ranks;
//                   the replacement takes the dead rank's place in a communicator ordered by
//                   the original rank.
//   --mode twice  : spawn-repair, then a second failure (another rank) and a second repair.
// Every live process prints one "OK ..." line; the test checks those lines, not mpirun's exit code.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/comm.hpp"

using flashrec::ft::Comm;
using Clock = std::chrono::steady_clock;

namespace {

Clock::time_point in_seconds(int s) { return Clock::now() + std::chrono::seconds(s); }

long sum_over(const Comm& comm, long value) {
    long total = 0;
    flashrec::ft::check(MPI_Allreduce(&value, &total, 1, MPI_LONG, MPI_SUM, comm.get()),
                        "MPI_Allreduce", comm);
    return total;
}

// `victim` kills itself shortly after everyone entered the allreduce; the others must see
// the failure (as ProcessFailure or CommRevoked) and revoke so nobody stays blocked.
void allreduce_with_failure(Comm& comm, int my_id, int victim) {
    flashrec::ft::check(MPI_Barrier(comm.get()), "MPI_Barrier", comm);
    if (my_id == victim) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        raise(SIGKILL);
    }
    try {
        for (int i = 0; i < 1000; ++i) sum_over(comm, 1);
        std::printf("FAIL id %d: no failure was reported\n", my_id);
    } catch (const flashrec::ProcessFailure&) {
        comm.revoke();
    } catch (const flashrec::CommRevoked&) {
    }
}

// Survivors shrink; optionally spawn one replacement for `dead_id` and merge it in; returns a
// communicator ordered by the original ids, so the replacement sits where the dead rank was.
Comm repair(const Comm& broken, int my_id, int dead_id, bool spawn, const char* self_path,
            const std::string& mode, int stage) {
    Comm shrunk = broken.shrink("shrunk");
    int ok = shrunk.agree(1, in_seconds(10));
    if (!ok) throw flashrec::Error("agree on shrunk communicator returned 0");
    if (!spawn) return shrunk;

    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "map_by", "slot:OVERSUBSCRIBE");
    std::string mode_flag = "--mode", mode_arg = mode, child_flag = "--child",
                stage_arg = std::to_string(stage);
    char* args[] = {mode_flag.data(), mode_arg.data(), child_flag.data(), stage_arg.data(), nullptr};
    MPI_Comm inter = MPI_COMM_NULL;
    int errcode = 0;
    flashrec::ft::check(MPI_Comm_spawn(self_path, args, 1, info, 0, shrunk.get(), &inter, &errcode),
                        "MPI_Comm_spawn", shrunk);
    MPI_Info_free(&info);
    MPI_Comm merged_raw = MPI_COMM_NULL;
    flashrec::ft::check(MPI_Intercomm_merge(inter, 0, &merged_raw), "MPI_Intercomm_merge", inter,
                        "spawn-inter");
    MPI_Comm_free(&inter);  // both sides free the intercommunicator (docs/ulfm-traps.md trap 5)
    Comm merged = Comm::adopt(merged_raw, "merged");
    if (merged.rank() == 0) {
        flashrec::ft::check(MPI_Send(&dead_id, 1, MPI_INT, merged.size() - 1, 7, merged.get()),
                            "MPI_Send", merged);
    }
    return merged.split(0, my_id, "repaired");
}

// A spawned replacement: merge with the parents, learn whose place it takes, and join the
// communicator ordered by original id.
Comm join_as_replacement(int& my_id) {
    MPI_Comm parent = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
    MPI_Comm merged_raw = MPI_COMM_NULL;
    flashrec::ft::check(MPI_Intercomm_merge(parent, 1, &merged_raw), "MPI_Intercomm_merge", parent,
                        "parent");
    MPI_Comm_free(&parent);
    Comm merged = Comm::adopt(merged_raw, "merged");
    flashrec::ft::check(MPI_Recv(&my_id, 1, MPI_INT, 0, 7, merged.get(), MPI_STATUS_IGNORE),
                        "MPI_Recv", merged);
    return merged.split(0, my_id, "repaired");
}

}  // namespace

int main(int argc, char** argv) {
    std::string mode = "shrink";
    int child_stage = 0;  // 0: original rank; 1 or 2: replacement spawned by repair 1 or 2
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        if (!std::strcmp(argv[i], "--child") && i + 1 < argc) child_stage = std::atoi(argv[++i]);
    }
    MPI_Init(&argc, &argv);
    int exit_code = 0;
    try {
        int my_id = -1;
        Comm repaired;
        if (child_stage == 0) {
            Comm world = Comm::dup_world("world");
            my_id = world.rank();
            if (world.size() != 4) throw flashrec::Error("run with 4 ranks");
            allreduce_with_failure(world, my_id, 3);
            repaired = repair(world, my_id, 3, mode != "shrink", argv[0], mode, 1);
        } else {
            repaired = join_as_replacement(my_id);
        }
        const long expected = mode == "shrink" ? 0 + 1 + 2 : 0 + 1 + 2 + 3;
        if (mode == "twice" && child_stage < 2) {
            if (sum_over(repaired, my_id) != expected) throw flashrec::Error("wrong sum after repair 1");
            allreduce_with_failure(repaired, my_id, 1);
            repaired = repair(repaired, my_id, 1, true, argv[0], mode, 2);
        }
        const long got = sum_over(repaired, my_id);
        const bool ordered = mode == "shrink" || repaired.rank() == my_id;
        std::printf("%s id %d%s: size %d, rank %d, sum %ld (expected %ld)\n",
                    got == expected && ordered ? "OK" : "FAIL", my_id,
                    child_stage ? " (replacement)" : "", repaired.size(), repaired.rank(), got,
                    expected);
    } catch (const std::exception& e) {
        std::printf("FAIL: %s\n", e.what());
        exit_code = 1;
    }
    std::fflush(stdout);
    MPI_Finalize();
    return exit_code;
}
