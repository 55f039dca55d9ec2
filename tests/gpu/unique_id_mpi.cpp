// The NCCL unique-id exchange over MPI, without a GPU: a fake ncclUniqueId made on the root is
// broadcast, and every rank checks its 128 bytes. Also: a root that cannot make an id leaves no
// rank waiting, and an MPI communicator gets no NCCL provenance tag from a failed exchange.
// Run by ctest as  fr-run --expect ... -- fr-mpirun -n 2 gpu_unique_id_mpi  (label ft).
// Prints "OK rank <r>: ..." per check passed, "FAIL rank <r>: ..." otherwise.
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "flashrec/errors.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/nccl_comm.hpp"

namespace {

int failures = 0;

void report(bool ok, int rank, const std::string& what) {
    std::printf("%s rank %d: %s\n", ok ? "OK" : "FAIL", rank, what.c_str());
    std::fflush(stdout);
    if (!ok) ++failures;
}

ncclUniqueId fake_id(int salt) {
    ncclUniqueId id{};
    for (int i = 0; i < NCCL_UNIQUE_ID_BYTES; ++i)
        id.internal[i] = static_cast<char>((i * 37 + salt) & 0xff);
    return id;
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = -1;
    {
        flashrec::ft::Comm world = flashrec::ft::Comm::dup_world("world");
        rank = world.rank();

        // 1. The bytes of the root's id arrive intact on every rank, from root 0 and root 1.
        for (int root = 0; root < world.size(); ++root) {
            int made = 0;
            const ncclUniqueId got = flashrec::gpu::exchange_unique_id(
                world.get(), world.name(),
                [&] {
                    ++made;
                    return fake_id(root);
                },
                root);
            const ncclUniqueId want = fake_id(root);
            const bool same = std::memcmp(got.internal, want.internal, NCCL_UNIQUE_ID_BYTES) == 0;
            const bool made_right = made == (rank == root ? 1 : 0);
            report(same && made_right, rank,
                   "unique id from root " + std::to_string(root) + " received intact (" +
                       std::to_string(NCCL_UNIQUE_ID_BYTES) + " bytes)");
        }

        // 2. The root cannot make an id: it gets its own error, the others a flashrec::Error
        //    naming the root; nobody hangs in the broadcast.
        try {
            (void)flashrec::gpu::exchange_unique_id(world.get(), world.name(), []() -> ncclUniqueId {
                throw flashrec::Error("ncclGetUniqueId failed (fake)");
            });
            report(false, rank, "failed id creation was not reported");
        } catch (const flashrec::Error& e) {
            const std::string what = e.what();
            const bool ok = rank == 0 ? what == "ncclGetUniqueId failed (fake)"
                                      : what.find("rank 0 of 'world' could not make the NCCL unique id") !=
                                            std::string::npos;
            report(ok, rank, "failed id creation reported: " + what);
        }

        // 3. A root outside the communicator is refused before any communication.
        try {
            (void)flashrec::gpu::exchange_unique_id(world.get(), world.name(), [] { return fake_id(0); },
                                                    world.size());
            report(false, rank, "bad root accepted");
        } catch (const flashrec::Error&) {
            report(true, rank, "bad root refused");
        }

        // 4. A communicator made by no NcclComm carries no provenance tag.
        const flashrec::gpu::NcclComm none;
        report(!none.built_from(world.get()), rank, "no NCCL communicator was built from 'world'");

        // Everyone is still in step: a final collective completes.
        int one = 1, sum = 0;
        flashrec::ft::check(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, world.get()),
                            "MPI_Allreduce", world);
        report(sum == world.size(), rank, "still in step after the exchanges");
    }
    MPI_Finalize();
    if (failures == 0) std::printf("DONE rank %d\n", rank);
    return failures == 0 ? 0 : 1;
}
