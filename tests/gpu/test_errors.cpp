// CUDA/NCCL error -> exception mapping, device detection without a device, and the RAII
// handles' behaviour when CUDA has no device. Runs everywhere (label unit): it hides every GPU
// (CUDA_VISIBLE_DEVICES="" before CUDA starts), so it sees the same thing on a GPU node as in CI.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <stdlib.h>

#include <map>
#include <optional>
#include <string>

#include "flashrec/errors.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/handles.hpp"

using namespace flashrec::gpu;

namespace {

// Before main, hence before CUDA reads it on its first call.
const bool devices_hidden = [] { return ::setenv("CUDA_VISIBLE_DEVICES", "", 1) == 0; }();

bool contains(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

// Sets environment variables for one scope and puts the old values back.
class EnvScope {
public:
    void set(const char* name, const char* value) {
        remember(name);
        if (value == nullptr)
            ::unsetenv(name);
        else
            ::setenv(name, value, 1);
    }
    ~EnvScope() {
        for (const auto& [name, old] : saved_) {
            if (old)
                ::setenv(name.c_str(), old->c_str(), 1);
            else
                ::unsetenv(name.c_str());
        }
    }

private:
    void remember(const char* name) {
        if (saved_.count(name) != 0) return;
        const char* old = ::getenv(name);
        saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
    }
    std::map<std::string, std::optional<std::string>> saved_;
};

}  // namespace

TEST_CASE("device_count_or_zero is 0 without a usable device, never throws, leaves no error") {
    REQUIRE(devices_hidden);
    CHECK(device_count_or_zero() == 0);
    CHECK(device_count_or_zero() == 0);  // twice: nothing left pending by the first call
}

TEST_CASE("CudaError names the call, file:line, the rank and the CUDA error") {
    int line = 0;
    try {
        line = __LINE__ + 1;
        FLASHREC_CUDA_CHECK(cudaErrorMemoryAllocation);
        FAIL("no exception");
    } catch (const CudaError& e) {
        CHECK(e.code() == cudaErrorMemoryAllocation);
        CHECK(e.code_name() == "cudaErrorMemoryAllocation");
        CHECK(e.call() == "cudaErrorMemoryAllocation");
        CHECK(e.file() == "gpu/test_errors.cpp");
        CHECK(e.line() == line);
        CHECK(e.rank() == -1);  // outside MPI
        CHECK_FALSE(e.sticky());
        const std::string what = e.what();
        CHECK(contains(what, "rank -1: cudaErrorMemoryAllocation at gpu/test_errors.cpp:" +
                                 std::to_string(line) + " failed: cudaErrorMemoryAllocation ("));
        CHECK_FALSE(contains(what, "sticky"));
    }
    // A flashrec::Error like every other error of the library.
    CHECK_THROWS_AS(FLASHREC_CUDA_CHECK(cudaErrorInvalidValue), flashrec::Error);
    CHECK_NOTHROW(FLASHREC_CUDA_CHECK(cudaSuccess));
}

TEST_CASE("sticky CUDA errors say the process must be replaced") {
    for (cudaError_t code : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert,
                             cudaErrorECCUncorrectable, cudaErrorHardwareStackError,
                             cudaErrorMisalignedAddress, cudaErrorContained})
        CHECK(CudaError::is_sticky(code));
    for (cudaError_t code : {cudaErrorMemoryAllocation, cudaErrorInvalidValue, cudaErrorNotReady,
                             cudaErrorNoDevice, cudaErrorInsufficientDriver,
                             cudaErrorHostMemoryAlreadyRegistered})
        CHECK_FALSE(CudaError::is_sticky(code));
    const CudaError e(cudaErrorIllegalAddress, "cudaStreamSynchronize(s)", "src/x.cpp", 7, 3);
    CHECK(e.sticky());
    CHECK(contains(e.what(), "rank 3: cudaStreamSynchronize(s) at src/x.cpp:7 failed: "
                             "cudaErrorIllegalAddress"));
    CHECK(contains(e.what(), "[sticky"));
}

TEST_CASE("error names") {
    CHECK(cuda_error_name(cudaErrorNoDevice) == "cudaErrorNoDevice");
    CHECK(cuda_error_name(static_cast<cudaError_t>(12345)) == "cudaError(12345)");
    const std::map<ncclResult_t, std::string> names = {
        {ncclSuccess, "ncclSuccess"},
        {ncclUnhandledCudaError, "ncclUnhandledCudaError"},
        {ncclSystemError, "ncclSystemError"},
        {ncclInternalError, "ncclInternalError"},
        {ncclInvalidArgument, "ncclInvalidArgument"},
        {ncclInvalidUsage, "ncclInvalidUsage"},
        {ncclRemoteError, "ncclRemoteError"},
        {ncclInProgress, "ncclInProgress"}};
    for (const auto& [result, name] : names) CHECK(nccl_result_name(result) == name);
    CHECK(std::string(nccl_result_name(ncclNumResults)) == "ncclResult(unknown)");
    CHECK(std::string(cause_name(NcclError::Cause::deadline)) == "deadline");
    CHECK(short_file("/work/main/gpu/src/nccl_comm.cpp") == "src/nccl_comm.cpp");
    CHECK(short_file("src/nccl_comm.cpp") == "src/nccl_comm.cpp");
    CHECK(short_file("nccl_comm.cpp") == "nccl_comm.cpp");
    CHECK(short_file(nullptr) == "?");
}

TEST_CASE("NcclError from a failed call") {
    int line = 0;
    try {
        line = __LINE__ + 1;
        FLASHREC_NCCL_CHECK(ncclRemoteError);
        FAIL("no exception");
    } catch (const NcclError& e) {
        CHECK(e.result() == ncclRemoteError);
        CHECK(e.cause() == NcclError::Cause::call_failed);
        CHECK(e.call() == "ncclRemoteError");
        CHECK(e.file() == "gpu/test_errors.cpp");
        CHECK(e.line() == line);
        CHECK(e.rank() == -1);
        CHECK(e.peer_failure());
        CHECK(contains(e.what(), "rank -1: ncclRemoteError at gpu/test_errors.cpp:" +
                                     std::to_string(line) + " failed: ncclRemoteError ("));
    }
    CHECK_NOTHROW(FLASHREC_NCCL_CHECK(ncclSuccess));
    // In progress is a normal answer of a non-blocking communicator, an error elsewhere.
    CHECK_THROWS_AS(FLASHREC_NCCL_CHECK(ncclInProgress), NcclError);
    CHECK(check_nccl_nonblocking(ncclInProgress, "ncclAllReduce", __FILE__, __LINE__) == ncclInProgress);
    CHECK(check_nccl_nonblocking(ncclSuccess, "ncclAllReduce", __FILE__, __LINE__) == ncclSuccess);
    CHECK_THROWS_AS(check_nccl_nonblocking(ncclSystemError, "ncclAllReduce", __FILE__, __LINE__),
                    NcclError);
}

TEST_CASE("NcclError: which failures are a peer's, and how each cause reads") {
    using Cause = NcclError::Cause;
    const auto make = [](ncclResult_t result, Cause cause) {
        return NcclError(result, cause, "ncclAllReduce(sum)", "src/nccl_comm.cpp", 9, 2,
                         "communicator 'dp', rank 1 of 4");
    };
    CHECK(make(ncclRemoteError, Cause::async_error).peer_failure());
    CHECK(make(ncclSystemError, Cause::call_failed).peer_failure());
    CHECK(make(ncclInProgress, Cause::abort_requested).peer_failure());
    CHECK(make(ncclInProgress, Cause::deadline).peer_failure());
    CHECK_FALSE(make(ncclInvalidUsage, Cause::call_failed).peer_failure());
    CHECK_FALSE(make(ncclInvalidArgument, Cause::call_failed).peer_failure());
    CHECK_FALSE(make(ncclInternalError, Cause::async_error).peer_failure());
    CHECK_FALSE(make(ncclUnhandledCudaError, Cause::async_error).peer_failure());

    CHECK(contains(make(ncclRemoteError, Cause::async_error).what(),
                   "rank 2: ncclAllReduce(sum) at src/nccl_comm.cpp:9: asynchronous error: "
                   "ncclRemoteError ("));
    CHECK(contains(make(ncclInProgress, Cause::abort_requested).what(),
                   "aborted on request (recovery); NCCL status ncclInProgress: communicator 'dp'"));
    CHECK(contains(make(ncclInProgress, Cause::deadline).what(), "deadline exceeded"));
}

TEST_CASE("local rank from the launcher's environment") {
    EnvScope env;
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"})
        env.set(name, nullptr);
    CHECK(local_rank_from_env() == -1);
    env.set("LOCAL_RANK", "5");
    CHECK(local_rank_from_env() == 5);
    env.set("SLURM_LOCALID", "2");
    CHECK(local_rank_from_env() == 2);  // SLURM_LOCALID before LOCAL_RANK
    env.set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
    CHECK(local_rank_from_env() == 3);  // Open MPI's first
    env.set("OMPI_COMM_WORLD_LOCAL_RANK", "3x");
    CHECK(local_rank_from_env() == -1);  // malformed: not silently another variable's value
    env.set("OMPI_COMM_WORLD_LOCAL_RANK", "-1");
    CHECK(local_rank_from_env() == -1);
}

TEST_CASE("without a device, handles throw CudaError (never crash) and empty handles are free") {
    REQUIRE(device_count_or_zero() == 0);
    CHECK_THROWS_AS(device_for_local_rank(0), CudaError);
    CHECK_THROWS_AS(Stream::create(), CudaError);
    CHECK_THROWS_AS(Event::create(), CudaError);
    CHECK_THROWS_AS(DeviceBuffer::allocate(64), CudaError);
    CHECK_THROWS_AS(PinnedHostBuffer::allocate(64), CudaError);
    try {
        (void)DeviceBuffer::allocate(64);
    } catch (const CudaError& e) {
        CHECK(contains(e.call(), "cudaMalloc"));
        CHECK(e.file() == "src/handles.cpp");
        CHECK((e.code() == cudaErrorNoDevice || e.code() == cudaErrorInsufficientDriver));
    }
    // Zero bytes and default-made handles make no CUDA call at all.
    CHECK(DeviceBuffer::allocate(0).data() == nullptr);
    CHECK(PinnedHostBuffer::allocate(0).data() == nullptr);
    CHECK(HostRegistration::pin(nullptr, 0).data() == nullptr);
    Stream stream;
    Event event;
    CHECK_FALSE(stream);
    CHECK_FALSE(event);
}
