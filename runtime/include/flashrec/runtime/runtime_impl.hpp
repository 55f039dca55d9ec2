// The Runtime's insides, shared by the files of the runtime module (never installed).
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashrec/flashrec.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/protection.hpp"
#include "flashrec/runtime/config.hpp"
#include "flashrec/runtime/fault_injector.hpp"
#include "flashrec/runtime/topology.hpp"

namespace flashrec {

// MPI_Init_thread / MPI_Finalize, first member of Impl so it is torn down last.
struct MpiSession {
    MpiSession(int& argc, char**& argv);
    ~MpiSession();
    MpiSession(const MpiSession&) = delete;
    MpiSession& operator=(const MpiSession&) = delete;
};

struct ProtectedBuffer {
    std::string name;
    void* data;
    std::size_t bytes;
    DType type;
    Redundancy kind;
};

struct Runtime::Impl {
    Impl(int& argc, char**& argv, const std::string& config_path);

    MpiSession mpi;
    config::Config cfg;
    topology::Shape shape;
    int world_rank = -1;
    bool original = true;        // started with the job (not a spare that took a role later)
    int role_index = -1;         // -1 while this process is a parked hot spare
    int node = 0;                // node id of this process
    std::vector<int> node_of_role;
    int epoch = 0;               // topology epoch: +1 per repair

    ft::Comm universe;           // every live process: actives and hot spares
    ft::Comm work;               // actives, ordered by role
    ft::Comm dp, tp, pp;         // derived from work
    ft::Comm replication;        // dup of work for the protection thread (handed to it)

    std::unique_ptr<ft::Protection> protection;
    struct {
        double exposed_wait_s = 0;  // total time the sync point waited for snapshots
        std::int64_t waits = 0;
    } stats;

    std::vector<ProtectedBuffer> buffers;
    runtime::FaultInjector faults;

    // Step state.
    std::int64_t step = 0;
    bool abandoned = false;
    std::atomic<std::int64_t> step_tag{0};
    std::atomic<int> phase{0};
    std::vector<float> scratch;  // reduce_scatter receive area, reused across steps

    Role role() const;
    topology::Coord coord() const { return topology::coord_of(shape, role_index); }
    void enter(Phase p, std::int64_t tag);
    // Called when a collective reports a failure: abandon the step, wake everyone.
    void on_failure(const std::exception& e);
    void revoke_all() noexcept;
    void build_communicators();
    // (Re)starts protection for the current topology; snapshot `version` of the live state.
    void start_protection(std::int64_t version);
    // The loop ended: last snapshot committed, segments of this job on this node removed.
    void finish_loop();
    // Runs an MPI collective of this step; on a process failure or revoke, abandons the step.
    template <class F>
    void guarded(F&& collective) {
        if (abandoned) return;
        try {
            collective();
        } catch (const ProcessFailure& e) {
            on_failure(e);
        } catch (const CommRevoked& e) {
            on_failure(e);
        }
    }
    void log(const std::string& text) const;
};

}  // namespace flashrec
