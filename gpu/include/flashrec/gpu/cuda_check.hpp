// The one place where CUDA and NCCL return codes become typed exceptions (the GPU twin of
// ft::check for MPI). Every CUDA/NCCL call flashrec makes goes through FLASHREC_CUDA_CHECK /
// FLASHREC_NCCL_CHECK, so an error always names the call, where it was made and the rank.
//
//   FLASHREC_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream));
//   FLASHREC_NCCL_CHECK(ncclGetUniqueId(&id));
//
// what() reads "rank 3: cudaMemcpyAsync(...) at src/snapshot_copier.cpp:88 failed:
// cudaErrorIllegalAddress (an illegal memory access was encountered)".
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <string>

#include "flashrec/errors.hpp"

namespace flashrec::gpu {

// A CUDA runtime call failed.
class CudaError : public Error {
public:
    CudaError(cudaError_t code, std::string call, std::string file, int line, int rank);
    cudaError_t code() const { return code_; }
    // "cudaErrorIllegalAddress"
    const std::string& code_name() const { return code_name_; }
    const std::string& call() const { return call_; }
    const std::string& file() const { return file_; }
    int line() const { return line_; }
    int rank() const { return rank_; }  // MPI_COMM_WORLD rank, -1 outside MPI
    // True when the error poisons this process's CUDA context (a kernel fault, ECC, ...):
    // every later CUDA call fails too, so the process must be replaced, never retried
    // (DeadPool Table II: "replace in place"). A sticky error is not a bug of the caller.
    bool sticky() const { return is_sticky(code_); }
    static bool is_sticky(cudaError_t code);

private:
    cudaError_t code_;
    std::string code_name_, call_, file_;
    int line_;
    int rank_;
};

// An NCCL call or collective failed, was aborted, or missed its deadline.
class NcclError : public Error {
public:
    enum class Cause {
        call_failed,      // the call itself returned an error
        async_error,      // ncclCommGetAsyncError reported one (the comm has been aborted)
        abort_requested,  // the external abort flag was set (recovery): the comm was aborted
        deadline,         // the operation did not finish in time: the comm was aborted
    };
    NcclError(ncclResult_t result, Cause cause, std::string call, std::string file, int line,
              int rank, const std::string& detail);
    ncclResult_t result() const { return result_; }
    Cause cause() const { return cause_; }
    const std::string& call() const { return call_; }
    const std::string& file() const { return file_; }
    int line() const { return line_; }
    int rank() const { return rank_; }
    // The communicator is gone because a peer, the network or the job failed (remote/system
    // error, abort request, deadline): like ProcessFailure, the step loop must recover and
    // rebuild NCCL from the new `work`. False for usage errors (a bug) and internal errors.
    bool peer_failure() const;
    // When a wait saw the failure (wall clock, microseconds; 0: not from a wait) and how long the
    // communicator's release took before this was thrown (ncclCommAbort or revoke: on an H100 with
    // NCCL 2.28 about 0.5 s, docs/gpu.md), so that a recovery record can tell the two apart.
    std::int64_t seen_unix_us() const { return seen_unix_us_; }
    double release_ms() const { return release_ms_; }
    void set_failure_timing(std::int64_t seen_unix_us, double release_ms) {
        seen_unix_us_ = seen_unix_us;
        release_ms_ = release_ms;
    }

private:
    ncclResult_t result_;
    std::int64_t seen_unix_us_ = 0;
    double release_ms_ = 0;
    Cause cause_;
    std::string call_, file_;
    int line_;
    int rank_;
};

// "cudaErrorMemoryAllocation"; never throws, needs no driver or device.
std::string cuda_error_name(cudaError_t code);
// "ncclRemoteError"; never throws.
const char* nccl_result_name(ncclResult_t result);
const char* cause_name(NcclError::Cause cause);

// Throws CudaError unless rc is cudaSuccess. Clears CUDA's "last error" for non-sticky
// errors, so a later cudaGetLastError() does not report this one again.
void check_cuda(cudaError_t rc, const char* call, const char* file, int line);
// Throws NcclError(call_failed) unless rc is ncclSuccess; `comm` (if any) adds
// ncclGetLastError's text.
void check_nccl(ncclResult_t rc, const char* call, const char* file, int line,
                ncclComm_t comm = nullptr);
// For calls on a non-blocking communicator: ncclInProgress is not an error either.
ncclResult_t check_nccl_nonblocking(ncclResult_t rc, const char* call, const char* file, int line,
                                    ncclComm_t comm = nullptr);

// "src/nccl_comm.cpp" from __FILE__: the last two path components.
std::string short_file(const char* file);

}  // namespace flashrec::gpu

// Variadic so that a call with template arguments (commas) needs no extra parentheses.
#define FLASHREC_CUDA_CHECK(...) \
    ::flashrec::gpu::check_cuda((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)
#define FLASHREC_NCCL_CHECK(...) \
    ::flashrec::gpu::check_nccl((__VA_ARGS__), #__VA_ARGS__, __FILE__, __LINE__)
