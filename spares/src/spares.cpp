#include "flashrec/spares/spares.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "flashrec/errors.hpp"

namespace flashrec::spares {

namespace {
constexpr int kReleaseTag = 0x5e1;
constexpr int kSlotSizesTag = 0x5e2;
}

Wake park(const ft::Comm& universe, const SlotSizesHandler& on_slot_sizes) {
    // Not a blocking MPI_Recv: with ob1/tcp it busy-polls a core for the whole job, a core the
    // trainer's ranks on this node need. Test, then sleep (up to 1 ms, the latency it adds to
    // a recovery's wake-up). A failure leaves the requests pending on the revoked communicator,
    // on purpose: neither cancelled nor freed (an error on a freed request aborts the process
    // under ob1), hence the static buffers they may still own.
    static int message = 0;
    static std::uint64_t sizes[kMaxSlotSizes] = {};
    MPI_Request release = MPI_REQUEST_NULL, slot_sizes = MPI_REQUEST_NULL;
    ft::check(MPI_Irecv(&message, 1, MPI_INT, MPI_ANY_SOURCE, kReleaseTag, universe.get(), &release),
              "MPI_Irecv(parked spare)", universe);
    if (on_slot_sizes)
        ft::check(MPI_Irecv(sizes, kMaxSlotSizes, MPI_UINT64_T, MPI_ANY_SOURCE, kSlotSizesTag, universe.get(),
                            &slot_sizes),
                  "MPI_Irecv(parked spare: slot sizes)", universe);
    ft::Backoff backoff(std::chrono::microseconds(50), std::chrono::milliseconds(1));
    try {
        for (;;) {
            int done = 0;
            ft::check(MPI_Test(&release, &done, MPI_STATUS_IGNORE), "MPI_Test(parked spare)", universe);
            if (done) return Wake::released;
            if (slot_sizes != MPI_REQUEST_NULL) {
                MPI_Status status{};
                ft::check(MPI_Test(&slot_sizes, &done, &status), "MPI_Test(parked spare: slot sizes)", universe);
                if (done) {
                    int count = 0;
                    MPI_Get_count(&status, MPI_UINT64_T, &count);
                    on_slot_sizes(std::vector<std::size_t>(sizes, sizes + count));
                }
            }
            backoff.sleep();
        }
    } catch (const ProcessFailure&) {
    } catch (const CommRevoked&) {
    }
    return Wake::recovery;
}

void release(const ft::Comm& universe, const std::vector<int>& spare_ranks) {
    int message = 1;
    for (int r : spare_ranks)
        ft::check(MPI_Send(&message, 1, MPI_INT, r, kReleaseTag, universe.get()),
                  "MPI_Send(release spare)", universe);
}

void send_slot_sizes(const ft::Comm& universe, const std::vector<int>& spare_ranks,
                     const std::vector<std::size_t>& slot_bytes) {
    if (slot_bytes.size() > static_cast<std::size_t>(kMaxSlotSizes)) return;  // more than a spare takes
    const std::vector<std::uint64_t> sizes(slot_bytes.begin(), slot_bytes.end());
    for (int r : spare_ranks)
        ft::check(MPI_Send(sizes.data(), static_cast<int>(sizes.size()), MPI_UINT64_T, r, kSlotSizesTag,
                           universe.get()),
                  "MPI_Send(slot sizes to a parked spare)", universe);
}

ft::Comm spawn_and_merge(const ft::Comm& survivors, int count, const std::vector<std::string>& argv,
                         const std::string& host) {
    MPI_Info info;
    MPI_Info_create(&info);
    // Dead processes keep their slots (docs/ulfm-traps.md trap 3).
    MPI_Info_set(info, "map_by", "slot:OVERSUBSCRIBE");
    if (!host.empty()) MPI_Info_set(info, "host", host.c_str());
    std::vector<std::string> args(argv.begin() + 1, argv.end());
    std::vector<char*> c_args;
    for (auto& a : args) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    MPI_Comm inter = MPI_COMM_NULL;
    std::vector<int> errcodes(static_cast<size_t>(count));
    const int rc = MPI_Comm_spawn(argv[0].c_str(), c_args.data(), count, info, 0, survivors.get(),
                                  &inter, errcodes.data());
    MPI_Info_free(&info);
    ft::check(rc, "MPI_Comm_spawn", survivors);
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    MPI_Comm merged = MPI_COMM_NULL;
    const int merge_rc = MPI_Intercomm_merge(inter, 0, &merged);
    // Free the intercommunicator on both sides, or MPI_Finalize hangs (docs/ulfm-traps.md trap 5).
    MPI_Comm_free(&inter);
    ft::check(merge_rc, "MPI_Intercomm_merge", survivors);
    return ft::Comm::adopt(merged, "universe");
}

bool was_spawned() {
    MPI_Comm parent = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    return parent != MPI_COMM_NULL;
}

ft::Comm join_parents() {
    MPI_Comm parent = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    if (parent == MPI_COMM_NULL) throw Error("join_parents: this process was not spawned");
    MPI_Comm_set_errhandler(parent, MPI_ERRORS_RETURN);
    MPI_Comm merged = MPI_COMM_NULL;
    const int rc = MPI_Intercomm_merge(parent, 1, &merged);
    MPI_Comm_free(&parent);
    ft::check(rc, "MPI_Intercomm_merge", MPI_COMM_WORLD, "parent");
    return ft::Comm::adopt(merged, "universe");
}

Replacements replacements_for(int dead_roles, int idle_spares, bool spawn) {
    Replacements r;
    r.to_spawn = spawn ? std::max(0, dead_roles - idle_spares) : 0;
    r.kind = dead_roles == 0 ? "none"
             : r.to_spawn == 0 ? "hot"
             : r.to_spawn == dead_roles ? "spawned"
                                        : "hot+spawned";
    return r;
}

SpawnCommand spawn_command(const std::vector<std::string>& start_args, const std::string& exe,
                           const char* spare_host, bool virtual_nodes, int nodes, const std::string& this_node) {
    SpawnCommand c;
    c.argv = start_args;
    c.argv[0] = exe;
    const std::string node = spare_host ? spare_host : virtual_nodes ? "node" + std::to_string(nodes) : this_node;
    c.argv.push_back("--flashrec-node");
    c.argv.push_back(node);
    c.host = spare_host ? spare_host : "";
    return c;
}

std::string this_executable() {
    char exe[4096] = {};
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) > 0) return exe;
    return "/proc/self/exe";
}

void Pool::assign(const std::vector<int>& role_of_process) {
    ranks_.clear();
    for (std::size_t p = 0; p < role_of_process.size(); ++p)
        if (role_of_process[p] < 0) ranks_.push_back(static_cast<int>(p));
}

void Pool::assign_range(int first, int end) {
    ranks_.clear();
    for (int r = first; r < end; ++r) ranks_.push_back(r);
}

}  // namespace flashrec::spares
