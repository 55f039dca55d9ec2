// An outside GPU trainer's view of the installed GPU API (built only when flashrec was built with
// CUDA): typed CUDA errors, the device for a node-local rank, RAII streams and events.
#include <flashrec/flashrec.hpp>
#include <flashrec/gpu/cuda_check.hpp>
#include <flashrec/gpu/device.hpp>
#include <flashrec/gpu/handles.hpp>

#include <cstdio>

int main() {
    namespace gpu = flashrec::gpu;
    const int devices = gpu::device_count_or_zero();
    std::printf("consumer_gpu: flashrec %s, %d CUDA device(s)\n", flashrec::version(), devices);
    if (devices == 0) {
        // No device: choosing one is a typed error that names the CUDA error.
        try {
            (void)gpu::device_for_local_rank(0);
        } catch (const gpu::CudaError& e) {
            std::printf("consumer_gpu: no device: %s\n", e.code_name().c_str());
            return 0;
        }
        std::printf("consumer_gpu: FAIL: device_for_local_rank(0) without a device did not throw\n");
        return 1;
    }
    gpu::DeviceGuard on(gpu::device_for_local_rank(0));
    gpu::Stream stream = gpu::Stream::create();
    gpu::Event done = gpu::Event::create();
    done.record(stream.get());
    done.synchronize();
    std::printf("consumer_gpu: a stream and an event on device %d (%s)\n", gpu::current_device(),
                gpu::current_device_name().c_str());
    return 0;
}
