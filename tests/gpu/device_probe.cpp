// gpu_device_probe [N]: exit 0 when this process sees at least N CUDA devices (default 1),
// 77 otherwise. Lets a ctest command that is not itself a test program (a trainer run under
// fr-compare) be skipped, not failed, where there is no GPU.
#include <cstdio>
#include <cstdlib>

#include "flashrec/gpu/device.hpp"

int main(int argc, char** argv) {
    const int wanted = argc > 1 ? std::atoi(argv[1]) : 1;
    const int devices = flashrec::gpu::device_count_or_zero();
    // FLASHREC_GPU_SHARED=1: the ranks share one GPU (flashrec/gpu/device.hpp).
    const bool shared = devices > 0 && flashrec::gpu::device_shared_by_ranks();
    std::printf("%d CUDA device(s)%s, %d wanted\n", devices, shared ? " shared by the ranks" : "", wanted);
    if (devices < wanted && !shared) {
        std::printf("SKIP: not enough CUDA devices\n");
        return 77;
    }
    return 0;
}
