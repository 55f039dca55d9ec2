// gpu_device_probe [N]: exit 0 when this process sees at least N CUDA devices (default 1),
// 77 otherwise. Lets a ctest command that is not itself a test program (a trainer run under
// fr-compare) be skipped, not failed, where there is no GPU.
#include <cstdio>
#include <cstdlib>

#include "flashrec/gpu/device.hpp"

int main(int argc, char** argv) {
    const int wanted = argc > 1 ? std::atoi(argv[1]) : 1;
    const int devices = flashrec::gpu::device_count_or_zero();
    std::printf("%d CUDA device(s), %d wanted\n", devices, wanted);
    if (devices < wanted) {
        std::printf("SKIP: not enough CUDA devices\n");
        return 77;
    }
    return 0;
}
