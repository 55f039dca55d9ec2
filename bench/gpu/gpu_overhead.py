#!/usr/bin/env python3
"""GPU protection overhead: the CUDA example trainer (examples/mlp_cuda) with protection off vs
on, in the same run, alternating, at several rank counts, device-state sizes and step kinds.

  gpu_overhead.py --build BUILD [--ranks 1 2] [--state-mib 64 1024] [--device-ms 0 20]
                  [--hash gpu host] [--pairs 2] [--steps 30] [--json OUT]
  gpu_overhead.py --from-json OUT      (print an earlier run's table again; runs nothing)

The state: trainer.extra_device_mib MiB of device memory per rank (a sharded EMA buffer updated
every step), beside the small MLP's own state. Step kinds (--device-ms): 0 is the MLP's kernels
and nothing else; N > 0 adds a kernel that keeps the compute stream busy for N ms per step
(trainer.device_ms), standing for a model's compute, which the snapshot's D2H copy (its own
stream, into pinned shared memory) can overlap. With ranks > 1 all ranks share the one GPU
(FLASHREC_GPU_SHARED=1; NCCL over sockets on loopback, NCCL_SOCKET_IFNAME=lo) and every rank's
snapshot is also sent to its ring successor over MPI (TCP loopback), as on the CPU path.

Where the snapshot's checksums are computed (--hash, both by default): `gpu` is
protection.device_hash true (a kernel digests the device state while it is copied, the host
reads none of the landed bytes: docs/gpu.md, "The hash on the GPU"), `host` is
protection.device_hash false (the host hashes the landed bytes with XXH3-64: the path before).
One row per hash; the protection-off runs are shared by them.

For each (ranks, state, step kind): `pairs` x (off, on per hash) runs, alternating. Every row prints
  - the median step time off and on, and their ratio;
  - the serial bound: (step_off + state / cudaMemcpy D2H pinned) / step_off, the ratio if the
    snapshot's copy did not overlap the step at all and ran at the copy engine's speed;
  - the exposed wait at the step loop's sync point (median per step, role 0);
  - the snapshot: mean wall time per snapshot; its D2H throughput on the GPU's clock (job_stats
    snapshot_d2h_GBps: the copier's chunks from when the copy stream could start, after the
    state was ready, to the last byte); the own state's copy throughput of the pipeline
    (job_stats snapshot_copy_GBps: bytes / wall time of D2H + hash, the hash of a chunk
    overlapping the D2H of the next); replication GB/s (ranks > 1);
  - references measured in the same run by bench_cuda_copy for the same size: one
    cudaMemcpy D2H into pinned (cudaMallocHost) and into pageable memory, and D2H in
    protection.chunk_bytes pieces with an event each (as the snapshot copier enqueues it); the
    GPU hash's kernel alone (cuda_block_hash_GBps) and the host's XXH3-64 and block checksum
    (host_*_GBps, what a restore verifies with);
  - the issue-32 target for the gpu rows: the snapshot's copy+hash throughput at >= 80 % of
    cudaMemcpy D2H pinned (a 1 GiB snapshot at >= 80 % of the copy engine's rate);
  - whether the off and on runs ended with the same final_checksum (protection must not change
    results).
Role 0's figures (job_stats). The JSON (--json) is rewritten after every row, so an interrupted
run keeps what it measured.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # protection_overhead
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import frlib  # noqa: E402
from protection_overhead import med  # noqa: E402

DEFAULT_CHUNK_BYTES = 256 << 10  # protection.chunk_bytes default (runtime/src/config.cpp)


HASHES = ("gpu", "host")  # protection.device_hash true / false


def config_text(ranks, state_mib, steps, protected, device_ms, chunk_bytes=DEFAULT_CHUNK_BYTES, hash_on="gpu"):
    # One node: the ranks share the machine's GPU. Compute per step is fixed (model x batch);
    # the state is dominated by the "ema" device buffer.
    return f"""job: {{name: bench-gpu-{ranks}-{state_mib}-{device_ms}-{int(protected)}{hash_on}-{os.getpid()}, nodes: 1,
       ranks_per_node: {ranks}, dp: {ranks}, steps: {steps}, seed: 3}}
trainer: {{model: {{input: 256, hidden: 512, output: 16}}, batch_per_rank: 64, lr: 0.001,
          log_every: 1000, extra_device_mib: {state_mib}, device_ms: {device_ms}}}
protection: {{enabled: {str(protected).lower()}, chunk_bytes: {chunk_bytes}, device_hash: {str(hash_on == "gpu").lower()}}}
"""


def job_env(ranks):
    env = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": os.environ.get("NCCL_DEBUG", "WARN")}
    if ranks > 1:
        env["FLASHREC_GPU_SHARED"] = "1"
    return env


def run_job(build, ranks, path, timeout):
    """One run: its job_stats record and final checksum, or None (the output's tail printed)."""
    env = job_env(ranks)
    forward = [arg for name in env for arg in ("-x", name)]  # mpirun passes them to the ranks
    job = frlib.run_job(ranks, forward + [os.path.join(build, "examples", "mlp_cuda", "mlp_cuda_trainer"),
                                          "--config", path],
                        timeout=timeout, expect="^final_checksum=", env=env)
    stats = job.event("job_stats")
    if stats and job.checksum:
        return stats, job.checksum
    print(f"run failed ({path}, exit {job.returncode}):\n{job.output[-4000:]}", file=sys.stderr, flush=True)
    return None


def cuda_copy(build, nbytes, chunk_bytes):
    """bench_cuda_copy's figures for `nbytes`: (device line, {name: GB/s})."""
    exe = os.path.join(build, "bench", "gpu", "bench_cuda_copy")
    p = subprocess.run([exe, str(nbytes), str(chunk_bytes)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode == 77:
        print(p.stdout.strip(), file=sys.stderr)
        print("gpu_overhead.py: no CUDA device here: nothing measured", file=sys.stderr)
        sys.exit(77)
    figures = dict(re.findall(r"((?:cuda|host)_\w+_GBps)=([0-9.]+)", p.stdout))
    device = re.search(r"^device=.*$", p.stdout, re.M)
    if p.returncode != 0 or len(figures) < 4 or not device:
        sys.exit(f"bench_cuda_copy {nbytes} failed (exit {p.returncode}):\n{p.stdout[-2000:]}")
    return device.group(0), {k: float(v) for k, v in figures.items()}


def nvidia_smi():
    if not shutil.which("nvidia-smi"):
        return "nvidia-smi: not found"
    p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pcie.link.gen.max,"
                        "pcie.link.width.max", "--format=csv,noheader"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return "nvidia-smi: name, driver, memory, PCIe gen max, width max: " + p.stdout.strip()


def shm_free_bytes():
    st = os.statvfs("/dev/shm")
    return st.f_bavail * st.f_frsize


def shm_needed_bytes(ranks, state_mib):
    # Per rank: its own store (2 ping-pong slots) and, with ranks > 1, its predecessor's (2 slots).
    return ranks * (2 if ranks == 1 else 4) * (state_mib << 20)


def derive(r):
    """The bound and shares of a row (also recomputed by --from-json)."""
    off, state = r["step_ms_off"], r["state_bytes_per_rank"]
    r["d2h_floor_ms"] = state / (r["cuda_d2h_pinned_GBps"] * 1e9) * 1e3
    r["serial_ratio_bound"] = (off + r["d2h_floor_ms"]) / off
    r["snapshot_share_of_d2h_pinned"] = r["snapshot_GBps"] / r["cuda_d2h_pinned_GBps"]
    r["d2h_share_of_d2h_pinned"] = r["snapshot_d2h_GBps"] / r["cuda_d2h_pinned_GBps"]
    r.setdefault("hash", "host")  # rows measured before protection.device_hash existed
    r["meets_target"] = r["hash"] == "gpu" and r["snapshot_share_of_d2h_pinned"] >= 0.8


def print_table(meta, rows):
    print()
    for line in meta.get("device", []):
        print(line)
    print(f"{meta.get('pairs')} pairs of {meta.get('steps')} steps; protection.chunk_bytes {meta.get('chunk_bytes')}")
    print()
    print("| ranks | device MiB/rank | device ms/step | hash | off (ms) | on (ms) | ratio | serial bound "
          "| exposed wait (ms) | snapshot (ms) | snapshot D2H GB/s, GPU clock (% cudaMemcpy pinned) "
          "| snapshot copy+hash GB/s (% cudaMemcpy pinned) "
          "| replication GB/s | cudaMemcpy D2H pinned / pageable / chunked GB/s | GPU hash kernel GB/s "
          "| same checksum |")
    print("|" + "---|" * 16)
    for r in rows:
        repl = f"{r['replication_GBps']:.2f}" if r["ranks"] > 1 else "-"
        kernel = r.get("cuda_block_hash_GBps")
        kernel = f"{kernel:.1f}" if kernel else "-"
        print(f"| {r['ranks']} | {r['device_state_mib']} | {r['device_ms']} | {r['hash']} | {r['step_ms_off']:.2f} | "
              f"{r['step_ms_on']:.2f} | {r['ratio']:.3f} | {r['serial_ratio_bound']:.3f} | "
              f"{r['exposed_wait_ms']:.2f} | {r['snapshot_ms']:.1f} | "
              f"{r['snapshot_d2h_GBps']:.2f} ({100 * r['d2h_share_of_d2h_pinned']:.0f} %) | "
              f"{r['snapshot_GBps']:.2f} ({100 * r['snapshot_share_of_d2h_pinned']:.0f} %) | {repl} | "
              f"{r['cuda_d2h_pinned_GBps']:.2f} / {r['cuda_d2h_pageable_GBps']:.2f} / "
              f"{r['cuda_d2h_chunked_GBps']:.2f} | {kernel} | {'yes' if r['same_checksum'] else 'NO'} |")
    gpu_rows = [r for r in rows if r["hash"] == "gpu"]
    if gpu_rows:
        print()
        for r in gpu_rows:
            print(f"target (issue 32): ranks {r['ranks']} state {r['device_state_mib']} MiB device {r['device_ms']} ms: "
                  f"snapshot copy+hash at {100 * r['snapshot_share_of_d2h_pinned']:.0f} % of cudaMemcpy D2H pinned "
                  f"({'meets' if r['meets_target'] else 'misses'} >= 80 %)")


def load(path):
    with open(path) as f:
        data = json.load(f)
    return data["meta"], data["rows"]


def save(path, meta, rows):
    with open(path + ".tmp", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", help="build directory (required unless --from-json)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--state-mib", type=int, nargs="+", default=[64, 1024],
                    help="device state per rank (trainer.extra_device_mib)")
    ap.add_argument("--device-ms", type=int, nargs="+", default=[0, 20],
                    help="step kinds: 0 = the MLP's kernels only, N = plus N ms of GPU work per step")
    ap.add_argument("--hash", nargs="+", choices=HASHES, default=list(HASHES),
                    help="where the snapshot's checksums are computed: gpu (protection.device_hash true), host (false)")
    ap.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES,
                    help="protection.chunk_bytes (one D2H copy and one replication message), and the "
                    "piece of bench_cuda_copy's chunked D2H (default: the config's default, 256 KiB)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=300, help="per job (s)")
    ap.add_argument("--stop-after", type=float, metavar="S",
                    help="start no new row after S seconds (a lease's time limit); the rows left out are named")
    ap.add_argument("--json")
    ap.add_argument("--from-json", metavar="JSON", help="print the table of an earlier run's --json again "
                    "(bound and shares recomputed) and run nothing")
    a = ap.parse_args()
    if a.from_json:
        meta, rows = load(a.from_json)
        for r in rows:
            derive(r)
        print_table(meta, rows)
        return
    if not a.build:
        ap.error("--build is required")
    if any(n < 1 for n in a.ranks + a.state_mib + [a.chunk_bytes]) or any(n < 0 for n in a.device_ms) or a.pairs < 1:
        ap.error("--ranks, --state-mib and --chunk-bytes must be >= 1, --device-ms >= 0, --pairs >= 1")
    started = time.monotonic()
    meta = {"device": [], "pairs": a.pairs, "steps": a.steps, "chunk_bytes": a.chunk_bytes, "hashes": a.hash}
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in a.ranks:
            for mib in a.state_mib:
                need, free = shm_needed_bytes(ranks, mib), shm_free_bytes()
                if need > free:
                    print(f"ranks {ranks} state {mib} MiB: skipped, the snapshots need {need / 2**30:.1f} GiB "
                          f"of /dev/shm, {free / 2**30:.1f} GiB free", flush=True)
                    continue
                device, copy = cuda_copy(a.build, mib << 20, a.chunk_bytes)
                if not meta["device"]:
                    meta["device"] = [device, nvidia_smi(), f"/dev/shm free: {free / 2**30:.1f} GiB"]
                    for line in meta["device"]:
                        print(line, flush=True)
                for device_ms in a.device_ms:
                    if a.stop_after is not None and time.monotonic() - started > a.stop_after:
                        print(f"ranks {ranks} state {mib} MiB device {device_ms} ms: left out "
                              f"(--stop-after {a.stop_after:.0f} s passed)", flush=True)
                        continue
                    # The kinds of run: protection off, and on with each hash asked for.
                    kinds = ["off"] + list(a.hash)
                    paths = {}
                    for kind in kinds:
                        paths[kind] = os.path.join(tmp, f"g{ranks}-{mib}-{device_ms}-{kind}.yaml")
                        with open(paths[kind], "w") as f:
                            f.write(config_text(ranks, mib, a.steps, kind != "off", device_ms, a.chunk_bytes,
                                                kind if kind != "off" else "host"))
                    runs, sums = {kind: [] for kind in kinds}, set()
                    for _ in range(a.pairs):
                        for kind in kinds:
                            got = run_job(a.build, ranks, paths[kind], a.timeout)
                            if got is None:
                                break
                            runs[kind].append(got[0])
                            sums.add(got[1])
                        if got is None:
                            break
                    if got is None:
                        failed.append((ranks, mib, device_ms))
                        print(f"ranks {ranks} state {mib} MiB device {device_ms} ms: a run failed, row left out",
                              flush=True)
                        continue
                    off = med(runs["off"], "median_step_ms")
                    for hash_on in a.hash:
                        on_runs = runs[hash_on]
                        on = med(on_runs, "median_step_ms")
                        r = {
                            "ranks": ranks, "device_state_mib": mib, "device_ms": device_ms, "hash": hash_on,
                            "state_bytes_per_rank": on_runs[-1]["state_bytes"],
                            "shm_bytes_per_rank": on_runs[-1]["shm_bytes"],
                            "step_ms_off": off, "step_ms_on": on, "ratio": on / off,
                            "exposed_wait_ms": med(on_runs, "median_exposed_wait_ms"),
                            "snapshot_ms": med(on_runs, "snapshot_mean_ms"),
                            "protection_cpu_ms": med(on_runs, "snapshot_cpu_ms"),
                            "snapshot_d2h_GBps": med(on_runs, "snapshot_d2h_GBps"),
                            "snapshot_GBps": med(on_runs, "snapshot_copy_GBps"),
                            "replication_GBps": med(on_runs, "replication_GBps"),
                            # Own-state bytes the GPU hashed, per byte (1 on the gpu rows when it ran there).
                            "hashed_at_source_per_byte": med(on_runs, "hashed_at_source_per_byte"),
                            "same_checksum": len(sums) == 1, "checksums": sorted(sums),
                            "bytes": mib << 20, **copy}
                        derive(r)
                        rows.append(r)
                        print(f"ranks {ranks} state {mib:5d} MiB device {device_ms:3d} ms hash {hash_on}: step "
                              f"{off:8.2f} ms off, {on:8.2f} ms on, ratio {r['ratio']:.3f} (serial bound "
                              f"{r['serial_ratio_bound']:.3f}), exposed wait {r['exposed_wait_ms']:.2f} ms, snapshot "
                              f"{r['snapshot_ms']:.1f} ms, D2H {r['snapshot_d2h_GBps']:.2f} GB/s, copy+hash "
                              f"{r['snapshot_GBps']:.2f} GB/s, hashed on the GPU {r['hashed_at_source_per_byte']:.2f}/byte, "
                              f"replication {r['replication_GBps']:.2f} GB/s (cudaMemcpy D2H pinned "
                              f"{copy['cuda_d2h_pinned_GBps']:.2f}, pageable {copy['cuda_d2h_pageable_GBps']:.2f}, "
                              f"chunked {copy['cuda_d2h_chunked_GBps']:.2f} GB/s), same checksum: {r['same_checksum']} "
                              f"[{time.monotonic() - started:.0f} s]", flush=True)
                    if a.json:
                        save(a.json, meta, rows)
    print_table(meta, rows)
    print(f"\n{len(rows)} rows in {time.monotonic() - started:.0f} s")
    if a.json:
        save(a.json, meta, rows)
    if failed:
        sys.exit(f"rows with a failed run (ranks, MiB, device ms): {failed}")


if __name__ == "__main__":
    main()
