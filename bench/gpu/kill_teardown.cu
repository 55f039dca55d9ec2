// How long a SIGKILLed process that holds a CUDA context takes to be seen dead, by each channel a
// peer can see it through (docs/gpu.md, "Detection on the GPU path"):
//
//   bench_kill_teardown [TRIALS] [DEVICE_MIB] [PINNED_MIB]
//
// A child process is forked per trial (the parent never touches CUDA: a CUDA context does not
// survive fork). It holds one end of a socket made before its CUDA initialisation (a low file
// descriptor, like a connection made at MPI_Init) and connects a second one after it (a high
// descriptor, like a TCP connection MPI opens lazily at the first message), then reports ready
// and waits. The parent SIGKILLs it and times, from the kill:
//
//   early_eof_ms  the peer of the socket made before CUDA sees EOF;
//   late_eof_ms   the peer of the socket made after CUDA sees EOF;
//   exit_ms       waitpid returns (what mpirun's daemon sees: SIGCHLD, then the exit).
//
// The kernel closes a dying process's descriptors in order of their number, and the close of
// /dev/nvidia* is where the driver tears the context down; a socket closed after it is seen
// only once the teardown is done. Variants: "none" (no CUDA: the reference), "context"
// (cudaFree(0)), "device" (+DEVICE_MIB of cudaMalloc, default 1024), "pinned" (+PINNED_MIB of
// cudaMallocHost, default 1024), "kernel" (device, and a kernel of its own spinning on the GPU
// when it is killed, as a rank inside an NCCL collective), "peer-busy" (device, while another
// process keeps a kernel spinning on the same GPU: a survivor waiting in NCCL on a GPU the
// ranks share). Prints one line per variant with the median and range of each figure. Exits
// 77 when the child finds no CUDA device, 2 on bad arguments.
#include <cuda_runtime.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kNoDevice = 77;

enum class Variant { none, context, device, pinned, kernel, peer_busy };

// Spins until *flag is non-zero (never, here): a kernel that occupies the GPU until its
// context goes.
__global__ void spin_until(volatile int* flag) {
    while (*flag == 0) {
    }
}

const char* name(Variant v) {
    switch (v) {
        case Variant::none: return "none";
        case Variant::context: return "context";
        case Variant::device: return "device";
        case Variant::pinned: return "pinned";
        case Variant::kernel: return "kernel";
        case Variant::peer_busy: return "peer-busy";
    }
    return "?";
}

[[noreturn]] void die(const char* what) {
    std::perror(what);
    std::exit(1);
}

// Launches spin_until on a zeroed flag and returns (the kernel runs on).
void spin_forever() {
    int* flag = nullptr;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess || cudaMemset(flag, 0, sizeof(int)) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        _exit(1);
    spin_until<<<1, 1>>>(flag);
    if (cudaGetLastError() != cudaSuccess) _exit(1);
}

// A process that keeps a kernel spinning on the GPU until it is killed; returns its pid once
// the kernel was launched (-1 when it found no device).
pid_t start_busy_peer() {
    int ready[2];
    if (::pipe(ready) != 0) die("pipe");
    const pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        ::close(ready[0]);
        if (cudaFree(nullptr) != cudaSuccess) _exit(kNoDevice);
        spin_forever();
        const char r = 'r';
        if (::write(ready[1], &r, 1) != 1) _exit(1);
        for (;;) ::pause();
    }
    ::close(ready[1]);
    char r = 0;
    const bool up = ::read(ready[0], &r, 1) == 1;
    ::close(ready[0]);
    if (up) return pid;
    int status = 0;
    ::waitpid(pid, &status, 0);
    return -1;
}

// The child: CUDA as the variant asks, the late socket connected after it, "ready", then wait.
[[noreturn]] void child(Variant variant, int early_fd, const sockaddr_un& late_addr, std::size_t device_bytes,
                        std::size_t pinned_bytes) {
    if (variant != Variant::none) {
        if (cudaFree(nullptr) != cudaSuccess) _exit(kNoDevice);
        void* p = nullptr;
        if (variant == Variant::device || variant == Variant::kernel || variant == Variant::peer_busy) {
            if (cudaMalloc(&p, device_bytes) != cudaSuccess || cudaMemset(p, 1, device_bytes) != cudaSuccess) _exit(1);
        } else if (variant == Variant::pinned) {
            if (cudaMallocHost(&p, pinned_bytes) != cudaSuccess) _exit(1);
            std::memset(p, 1, pinned_bytes);
        }
        if (cudaDeviceSynchronize() != cudaSuccess) _exit(1);
        if (variant == Variant::kernel) spin_forever();
    }
    const int late_fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (late_fd < 0 || ::connect(late_fd, reinterpret_cast<const sockaddr*>(&late_addr), sizeof late_addr) != 0) _exit(1);
    const char ready = 'r';
    if (::write(early_fd, &ready, 1) != 1) _exit(1);
    for (;;) ::pause();
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Times {
    double early_eof_ms = -1, late_eof_ms = -1, exit_ms = -1;
};

// One trial; returns false (after reaping) when the child found no device.
bool trial(Variant variant, std::size_t device_bytes, std::size_t pinned_bytes, Times& out) {
    int pair[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) die("socketpair");
    const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    // Abstract namespace: nothing to unlink, unique per parent and trial.
    static int serial = 0;
    const std::string path = "flashrec-kill-teardown-" + std::to_string(::getpid()) + "-" + std::to_string(serial++);
    std::memcpy(addr.sun_path + 1, path.data(), std::min(path.size(), sizeof addr.sun_path - 2));
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener, 1) != 0)
        die("listen");
    const pid_t pid = ::fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        ::close(pair[0]);
        ::close(listener);
        child(variant, pair[1], addr, device_bytes, pinned_bytes);
    }
    ::close(pair[1]);
    const int early = pair[0];
    // The child either connects (CUDA ready) or exits (no device): wait for one of the two.
    pollfd wait_connect[2] = {{listener, POLLIN, 0}, {early, POLLIN, 0}};
    if (::poll(wait_connect, 2, 120000) <= 0 || !(wait_connect[0].revents & POLLIN)) {
        int status = 0;
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        ::close(listener);
        ::close(early);
        if (WIFEXITED(status) && WEXITSTATUS(status) == kNoDevice) return false;
        std::fprintf(stderr, "bench_kill_teardown: child of variant %s failed (status %d)\n", name(variant), status);
        std::exit(1);
    }
    const int late = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    char ready = 0;
    if (late < 0 || ::read(early, &ready, 1) != 1) die("ready");

    const Clock::time_point t0 = Clock::now();
    ::kill(pid, SIGKILL);
    pollfd fds[2] = {{early, POLLIN, 0}, {late, POLLIN, 0}};
    int open = 2;
    while (open > 0) {
        if (::poll(fds, 2, 60000) <= 0) die("poll (no EOF within 60 s)");
        for (pollfd& f : fds) {
            if (f.fd >= 0 && (f.revents & (POLLIN | POLLHUP))) {
                (f.fd == early ? out.early_eof_ms : out.late_eof_ms) = ms_since(t0);
                f.fd = -1;
                --open;
            }
        }
    }
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) die("waitpid");
    out.exit_ms = ms_since(t0);
    ::close(early);
    ::close(late);
    return true;
}

std::string summary(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.1f(%.1f-%.1f)", v[v.size() / 2], v.front(), v.back());
    return buf;
}

long parse_positive(const char* text) {
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    return (end == text || *end != '\0' || v <= 0) ? -1 : v;
}

}  // namespace

int main(int argc, char** argv) {
    const long trials = argc > 1 ? parse_positive(argv[1]) : 5;
    const long device_mib = argc > 2 ? parse_positive(argv[2]) : 1024;
    const long pinned_mib = argc > 3 ? parse_positive(argv[3]) : 1024;
    if (argc > 4 || trials < 0 || device_mib < 0 || pinned_mib < 0) {
        std::fprintf(stderr, "usage: bench_kill_teardown [TRIALS] [DEVICE_MIB] [PINNED_MIB]  (positive integers)\n");
        return 2;
    }
    std::printf("trials=%ld device_mib=%ld pinned_mib=%ld\n", trials, device_mib, pinned_mib);
    for (Variant v : {Variant::none, Variant::context, Variant::device, Variant::pinned, Variant::kernel,
                      Variant::peer_busy}) {
        pid_t busy = -1;
        if (v == Variant::peer_busy && (busy = start_busy_peer()) < 0) {
            std::fprintf(stderr, "bench_kill_teardown: no CUDA device (nothing measured)\n");
            return kNoDevice;
        }
        std::vector<double> early, late, exit;
        for (long i = 0; i < trials; ++i) {
            Times t;
            if (!trial(v, static_cast<std::size_t>(device_mib) << 20, static_cast<std::size_t>(pinned_mib) << 20, t)) {
                std::fprintf(stderr, "bench_kill_teardown: no CUDA device (nothing measured)\n");
                return kNoDevice;
            }
            early.push_back(t.early_eof_ms);
            late.push_back(t.late_eof_ms);
            exit.push_back(t.exit_ms);
        }
        if (busy > 0) {
            ::kill(busy, SIGKILL);
            ::waitpid(busy, nullptr, 0);
        }
        std::printf("variant=%s early_eof_ms=%s late_eof_ms=%s exit_ms=%s\n", name(v), summary(early).c_str(),
                    summary(late).c_str(), summary(exit).c_str());
        std::fflush(stdout);
    }
    return 0;
}
