// flashrec: the one header a trainer includes.
//
//   flashrec::Runtime rt(argc, argv);                 // MPI, train.yaml, roles, spares
//   rt.protect("master", master_shard, flashrec::Redundancy::sharded);
//   for (auto step : rt.steps()) {
//       auto batch = make_batch(step.data_seed());    // data = f(step, dp rank, seed)
//       ... forward/backward ...
//       step.reduce_scatter(grads, grad_shard);       // fixed summation order by role
//       step.update([&] { adam(master_shard, grad_shard); });
//       step.allgather(params);
//   }
//
// Tensor- and pipeline-parallel trainers exchange through the step too (examples/gpt):
//       step.tp_allreduce(partial);                   // Megatron's sums, fixed tp order
//       step.pp_send(activations, stage + 1);         // GPipe's exchanges between stages
//       step.reduce_scatter(grads, flashrec::Reduce::mean);  // ZeRO-1 in place: my part of the mean
//
// Failures are handled inside the loop: when a peer dies, the current step is abandoned
// (collectives return, update() does not run), the loop repairs the job, restores every
// protected buffer to the last step that is complete everywhere, and continues from the
// step after it. A trainer must therefore change protected state only inside update() and
// allgather(), and keep no other state across steps that it does not protect.
//
// GPU path (built with CUDA, docs/gpu.md): protected buffers may live in device memory
// (protect() finds out where each one lives); snapshots of them are copied on the GPU's own
// stream into pinned shared memory, and restores copy back. reduce_scatter / allgather /
// allreduce given device pointers go through NCCL, with the same fixed summation order. Tell
// the runtime the stream the trainer's kernels run on, so that a snapshot is ordered after the
// optimizer that produced it:
//
//   rt.set_compute_stream(stream);                    // a cudaStream_t
//   rt.protect("master", std::span(d_master, n), flashrec::Redundancy::sharded);  // device memory
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "flashrec/errors.hpp"
#include "flashrec/types.hpp"

namespace flashrec {

// The library's version, "major.minor.patch".
const char* version();

class Runtime;

// One iteration of the training loop.
class Step {
public:
    std::int64_t index() const { return index_; }
    // Seed of this step's data for this DP rank: a pure function of (seed, step, dp rank), so
    // a replayed step sees exactly the same data.
    std::uint64_t data_seed() const;

    // Sums `grads` over the DP group in a fixed order (by dp coordinate, whatever process
    // holds each role) and leaves this role's shard of the sum in `shard`
    // (size = Runtime::shard_range(grads.size()) length). The ZeRO-1 gradient step.
    // With CUDA, `grads` and `shard` may both be device memory: NCCL moves the parts, the
    // sum runs on the compute stream in the same order (bitwise the CPU path's result).
    // These three return once the data movement is done; device results are ready for work
    // enqueued later on the compute stream.
    void reduce_scatter(std::span<const float> grads, std::span<float> shard);
    // Gathers every DP role's shard of `full` (this role's part already in place) into all.
    void allgather(std::span<float> full);
    // reduce_scatter + allgather: the full gradient sum, on every DP peer, in fixed order.
    void allreduce(std::span<float> data);
    // The same with Reduce::mean: the sum divided by dp_size(). Host memory only for mean (a
    // device buffer with Reduce::mean is an Error; Reduce::sum goes through NCCL as above).
    void reduce_scatter(std::span<const float> grads, std::span<float> shard, Reduce how);
    void allreduce(std::span<float> data, Reduce how);
    // In place: this role's part of the DP sum (or mean) lands in grads[shard_range(n)], the
    // rest of `grads` is left as it was. No shard buffer, no copy loop (ZeRO-1).
    void reduce_scatter(std::span<float> grads, Reduce how = Reduce::sum);

    // Tensor- and pipeline-parallel collectives of this role's TP / PP group, with the DP
    // ones' failure semantics: a failed or revoked peer abandons the step (they return at
    // once from then on, their outputs unspecified). Host memory only (device memory is an
    // Error). Fixed order, so every peer gets the same bits wherever its roles run:
    // Sums `data` over the TP group in tp order; every TP peer ends with the same bits.
    void tp_allreduce(std::span<float> data);
    // Concatenates every TP peer's `part` (all the same size) in tp order into `full`.
    void tp_allgather(std::span<const float> part, std::span<float> full);
    // Sends `data` to / receives `data` from pipeline stage `stage` of this role's PP group
    // (the same dp and tp). Blocking; messages between two stages arrive in the order sent.
    void pp_send(std::span<const float> data, int stage);
    void pp_recv(std::span<float> data, int stage);

    // Abandons this step on purpose, e.g. when the trainer's own MPI call on tp_comm() or
    // pp_comm() returned an error: every peer is woken (communicators revoked), the step's
    // remaining collectives return at once, update() is skipped, and the loop repairs the
    // job and restores the newest version complete everywhere, as after a failure. `why`
    // goes to the log. Does nothing if the step is already abandoned.
    void abandon(const std::string& why);

    // Runs `mutate` (the optimizer) after the one synchronization point: the previous step's
    // snapshot is committed everywhere it is needed. Does nothing if the step was abandoned.
    template <class F>
    void update(F&& mutate) {
        if (begin_update()) {
            mutate();
            end_update();
        }
    }

    // Reports this step's loss (rank-local); the launcher's progress view shows DP rank 0's.
    void report_loss(double loss);
    // True once a failure abandoned this step; the loop will recover when the body returns.
    bool abandoned() const;

private:
    friend class StepRange;
    Step(Runtime* rt, std::int64_t index) : rt_(rt), index_(index) {}
    bool begin_update();
    void end_update();

    Runtime* rt_;
    std::int64_t index_;
};

// Iterates the job's steps; recovery happens in its increment.
class StepRange {
public:
    class iterator {
    public:
        Step operator*() const;
        iterator& operator++();
        bool operator!=(const iterator& other) const { return index_ != other.index_; }

    private:
        friend class StepRange;
        iterator(Runtime* rt, std::int64_t index) : rt_(rt), index_(index) {}
        Runtime* rt_;
        std::int64_t index_;
    };
    iterator begin();
    iterator end();

private:
    friend class Runtime;
    explicit StepRange(Runtime* rt) : rt_(rt) {}
    static Step make_step(Runtime* rt, std::int64_t index) { return Step(rt, index); }
    Runtime* rt_;
};

class Runtime {
public:
    // Initializes MPI (MPI_THREAD_MULTIPLE), reads the train.yaml named by `--config <file>`
    // in argv or by FLASHREC_CONFIG, takes fault specs from `--fault <spec>` options, and
    // assigns this process its role. A hot spare stays inside this constructor until it is
    // given a dead role; one that is never needed exits the process here at the end of the job.
    Runtime(int& argc, char**& argv);
    Runtime(int& argc, char**& argv, const std::string& config_path);
    ~Runtime();
    Runtime(const Runtime&) = delete;
    Runtime& operator=(const Runtime&) = delete;

    Role role() const;
    // This role's slot on its node: which of the node's GPUs it uses (docs/gpu.md, "The
    // replacement's GPU"), e.g. gpu::device_for_local_rank(rt.local_slot()). At the start a
    // process's index among the job's processes on its node; a replacement gets a slot no live
    // process of its node holds (the dead role's GPU when it died on that node, else the spare's
    // own). Ask after the constructor, before allocating device memory.
    int local_slot() const;
    int dp_size() const;
    int tp_size() const;
    int pp_size() const;
    // Communicators of this role's groups, ordered by role. They are replaced by every
    // repair: ask again each step, never keep one across steps.
    MPI_Comm dp_comm() const;
    MPI_Comm tp_comm() const;
    MPI_Comm pp_comm() const;
    MPI_Comm work_comm() const;

    // Values from train.yaml's `trainer:` section (dotted keys for nested maps). Without a
    // default, a missing key is a ConfigError naming the key.
    std::int64_t param_int(const std::string& key) const;
    std::int64_t param_int(const std::string& key, std::int64_t fallback) const;
    double param_double(const std::string& key) const;
    double param_double(const std::string& key, double fallback) const;
    std::string param_string(const std::string& key, const std::string& fallback) const;
    std::uint64_t seed() const;
    std::int64_t total_steps() const;

    // This DP role's part [first, last) of an array of `count` elements (ZeRO-1 sharding).
    ShardRange shard_range(std::size_t count) const;

    // Registers a buffer flashrec protects. Register everything before the loop starts;
    // the memory must stay valid until the Runtime is destroyed. With CUDA the buffer may be
    // device (or managed) memory, all of it on one device: it is recognized when this process
    // already uses CUDA (a context is current or a device's primary context is active), which
    // an allocation with cudaMalloc makes so; host buffers stay on the CPU path unchanged.
    void protect(const std::string& name, void* data, std::size_t bytes, DType type,
                 Redundancy kind);
    template <class T>
    void protect(const std::string& name, std::span<T> data, Redundancy kind) {
        protect(name, data.data(), data.size_bytes(), dtype_of<std::remove_const_t<T>>(), kind);
    }

    StepRange steps() { return StepRange(this); }

    // The CUDA stream (a cudaStream_t, as void* to keep this header CUDA-free) on which the
    // trainer's kernels run, the optimizer's included; nullptr is CUDA's default stream.
    // Snapshots of device buffers are ordered after the work enqueued on it when a step ends,
    // restores after all work enqueued on it, and NCCL collectives run on it. Call it before
    // the loop (and again if the stream changes). Throws flashrec::Error when flashrec was
    // built without CUDA.
    void set_compute_stream(void* cuda_stream);
    // Whether protect() found buffer `name` in device memory (false on the CPU path).
    bool on_device(const std::string& name) const;
    // How snapshots read this process's state: "host" (memcpy), "cuda" (cudaMemcpyAsync from
    // device memory into pinned shared memory), or "none" (protection off, or not started).
    std::string snapshot_copier() const;

    // XXH3-64 over every protected buffer of every role, in role order, as 16 hex digits
    // (device buffers are copied to the host to be hashed, after the compute stream's work).
    // Collective over the active ranks. Runs compare with it.
    std::string state_checksum();
    // True on exactly one process (role 0): where a trainer prints job-wide lines.
    bool is_leader() const;

    struct Impl;

private:
    friend class Step;
    friend class StepRange;
    std::int64_t loop_start();
    std::int64_t loop_next(std::int64_t index);
    std::unique_ptr<Impl> impl_;
};

}  // namespace flashrec
