#include "flashrec/ft/comm.hpp"

#include <mpi-ext.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

int world_rank() {
    int initialized = 0, finalized = 0, rank = -1;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return rank;
}

void check(int rc, const char* operation, MPI_Comm comm, const std::string& comm_name) {
    if (rc == MPI_SUCCESS) return;
    int error_class = rc;
    MPI_Error_class(rc, &error_class);
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    std::string detail(text, static_cast<size_t>(len));
    (void)comm;
    switch (error_class) {
        case MPIX_ERR_PROC_FAILED:
        case MPIX_ERR_PROC_FAILED_PENDING:
            throw ProcessFailure(rc, error_class, operation, comm_name, world_rank(), detail);
        case MPIX_ERR_REVOKED:
            throw CommRevoked(rc, error_class, operation, comm_name, world_rank(), detail);
        default:
            throw MpiError(rc, error_class, operation, comm_name, world_rank(), detail);
    }
}

void check(int rc, const char* operation, const Comm& comm) {
    check(rc, operation, comm.get(), comm.name());
}

void check_requests(int rc, const MPI_Status* statuses, int count, const char* operation,
                    const Comm& comm) {
    if (rc == MPI_ERR_IN_STATUS) {
        for (int i = 0; i < count; ++i) {
            const int e = statuses[i].MPI_ERROR;
            if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) check(e, operation, comm);
        }
    }
    check(rc, operation, comm);
}

Comm Comm::adopt(MPI_Comm handle, std::string name) {
    Comm c(handle, std::move(name));
    if (handle != MPI_COMM_NULL) {
        check(MPI_Comm_set_errhandler(handle, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", c);
        MPI_Comm_set_name(handle, c.name_.c_str());
    }
    return c;
}

Comm Comm::dup_world(std::string name) {
    // Errors on WORLD must come back as codes too, or MPI_Comm_dup could abort the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &out), "MPI_Comm_dup", MPI_COMM_WORLD, "world");
    return adopt(out, std::move(name));
}

Comm Comm::dup_self(std::string name) {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_dup(MPI_COMM_SELF, &out), "MPI_Comm_dup", MPI_COMM_SELF, "self");
    return adopt(out, std::move(name));
}

Comm::Comm(Comm&& other) noexcept : handle_(other.handle_), name_(std::move(other.name_)) {
    other.handle_ = MPI_COMM_NULL;
}

Comm& Comm::operator=(Comm&& other) noexcept {
    if (this != &other) {
        release();
        handle_ = other.handle_;
        name_ = std::move(other.name_);
        other.handle_ = MPI_COMM_NULL;
    }
    return *this;
}

Comm::~Comm() { release(); }

void Comm::release() noexcept {
    if (handle_ == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    // MPI_Comm_free is local in Open MPI even on a revoked communicator with dead members.
    if (!finalized && handle_ != MPI_COMM_WORLD && handle_ != MPI_COMM_SELF) MPI_Comm_free(&handle_);
    handle_ = MPI_COMM_NULL;
}

int Comm::rank() const {
    int r = -1;
    check(MPI_Comm_rank(handle_, &r), "MPI_Comm_rank", *this);
    return r;
}

int Comm::size() const {
    int s = 0;
    check(MPI_Comm_size(handle_, &s), "MPI_Comm_size", *this);
    return s;
}

Comm Comm::dup(std::string name) const {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_dup(handle_, &out), "MPI_Comm_dup", *this);
    return adopt(out, std::move(name));
}

Comm Comm::split(int color, int key, std::string name) const {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPI_Comm_split(handle_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split",
          *this);
    return adopt(out, std::move(name));
}

void Comm::revoke() const noexcept {
    if (handle_ != MPI_COMM_NULL) MPIX_Comm_revoke(handle_);
}

bool Comm::is_revoked() const {
    int flag = 0;
    check(MPIX_Comm_is_revoked(handle_, &flag), "MPIX_Comm_is_revoked", *this);
    return flag != 0;
}

Comm Comm::shrink(std::string name) const {
    MPI_Comm out = MPI_COMM_NULL;
    check(MPIX_Comm_shrink(handle_, &out), "MPIX_Comm_shrink", *this);
    return adopt(out, std::move(name));
}

int Comm::agree(int flag, std::chrono::steady_clock::time_point deadline) const {
    int acked = 0;
    MPIX_Comm_ack_failed(handle_, size(), &acked);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPIX_Comm_iagree(handle_, &flag, &request), "MPIX_Comm_iagree", *this);
    Backoff backoff(std::chrono::microseconds(10), std::chrono::microseconds(200));
    for (;;) {
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPIX_Comm_iagree", *this);
        if (done) return flag;
        if (std::chrono::steady_clock::now() > deadline)
            throw DeadlineExceeded("agree on " + name_, -1, 0.0);
        // Sleep, not yield: on a loaded node every agreeing process would otherwise take a
        // core from the ones that still have to reach the agreement. 200 us caps the latency.
        backoff.sleep();
    }
}

void Comm::wait(MPI_Request& request, const char* operation) const {
    constexpr int kPolls = 200;  // a few hundred microseconds of MPI progress
    Backoff backoff(std::chrono::microseconds(10), std::chrono::microseconds(200));
    for (int polls = 0;; ++polls) {
        int done = 0;
        check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), operation, *this);
        if (done) return;
        if (polls >= kPolls) backoff.sleep();
    }
}

std::vector<int> Comm::failed_ranks() const {
    MPI_Group failed = MPI_GROUP_NULL, mine = MPI_GROUP_NULL;
    check(MPIX_Comm_get_failed(handle_, &failed), "MPIX_Comm_get_failed", *this);
    check(MPI_Comm_group(handle_, &mine), "MPI_Comm_group", *this);
    int n = 0;
    MPI_Group_size(failed, &n);
    std::vector<int> in_failed(static_cast<size_t>(n)), in_mine(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) in_failed[static_cast<size_t>(i)] = i;
    if (n > 0) MPI_Group_translate_ranks(failed, n, in_failed.data(), mine, in_mine.data());
    MPI_Group_free(&failed);
    MPI_Group_free(&mine);
    return in_mine;
}

void Backoff::sleep() {
    std::this_thread::sleep_for(next_);
    next_ = std::min(cap_, next_ * 2);
}

void Transfers::send(const void* data, std::size_t bytes, int dest, int tag) {
    sends_.emplace_back(MPI_REQUEST_NULL);
    send_index_.push_back(transfers_);
    check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dest, tag, comm_.get(), &sends_.back()),
          "MPI_Isend", comm_);
    ++transfers_;
    ++remaining_;
}

void Transfers::receive(void* data, std::size_t bytes, int source, int tag) {
    receives_.emplace_back(MPI_REQUEST_NULL);
    receive_index_.push_back(transfers_);
    expected_.push_back(static_cast<long long>(bytes));
    check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, source, tag, comm_.get(), &receives_.back()),
          "MPI_Irecv", comm_);
    ++transfers_;
    ++remaining_;
}

namespace {
CommRevoked short_receive(const char* what, const Comm& comm, int count, long long expected) {
    return CommRevoked(MPIX_ERR_REVOKED, MPIX_ERR_REVOKED, what, comm.name(), world_rank(),
                       "a receive completed with " + std::to_string(count) + " of " +
                           std::to_string(expected) + " bytes");
}
}  // namespace

std::vector<std::size_t> Transfers::test_some(const char* what, const std::atomic<bool>* cancelled) {
    std::vector<std::size_t> completed;
    if (cancelled && cancelled->load())
        throw CommRevoked(MPIX_ERR_REVOKED, MPIX_ERR_REVOKED, what, comm_.name(), world_rank(),
                          "cancelled by a failure elsewhere");
    if (remaining_ == 0) return completed;
    // On a revoked communicator MPI_Testsome would complete and free the pending receives while
    // a live sender's fragments may still arrive for them, which aborts the process ("Recv
    // error after request freed", seen in the 3-D soak): leave them pending, never freed.
    if (comm_.is_revoked())
        throw CommRevoked(MPIX_ERR_REVOKED, MPIX_ERR_REVOKED, what, comm_.name(), world_rank(),
                          "the communicator was revoked with transfers pending");
    // Receives: completed ones are freed (all their bytes are here; nothing can follow).
    if (!receives_.empty()) {
        const int n = static_cast<int>(receives_.size());
        std::vector<int> indices(receives_.size());
        std::vector<MPI_Status> statuses(receives_.size());
        for (auto& st : statuses) st.MPI_ERROR = MPI_SUCCESS;
        int count = 0;
        const int rc = MPI_Testsome(n, receives_.data(), &count, indices.data(), statuses.data());
        if (rc == MPI_ERR_IN_STATUS) check_requests(rc, statuses.data(), count, what, comm_);
        check(rc, what, comm_);
        if (count == MPI_UNDEFINED) count = 0;
        for (int i = 0; i < count; ++i) {
            const auto r = static_cast<std::size_t>(indices[static_cast<std::size_t>(i)]);
            const MPI_Status& status = statuses[static_cast<std::size_t>(i)];
            int got = -1;
            MPI_Get_count(&status, MPI_BYTE, &got);
            if (got != expected_[r] || status.MPI_ERROR != MPI_SUCCESS)
                throw short_receive(what, comm_, got, expected_[r]);
            completed.push_back(receive_index_[r]);
        }
    }
    // Sends, in order, without freeing them (see the header); they complete about in order.
    while (sends_done_ < sends_.size()) {
        int flag = 0;
        MPI_Status status;
        status.MPI_ERROR = MPI_SUCCESS;
        check(MPI_Request_get_status(sends_[sends_done_], &flag, &status), what, comm_);
        if (!flag) break;
        check(status.MPI_ERROR, what, comm_);
        completed.push_back(send_index_[sends_done_++]);
    }
    // MPI_Request_get_status does not fail a request on a revoked communicator as the
    // MPI_Test family does (a send to a live peer that gave up stays pending for ever: seen
    // here as a rank that never noticed a failure), so look at the revoke ourselves.
    if (sends_done_ < sends_.size() && comm_.is_revoked())
        throw CommRevoked(MPIX_ERR_REVOKED, MPIX_ERR_REVOKED, what, comm_.name(), world_rank(),
                          "the communicator was revoked with sends pending");
    remaining_ -= completed.size();
    if (remaining_ == 0 && !sends_.empty()) {
        // Every send is complete: free them together, as MPI_Testall always did here.
        std::vector<MPI_Status> statuses(sends_.size());
        const int n = static_cast<int>(sends_.size());
        check_requests(MPI_Waitall(n, sends_.data(), statuses.data()), statuses.data(), n, what, comm_);
    }
    return completed;
}

void Transfers::wait(const char* what, const std::atomic<bool>* cancelled) {
    Backoff backoff;
    while (remaining_ > 0) {
        if (test_some(what, cancelled).empty()) backoff.sleep();
        else backoff.reset();
    }
    receives_.clear();
    sends_.clear();
    receive_index_.clear();
    send_index_.clear();
    expected_.clear();
    sends_done_ = 0;
    transfers_ = 0;
}

// Every member's `mine`, in rank order of `comm`.
std::vector<std::string> allgather_strings(const ft::Comm& comm, const std::string& mine) {
    const int n = comm.size();
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<size_t>(n)), displs(static_cast<size_t>(n));
    check(MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm.get()),
              "MPI_Allgather(lengths)", comm);
    int total = 0;
    for (int r = 0; r < n; ++r) displs[static_cast<size_t>(r)] = total, total += lens[static_cast<size_t>(r)];
    std::string all(static_cast<size_t>(total), '\0');
    check(MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(),
                             MPI_CHAR, comm.get()),
              "MPI_Allgatherv(strings)", comm);
    std::vector<std::string> out;
    for (int r = 0; r < n; ++r)
        out.push_back(all.substr(static_cast<size_t>(displs[static_cast<size_t>(r)]),
                                 static_cast<size_t>(lens[static_cast<size_t>(r)])));
    return out;
}

}  // namespace flashrec::ft
