#include "flashrec/gpu/cuda_check.hpp"

#include <cstring>
#include <string_view>

#include "flashrec/ft/comm.hpp"

namespace flashrec::gpu {

namespace {

std::string where(const std::string& call, const std::string& file, int line, int rank) {
    return "rank " + std::to_string(rank) + ": " + call + " at " + file + ":" + std::to_string(line);
}

std::string cuda_text(cudaError_t code) {
    // cudaGetErrorString is a table lookup in the runtime: it needs no driver or device.
    const char* text = cudaGetErrorString(code);
    return cuda_error_name(code) + " (" + (text != nullptr ? text : "no description") + ")";
}

std::string nccl_text(ncclResult_t result) {
    const char* text = ncclGetErrorString(result);
    return std::string(nccl_result_name(result)) + " (" + (text != nullptr ? text : "no description") +
           ")";
}

std::string nccl_message(ncclResult_t result, NcclError::Cause cause, const std::string& call,
                         const std::string& file, int line, int rank, const std::string& detail) {
    std::string text = where(call, file, line, rank);
    switch (cause) {
        case NcclError::Cause::call_failed:
            text += " failed: " + nccl_text(result);
            break;
        case NcclError::Cause::async_error:
            text += ": asynchronous error: " + nccl_text(result);
            break;
        case NcclError::Cause::abort_requested:
            text += ": aborted on request (recovery); NCCL status " + std::string(nccl_result_name(result));
            break;
        case NcclError::Cause::deadline:
            text += ": deadline exceeded, communicator aborted; NCCL status " +
                    std::string(nccl_result_name(result));
            break;
    }
    if (!detail.empty()) text += ": " + detail;
    return text;
}

}  // namespace

std::string short_file(const char* file) {
    if (file == nullptr) return "?";
    const std::string_view path(file);
    const auto last = path.rfind('/');
    if (last == std::string_view::npos || last == 0) return std::string(path);
    const auto before = path.rfind('/', last - 1);
    return std::string(before == std::string_view::npos ? path : path.substr(before + 1));
}

std::string cuda_error_name(cudaError_t code) {
    // An unknown code reads "unrecognized error code": keep the number instead.
    const char* name = cudaGetErrorName(code);
    if (name == nullptr || std::strncmp(name, "cuda", 4) != 0)
        return "cudaError(" + std::to_string(static_cast<int>(code)) + ")";
    return name;
}

const char* nccl_result_name(ncclResult_t result) {
    // ncclTimeout (8) arrived after 2.28; the CUDA install's older header does not have it.
    if (static_cast<int>(result) == 8 && static_cast<int>(ncclNumResults) > 8) return "ncclTimeout";
    switch (static_cast<int>(result)) {
        case ncclSuccess: return "ncclSuccess";
        case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
        case ncclSystemError: return "ncclSystemError";
        case ncclInternalError: return "ncclInternalError";
        case ncclInvalidArgument: return "ncclInvalidArgument";
        case ncclInvalidUsage: return "ncclInvalidUsage";
        case ncclRemoteError: return "ncclRemoteError";
        case ncclInProgress: return "ncclInProgress";
        default: break;
    }
    return "ncclResult(unknown)";
}

const char* cause_name(NcclError::Cause cause) {
    switch (cause) {
        case NcclError::Cause::call_failed: return "call_failed";
        case NcclError::Cause::async_error: return "async_error";
        case NcclError::Cause::abort_requested: return "abort_requested";
        case NcclError::Cause::deadline: return "deadline";
    }
    return "unknown";
}

CudaError::CudaError(cudaError_t code, std::string call, std::string file, int line, int rank)
    : Error(where(call, file, line, rank) + " failed: " + cuda_text(code) +
            (is_sticky(code) ? " [sticky: this process's CUDA context is lost]" : "")),
      code_(code),
      code_name_(cuda_error_name(code)),
      call_(std::move(call)),
      file_(std::move(file)),
      line_(line),
      rank_(rank) {}

bool CudaError::is_sticky(cudaError_t code) {
    switch (code) {
        case cudaErrorECCUncorrectable:
        case cudaErrorContained:
        case cudaErrorIllegalAddress:
        case cudaErrorLaunchTimeout:
        case cudaErrorAssert:
        case cudaErrorHardwareStackError:
        case cudaErrorIllegalInstruction:
        case cudaErrorMisalignedAddress:
        case cudaErrorInvalidAddressSpace:
        case cudaErrorInvalidPc:
        case cudaErrorLaunchFailure:
        case cudaErrorTensorMemoryLeak:
        case cudaErrorMpsClientTerminated:
        case cudaErrorExternalDevice:
            return true;
        default:
            return false;
    }
}

NcclError::NcclError(ncclResult_t result, Cause cause, std::string call, std::string file, int line,
                     int rank, const std::string& detail)
    : Error(nccl_message(result, cause, call, file, line, rank, detail)),
      result_(result),
      cause_(cause),
      call_(std::move(call)),
      file_(std::move(file)),
      line_(line),
      rank_(rank) {}

bool NcclError::peer_failure() const {
    if (cause_ == Cause::abort_requested || cause_ == Cause::deadline) return true;
    return result_ == ncclRemoteError || result_ == ncclSystemError;
}

void check_cuda(cudaError_t rc, const char* call, const char* file, int line) {
    if (rc == cudaSuccess) return;
    // The failing call also set CUDA's per-thread "last error"; reset it (for a sticky error
    // the reset is a no-op: every call keeps failing, which is the point).
    if (!CudaError::is_sticky(rc)) (void)cudaGetLastError();
    throw CudaError(rc, call, short_file(file), line, ft::world_rank());
}

void check_nccl(ncclResult_t rc, const char* call, const char* file, int line, ncclComm_t comm) {
    if (rc == ncclSuccess) return;
    const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
    throw NcclError(rc, NcclError::Cause::call_failed, call, short_file(file), line, ft::world_rank(),
                    last != nullptr ? last : "");
}

ncclResult_t check_nccl_nonblocking(ncclResult_t rc, const char* call, const char* file, int line,
                                    ncclComm_t comm) {
    if (rc == ncclInProgress) return rc;
    check_nccl(rc, call, file, line, comm);
    return rc;
}

}  // namespace flashrec::gpu
