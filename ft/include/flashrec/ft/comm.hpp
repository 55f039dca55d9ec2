// RAII MPI communicators with ULFM operations. Every communicator flashrec owns is a Comm:
// MPI_ERRORS_RETURN is set on it, and every MPI return code goes through check(), the one
// place that turns an error into a typed exception.
#pragma once
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace flashrec::ft {

class Comm {
public:
    Comm() = default;
    // Takes ownership of `handle` (freed in the destructor); sets MPI_ERRORS_RETURN.
    static Comm adopt(MPI_Comm handle, std::string name);
    // A duplicate of MPI_COMM_WORLD, the usual start of `universe`.
    static Comm dup_world(std::string name);
    // A duplicate of MPI_COMM_SELF: a group of one, made without a message to anyone.
    static Comm dup_self(std::string name);

    Comm(Comm&& other) noexcept;
    Comm& operator=(Comm&& other) noexcept;
    Comm(const Comm&) = delete;
    Comm& operator=(const Comm&) = delete;
    ~Comm();

    MPI_Comm get() const { return handle_; }
    const std::string& name() const { return name_; }
    bool valid() const { return handle_ != MPI_COMM_NULL; }
    int rank() const;
    int size() const;

    Comm dup(std::string name) const;
    // color < 0 means MPI_UNDEFINED: the result is an invalid Comm for this process.
    Comm split(int color, int key, std::string name) const;

    // Marks the communicator revoked on every member; never throws (it is called while
    // unwinding from another failure). Only revoke after every member passed an agree on it
    // (docs/ulfm-traps.md trap 6).
    void revoke() const noexcept;
    bool is_revoked() const;
    // A new communicator without the failed processes.
    Comm shrink(std::string name) const;
    // Fault-tolerant agreement: the bitwise AND of `flag` over the live members. Known failures
    // are acknowledged first, so only a failure during the agreement throws ProcessFailure.
    // Bounded by `deadline` (DeadlineExceeded) because iagree can be polled.
    int agree(int flag, std::chrono::steady_clock::time_point deadline) const;
    // Waits for `request` (a non-blocking operation on this communicator) without holding a
    // core: polls briefly (members that arrive together finish within it), then tests and
    // sleeps (Backoff). Open MPI's blocking calls instead busy-poll for as long as they wait,
    // and where ranks share cores the waiting ones take them from those still working.
    void wait(MPI_Request& request, const char* operation) const;
    // Ranks (in this communicator) that MPI knows to have failed.
    std::vector<int> failed_ranks() const;

private:
    Comm(MPI_Comm handle, std::string name) : handle_(handle), name_(std::move(name)) {}
    void release() noexcept;

    MPI_Comm handle_ = MPI_COMM_NULL;
    std::string name_;
};

// Throws the typed exception for `rc` (ProcessFailure, CommRevoked, MpiError); no-op on MPI_SUCCESS.
void check(int rc, const char* operation, const Comm& comm);
void check(int rc, const char* operation, MPI_Comm comm, const std::string& comm_name);

// For MPI_Testall/Waitall: on MPI_ERR_IN_STATUS, throws for the first request that failed.
void check_requests(int rc, const MPI_Status* statuses, int count, const char* operation,
                    const Comm& comm);

// How a thread waits for MPI without spinning: Open MPI's blocking calls busy-poll a core for
// as long as they wait (ob1/tcp has no blocking progress), so flashrec's waits test, then sleep
// a little longer each time nothing happened (from `first` up to `cap`), and start short
// again as soon as something did. The cap bounds the latency a sleep adds.
class Backoff {
public:
    explicit Backoff(std::chrono::microseconds first = std::chrono::microseconds(20),
                     std::chrono::microseconds cap = std::chrono::microseconds(500))
        : first_(first), cap_(cap), next_(first) {}
    void sleep();
    void reset() { next_ = first_; }

private:
    std::chrono::microseconds first_, cap_, next_;
};

// Non-blocking transfers in flight on one communicator. wait() polls them (so a revoke ends
// the wait) and checks that every receive got exactly the bytes it expected: after a revoke
// Open MPI can report pending receives complete without their data (seen here), and a
// snapshot built on such a receive would be committed with stale bytes.
class Transfers {
public:
    explicit Transfers(const Comm& comm) : comm_(comm) {}
    void send(const void* data, std::size_t bytes, int dest, int tag);
    void receive(void* data, std::size_t bytes, int source, int tag);
    // Throws ProcessFailure/CommRevoked/MpiError; `cancelled` (if given) is polled too and
    // turns into CommRevoked when it becomes true.
    void wait(const char* what, const std::atomic<bool>* cancelled = nullptr);
    // Progresses MPI once without blocking and returns the indices (in the order of send() and
    // receive() calls) of the transfers that completed now; a receive only if it got all its
    // bytes (else it throws like wait()). Indices stay valid until wait() returns.
    // Send requests are not freed as they complete, only all together once every transfer is
    // done: ob1 may still report an error for a send that MPI already completed (its last
    // fragment not yet through), and an error on a freed request aborts the process ("Send
    // error after request freed", seen here with many small messages and a kill).
    std::vector<std::size_t> test_some(const char* what, const std::atomic<bool>* cancelled = nullptr);
    // Every transfer posted so far has completed (through test_some or wait).
    bool done() const { return remaining_ == 0; }
    bool empty() const { return transfers_ == 0; }

private:
    const Comm& comm_;
    std::vector<MPI_Request> receives_, sends_;
    std::vector<std::size_t> receive_index_, send_index_;  // their transfer indices
    std::vector<long long> expected_;  // bytes per receive
    std::size_t sends_done_ = 0;       // sends_[0, sends_done_) completed (not freed)
    std::size_t transfers_ = 0;        // posted
    std::size_t remaining_ = 0;        // not yet completed
};

// Every member's `mine`, in rank order of `comm` (collective).
std::vector<std::string> allgather_strings(const Comm& comm, const std::string& mine);

// This process's rank in MPI_COMM_WORLD, for error messages and logs.
int world_rank();

}  // namespace flashrec::ft
