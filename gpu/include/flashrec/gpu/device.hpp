// Which GPU a process uses, and finding out whether there is one at all.
#pragma once
#include <string>

namespace flashrec::gpu {

// Number of CUDA devices this process can use; 0 when there is no device, no driver, a driver
// too old for this runtime, or CUDA_VISIBLE_DEVICES hides them all. Never throws, and leaves
// no pending CUDA error behind. Tests that need a GPU skip (exit 77) when it returns 0.
int device_count_or_zero() noexcept;

// True when this process already uses CUDA: a context is current on the calling thread, or a
// device's primary context is active (cudaMalloc, cudaSetDevice, a kernel launch, ... made
// it). Asks the driver through cudaGetDriverEntryPointByVersion and never creates a context
// itself, so a CPU-only trainer on a GPU node gets no context (no GPU memory, no trouble with
// exclusive-process compute mode). When the driver cannot be asked, says true (the caller
// then inspects pointers with cudaPointerGetAttributes, which is correct, only heavier).
// False without a device. Never throws.
bool cuda_in_use() noexcept;

// This process's index among the processes of the job on its node, from the launcher's
// environment (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, LOCAL_RANK, in that
// order); -1 when none is set or it is not a non-negative integer. The environment is what a
// hot spare can read without a collective (it is parked in MPI while the active ranks start).
// A process started by MPI_Comm_spawn numbers itself in its own spawned world: give it a
// device explicitly.
int local_rank_from_env() noexcept;

// The device a process with node-local index `local_rank` should use: local_rank modulo the
// device count (so k ranks per node share k GPUs one to one). Throws CudaError when there is
// no device (cudaErrorNoDevice).
int device_for_local_rank(int local_rank);

// Makes `device` current for this thread (CUDA's current device is per thread: a background
// thread must set it before any call) and restores the previous one at scope exit.
class DeviceGuard {
public:
    explicit DeviceGuard(int device);
    ~DeviceGuard();
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = -1;
    bool changed_ = false;
};

// The current device of this thread (cudaGetDevice); throws CudaError.
int current_device();

// The model of this thread's current device ("NVIDIA H100 80GB HBM3"): the platform fingerprint
// (runtime/platform.hpp). Empty when it cannot be had. Never throws.
std::string current_device_name() noexcept;

// A spare's admission check of its GPU (issue 29): a small allocation, a memset and a copy back
// on the current device. Empty when it works, else what failed. Never throws, and leaves no
// pending CUDA error behind.
std::string check_current_device() noexcept;

// FLASHREC_GPU_SHARED=1 lets several ranks of one NCCL communicator use one GPU, for tests and
// benchmarks on a one-GPU machine. NCCL refuses two ranks of a communicator on one device of one
// host ("Duplicate GPU detected"), so each process tells NCCL it is a host of its own
// (NCCL_HOSTID = hostname:pid, unless NCCL_HOSTID is set already); NCCL then moves the bytes
// between them with its network transport (sockets; NCCL_SOCKET_IFNAME=lo on one machine).
// Correct, and slower than NVLink or PCIe peer copies would be: never for production.
inline constexpr const char* kSharedDeviceEnv = "FLASHREC_GPU_SHARED";
bool device_shared_by_ranks() noexcept;
// Sets NCCL_HOSTID when device_shared_by_ranks(); call before this process's first NCCL call.
// Idempotent, never throws.
void prepare_nccl_for_shared_device() noexcept;

}  // namespace flashrec::gpu
