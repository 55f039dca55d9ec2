// The example trainer of examples/mlp on a GPU: the same 2-layer MLP learning the same
// random teacher from the same deterministic data, with ZeRO-1 Adam, but the math runs on the
// device and the gradient sum goes through NCCL.
//
//   state                        where it lives                    protected as
//   params (float, full)         device + host mirror              replicated
//   master (double, shard)       device + host mirror              sharded
//   adam_m, adam_v (float, shard) device + host mirror             sharded
//   adam_t (int64)               host                              envelope
//
// It uses only the public API (flashrec.hpp) and the gpu headers. Until the runtime can
// protect device memory itself (docs/gpu.md, "What the runtime still needs"), the device
// state is mirrored on the host: update() copies the new shard back (D2H), and whenever the
// runtime may have restored the mirrors (a repair, or a step index that does not follow the
// last one) they are uploaded again (H2D) before the step runs.
//
// Failures: NCCL cannot see a dead peer. A watcher thread asks ULFM which members of the DP
// group failed (MPIX_Comm_get_failed, no communication) and sets the NCCL abort flag, so a
// collective in flight aborts within milliseconds; a deadline (trainer.nccl_timeout_ms, keep
// it below detection.hang_timeout_ms) catches what ULFM does not report (a hung peer). The
// step's own MPI collective (step.allreduce of the loss) then sees the failure and abandons
// the step, and the loop repairs the job; the next step rebuilds NCCL from the new DP group.
//
// trainer: keys as examples/mlp, plus nccl_timeout_ms (default 5000) and reduction:
// "ordered" (default: NCCL all-gather + sum in DP-rank order, bitwise independent of where
// the ranks run) or "allreduce" (ncclAllReduce: faster, its summation order is NCCL's).
// Prints the loss and, at the end, exactly one line `final_checksum=<hex>`.
#include <flashrec/flashrec.hpp>
#include <flashrec/gpu/cuda_check.hpp>
#include <flashrec/gpu/device.hpp>
#include <flashrec/gpu/handles.hpp>
#include <flashrec/gpu/nccl_comm.hpp>
#include <mpi-ext.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mlp_kernels.hpp"

namespace gpu = flashrec::gpu;
using mlp_cuda::Shape;

namespace {

// Same teacher/initialisation as examples/mlp (host code, so the same bits).
std::vector<float> random_mlp(const Shape& s, std::uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(s.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
        const bool first_layer = i < s.w2();
        p[i] = normal(rng) * scale / std::sqrt(static_cast<float>(first_layer ? s.in : s.hidden));
    }
    return p;
}

// Sets `flag` as soon as this process learns (from ULFM, locally) that a member of the
// watched communicator failed. The trainer-side stand-in for the abort flag the runtime
// should own. watch() is collective over the communicator (it keeps a duplicate, so the
// runtime may free its own at any time).
class PeerFailureWatcher {
public:
    explicit PeerFailureWatcher(std::atomic<bool>& flag) : flag_(flag), thread_([this] { run(); }) {}
    PeerFailureWatcher(const PeerFailureWatcher&) = delete;
    PeerFailureWatcher& operator=(const PeerFailureWatcher&) = delete;
    ~PeerFailureWatcher() {
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        cv_.notify_all();
        thread_.join();
        if (watched_ != MPI_COMM_NULL) MPI_Comm_free(&watched_);
    }

    // Watches `comm` from now on, and clears the flag (under the lock: a failure seen after
    // this call is one of `comm`'s).
    void watch(MPI_Comm comm) {
        MPI_Comm copy = MPI_COMM_NULL;
        check_mpi(MPI_Comm_dup(comm, &copy), "MPI_Comm_dup(dp)");
        MPI_Comm_set_errhandler(copy, MPI_ERRORS_RETURN);
        std::lock_guard lock(mutex_);
        if (watched_ != MPI_COMM_NULL) MPI_Comm_free(&watched_);
        watched_ = copy;
        flag_.store(false, std::memory_order_release);
    }

private:
    // The typed error the runtime would throw, so the step loop treats it like its own.
    static void check_mpi(int rc, const char* what) {
        if (rc == MPI_SUCCESS) return;
        int error_class = rc;
        MPI_Error_class(rc, &error_class);
        int rank = -1;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING)
            throw flashrec::ProcessFailure(rc, error_class, what, "dp", rank, "a peer failed");
        if (error_class == MPIX_ERR_REVOKED)
            throw flashrec::CommRevoked(rc, error_class, what, "dp", rank, "revoked");
        throw flashrec::MpiError(rc, error_class, what, "dp", rank, "MPI error");
    }

    void run() {
        std::unique_lock lock(mutex_);
        while (!stop_) {
            if (watched_ != MPI_COMM_NULL) {
                MPI_Group failed = MPI_GROUP_NULL;
                if (MPIX_Comm_get_failed(watched_, &failed) == MPI_SUCCESS) {
                    int count = 0;
                    MPI_Group_size(failed, &count);
                    MPI_Group_free(&failed);
                    if (count > 0) flag_.store(true, std::memory_order_release);
                }
            }
            cv_.wait_for(lock, std::chrono::milliseconds(5), [this] { return stop_; });
        }
    }

    std::atomic<bool>& flag_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool stop_ = false;
    MPI_Comm watched_ = MPI_COMM_NULL;
    std::thread thread_;
};

template <class T>
void upload(T* device, const std::vector<T>& host, std::size_t first, std::size_t count, cudaStream_t stream) {
    if (count == 0) return;
    FLASHREC_CUDA_CHECK(cudaMemcpyAsync(device, host.data() + first, count * sizeof(T),
                                        cudaMemcpyHostToDevice, stream));
}

template <class T>
void download(std::vector<T>& host, std::size_t first, const T* device, std::size_t count,
              cudaStream_t stream) {
    if (count == 0) return;
    FLASHREC_CUDA_CHECK(cudaMemcpyAsync(host.data() + first, device, count * sizeof(T),
                                        cudaMemcpyDeviceToHost, stream));
}

}  // namespace

int main(int argc, char** argv) {
    // Before the Runtime: every process (hot spares too, which stay inside the Runtime's
    // constructor until they are needed) leaves at once, and the job ends.
    if (gpu::device_count_or_zero() == 0) {
        std::fprintf(stderr, "mlp_cuda_trainer: no CUDA device\n");
        return 77;
    }
    try {
        flashrec::Runtime rt(argc, argv);
        const Shape shape{static_cast<std::size_t>(rt.param_int("model.input", 32)),
                          static_cast<std::size_t>(rt.param_int("model.hidden", 64)),
                          static_cast<std::size_t>(rt.param_int("model.output", 8))};
        const auto batch = static_cast<std::size_t>(rt.param_int("batch_per_rank", 16));
        const double lr = rt.param_double("lr", 3e-3);
        const std::int64_t log_every = rt.param_int("log_every", 10);
        const auto nccl_timeout = std::chrono::milliseconds(rt.param_int("nccl_timeout_ms", 5000));
        const std::string reduction = rt.param_string("reduction", "ordered");
        if (reduction != "ordered" && reduction != "allreduce")
            throw flashrec::ConfigError("train.yaml", 0, "trainer.reduction",
                                        "must be 'ordered' or 'allreduce', got '" + reduction + "'");
        const bool ordered = reduction == "ordered";
        const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

        const int device = gpu::device_for_local_rank(gpu::local_rank_from_env());
        FLASHREC_CUDA_CHECK(cudaSetDevice(device));
        gpu::Stream stream = gpu::Stream::create();
        cudaStream_t s = stream.get();

        // Host state and its protection: exactly the CPU trainer's.
        const std::vector<float> teacher = random_mlp(shape, rt.seed() ^ 0x7eac4e5ULL, 2.0f);
        std::vector<float> params = random_mlp(shape, rt.seed(), 1.0f);
        const auto [first, last] = rt.shard_range(params.size());
        const std::size_t shard = last - first;
        std::vector<double> master(params.begin() + static_cast<std::ptrdiff_t>(first),
                                   params.begin() + static_cast<std::ptrdiff_t>(last));
        std::vector<float> adam_m(shard, 0.0f), adam_v(shard, 0.0f);
        std::vector<std::int64_t> adam_t(1, 0);
        rt.protect("params", std::span(params), flashrec::Redundancy::replicated);
        rt.protect("master", std::span(master), flashrec::Redundancy::sharded);
        rt.protect("adam_m", std::span(adam_m), flashrec::Redundancy::sharded);
        rt.protect("adam_v", std::span(adam_v), flashrec::Redundancy::sharded);
        rt.protect("adam_t", std::span(adam_t), flashrec::Redundancy::envelope);

        // Device state and scratch.
        const std::size_t n = params.size();
        const auto floats = [](std::size_t count) { return gpu::DeviceBuffer::allocate(count * sizeof(float)); };
        gpu::DeviceBuffer d_teacher = floats(n), d_params = floats(n), d_grads = floats(n),
                          d_sum = floats(n), d_m = floats(shard), d_v = floats(shard),
                          d_master = gpu::DeviceBuffer::allocate(shard * sizeof(double)),
                          d_x = floats(batch * shape.in), d_y = floats(batch * shape.out),
                          d_h = floats(batch * shape.hidden), d_out = floats(batch * shape.out),
                          d_dout = floats(batch * shape.out), d_da = floats(batch * shape.hidden),
                          d_loss = gpu::DeviceBuffer::allocate(batch * sizeof(double)),
                          d_teacher_h = floats(batch * shape.hidden), d_gathered;
        upload(d_teacher.as<float>(), teacher, 0, n, s);

        std::atomic<bool> nccl_abort{false};
        PeerFailureWatcher watcher(nccl_abort);
        gpu::NcclComm nccl;
        const gpu::NcclOptions nccl_options{.abort_flag = &nccl_abort, .timeout = nccl_timeout, .device = device};

        std::vector<float> x;
        std::vector<double> sample_loss(batch);
        const float norm = 1.0f / static_cast<float>(batch * static_cast<std::size_t>(rt.dp_size()));
        double first_loss = -1, last_loss = -1;
        std::int64_t expected_index = -1;  // anything else: the runtime restored the mirrors

        for (auto step : rt.steps()) {
            double local_loss = 0;
            bool gpu_ok = true;
            try {
                // After a repair: NCCL from the new DP group, and the restored state to the device.
                const MPI_Comm dp = rt.dp_comm();
                bool repaired = false;
                if (!nccl.built_from(dp)) {
                    nccl.abort();
                    watcher.watch(dp);  // collective over dp; clears the abort flag
                    nccl = gpu::NcclComm::create(dp, "dp", nccl_options);
                    const std::size_t need = ordered ? n * static_cast<std::size_t>(nccl.size()) : 0;
                    if (d_gathered.size() < need * sizeof(float)) d_gathered = floats(need);
                    repaired = true;
                }
                if (repaired || step.index() != expected_index) {
                    upload(d_params.as<float>(), params, 0, n, s);
                    upload(d_master.as<double>(), master, 0, shard, s);
                    upload(d_m.as<float>(), adam_m, 0, shard, s);
                    upload(d_v.as<float>(), adam_v, 0, shard, s);
                }

                // The batch of (step, dp rank): the CPU trainer's data, on the host, then uploaded.
                std::mt19937_64 rng(step.data_seed());
                std::normal_distribution<float> normal(0.0f, 1.0f);
                x.resize(batch * shape.in);
                for (auto& v : x) v = normal(rng);
                upload(d_x.as<float>(), x, 0, x.size(), s);
                FLASHREC_CUDA_CHECK(mlp_cuda::forward(shape, d_teacher.as<float>(), d_x.as<float>(),
                                                      d_teacher_h.as<float>(), d_y.as<float>(), batch, s));

                // Forward, loss, backward.
                FLASHREC_CUDA_CHECK(mlp_cuda::forward(shape, d_params.as<float>(), d_x.as<float>(),
                                                      d_h.as<float>(), d_out.as<float>(), batch, s));
                FLASHREC_CUDA_CHECK(mlp_cuda::output_and_hidden_error(
                    shape, d_params.as<float>(), d_h.as<float>(), d_out.as<float>(), d_y.as<float>(),
                    d_dout.as<float>(), d_da.as<float>(), d_loss.as<double>(), batch, s));
                FLASHREC_CUDA_CHECK(mlp_cuda::parameter_gradients(shape, d_x.as<float>(), d_h.as<float>(),
                                                                  d_dout.as<float>(), d_da.as<float>(),
                                                                  d_grads.as<float>(), batch, s));

                // Gradient sum over the DP group (NCCL).
                if (ordered) {
                    nccl.allgather(d_grads.as<float>(), d_gathered.as<float>(), n, s);
                    FLASHREC_CUDA_CHECK(mlp_cuda::ordered_sum(d_gathered.as<float>(), nccl.size(), n,
                                                              d_sum.as<float>(), s));
                } else {
                    nccl.allreduce_sum(d_grads.as<float>(), n, s);
                    FLASHREC_CUDA_CHECK(cudaMemcpyAsync(d_sum.data(), d_grads.data(), n * sizeof(float),
                                                        cudaMemcpyDeviceToDevice, s));
                }
                download(sample_loss, 0, d_loss.as<double>(), batch, s);
                stream.synchronize();
                for (double l : sample_loss) local_loss += l;  // in sample order: deterministic
            } catch (const gpu::NcclError& e) {
                if (!e.peer_failure()) throw;
                gpu_ok = false;
            } catch (const flashrec::ProcessFailure&) {
                gpu_ok = false;
            } catch (const flashrec::CommRevoked&) {
                gpu_ok = false;
            }
            expected_index = step.index() + 1;

            // The runtime's own collective: if a peer died, it sees it and abandons the step, so
            // update() below does nothing and the loop repairs the job.
            std::vector<float> loss_sum{static_cast<float>(local_loss)};
            step.allreduce(loss_sum);
            if (!gpu_ok && !step.abandoned())
                throw flashrec::Error("NCCL failed but no process did: not a failure flashrec recovers from");

            step.update([&] {
                const auto t = ++adam_t[0];
                const mlp_cuda::AdamStep a{norm, lr, beta1, beta2, eps,
                                           1 - std::pow(beta1, static_cast<double>(t)),
                                           1 - std::pow(beta2, static_cast<double>(t))};
                FLASHREC_CUDA_CHECK(mlp_cuda::adam(a, d_sum.as<float>() + first, d_m.as<float>(),
                                                   d_v.as<float>(), d_master.as<double>(),
                                                   d_params.as<float>() + first, shard, s));
                // The new state back into the protected host mirrors (inside update: the only
                // place protected state may change).
                download(master, 0, d_master.as<double>(), shard, s);
                download(adam_m, 0, d_m.as<float>(), shard, s);
                download(adam_v, 0, d_v.as<float>(), shard, s);
                download(params, first, d_params.as<float>() + first, shard, s);
                stream.synchronize();
            });
            step.allgather(params);
            if (!step.abandoned()) upload(d_params.as<float>(), params, 0, n, s);

            const double mean_loss = loss_sum[0] * norm;
            step.report_loss(mean_loss);
            if (step.abandoned()) continue;
            if (first_loss < 0) first_loss = mean_loss;
            last_loss = mean_loss;
            if (rt.is_leader() && (step.index() % log_every == 0 || step.index() + 1 == rt.total_steps()))
                std::printf("step %lld loss %.6f\n", static_cast<long long>(step.index()), mean_loss);
        }
        stream.synchronize();
        try {
            nccl.finalize();  // collective; bounded by the deadline
        } catch (const gpu::NcclError& e) {
            std::fprintf(stderr, "mlp_cuda_trainer: NCCL finalize: %s\n", e.what());
        }
        const std::string checksum = rt.state_checksum();
        if (rt.is_leader()) {
            std::printf("loss first %.6f last %.6f\n", first_loss, last_loss);
            std::printf("final_checksum=%s\n", checksum.c_str());
        }
        std::fflush(stdout);
    } catch (const flashrec::ConfigError& e) {
        std::fprintf(stderr, "mlp_cuda_trainer: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mlp_cuda_trainer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
