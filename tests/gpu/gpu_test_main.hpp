// main() of the tests that need a GPU (label gpu): without a device they print why and exit
// 77, which ctest reports as skipped (SKIP_RETURN_CODE 77), never as passed. With
// FLASHREC_GPU_TEST_WITH_MPI defined first, MPI is started (a singleton: no mpirun needed).
#pragma once
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "flashrec/gpu/device.hpp"
#ifdef FLASHREC_GPU_TEST_WITH_MPI
#include <mpi.h>
#endif

inline constexpr int kSkipExitCode = 77;

int main(int argc, char** argv) {
    const int devices = flashrec::gpu::device_count_or_zero();
    if (devices == 0) {
        std::printf("SKIP: no CUDA device (no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)\n");
        return kSkipExitCode;
    }
    std::printf("%d CUDA device(s)\n", devices);
#ifdef FLASHREC_GPU_TEST_WITH_MPI
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
#endif
    doctest::Context context(argc, argv);
    const int rc = context.run();
#ifdef FLASHREC_GPU_TEST_WITH_MPI
    MPI_Finalize();
#endif
    return rc;
}
