#!/usr/bin/env python3
"""Protection overhead: the example trainer with protection off vs on, in the same run,
alternating, at several rank counts, sharded-state sizes and step kinds.

  protection_overhead.py --build BUILD [--ranks 4 8] [--state-mib 8 256] [--pairs 3]
                         [--steps 30] [--device-ms 0 60] [--json OUT]

Step kinds (--device-ms): 0 is the CPU-bound step (the MLP's host compute and nothing else);
N > 0 is a device-like step: after its host compute the rank waits N ms without using a host
core (trainer.device_ms), as the host thread of a GPU trainer does while its kernels run.

For each (ranks, state, step kind): `pairs` x (off, on) runs, alternating so that machine noise
hits both alike. Every row prints
  - the median step time off and on, and their ratio;
  - the exposed wait at the sync point (median per step);
  - the protection thread's CPU time per snapshot (CLOCK_THREAD_CPUTIME_ID);
  - bytes touched per protected byte on the sender and per held byte on the holder, counted
    by the pipeline itself (flashrec::ft::SnapshotTiming), and the part hashed from cache;
  - local snapshot throughput (own state / copy+hash wall time, and / its time on the
    protection thread's CPU clock, i.e. without the time the nice thread waited for a core)
    and replication throughput (sent bytes / first send -> last transfer done, wall), means
    over every snapshot of the run;
  - memcpy and MPI point-to-point bandwidth of the same size, measured in the same run
    (bench_bandwidth), and the snapshot / replication throughput as a share of them;
  - for the CPU-bound step, a lower bound for the ratio: the step plus one copy of the state
    at memcpy speed plus one send of the payload at p2p speed, serial with the step (both
    cores are busy with the ranks' compute), and the measured ratio over that bound.
Role 0's figures (job_stats); on this VM every rank runs the same work.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
sys.path.insert(0, TOOLS)
import frlib  # noqa: E402


def config_text(ranks, state_mib, steps, protected, device_ms, extra_protection=""):
    nodes = max(1, ranks // 2)
    # Compute per step is fixed (model x batch); the state is dominated by the "ema" buffer.
    return f"""job: {{name: bench-prot-{ranks}-{state_mib}-{device_ms}-{int(protected)}-{os.getpid()}, nodes: {nodes}, ranks_per_node: {ranks // nodes},
       dp: {ranks}, steps: {steps}, seed: 3}}
trainer: {{model: {{input: 256, hidden: 512, output: 16}}, batch_per_rank: 64, lr: 0.001,
          log_every: 1000, extra_sharded_mib: {state_mib}, device_ms: {device_ms}}}
protection: {{enabled: {str(protected).lower()}, replicas: 1{extra_protection}}}
"""


def run_job(build, ranks, path, timeout):
    job = frlib.run_job(ranks, [os.path.join(build, "examples", "mlp_trainer"), "--config", path],
                        timeout=timeout, expect="^final_checksum=")
    stats = job.event("job_stats")
    if stats:
        return stats
    sys.exit(f"run failed:\n{job.output[-3000:]}")


def bandwidth(build, nbytes):
    out = subprocess.run([os.path.join(TOOLS, "fr-mpirun"), "-n", "2",
                          os.path.join(build, "bench", "bench_bandwidth"), str(nbytes)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    m = re.search(r"memcpy_GBps=([0-9.]+) mpi_p2p_GBps=([0-9.]+)", out)
    return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))


def med(runs, key):
    return statistics.median(r.get(key, float("nan")) for r in runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--state-mib", type=int, nargs="+", default=[8, 256])
    ap.add_argument("--device-ms", type=int, nargs="+", default=[0],
                    help="step kinds: 0 = CPU-bound, N = device-like (waits N ms off-core)")
    ap.add_argument("--chunk-bytes", help="protection.chunk_bytes (e.g. 256KiB); default: the config's")
    ap.add_argument("--thread-nice", type=int, help="protection.thread_nice; default: the config's")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json")
    a = ap.parse_args()
    extra = ""
    if a.chunk_bytes:
        extra += f", chunk_bytes: {a.chunk_bytes}"
    if a.thread_nice is not None:
        extra += f", thread_nice: {a.thread_nice}"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in a.ranks:
            for mib in a.state_mib:
                copy_gbps, p2p_gbps = bandwidth(a.build, mib << 20)
                for device_ms in a.device_ms:
                    paths = {}
                    for protected in (False, True):
                        paths[protected] = os.path.join(tmp, f"p{ranks}-{mib}-{device_ms}-{int(protected)}.yaml")
                        with open(paths[protected], "w") as f:
                            f.write(config_text(ranks, mib, a.steps, protected, device_ms, extra))
                    runs = {False: [], True: []}
                    for _ in range(a.pairs):
                        for protected in (False, True):
                            runs[protected].append(run_job(a.build, ranks, paths[protected], a.timeout))
                    off = med(runs[False], "median_step_ms")
                    on = med(runs[True], "median_step_ms")
                    on_runs = runs[True]
                    last = on_runs[-1]
                    state = last["state_bytes"]
                    payload = last["snapshot_sent_bytes"]  # per snapshot, to all successors
                    r = {
                        "ranks": ranks, "sharded_state_mib": mib, "device_ms": device_ms,
                        "step": "cpu" if device_ms == 0 else f"device {device_ms} ms",
                        "state_bytes_per_rank": state, "shm_bytes_per_rank": last["shm_bytes"],
                        "step_ms_off": off, "step_ms_on": on, "ratio": on / off,
                        "exposed_wait_ms": med(on_runs, "median_exposed_wait_ms"),
                        "snapshot_ms": med(on_runs, "snapshot_mean_ms"),
                        "protection_cpu_ms": med(on_runs, "snapshot_cpu_ms"),
                        "sender_touched_per_byte": med(on_runs, "sender_touched_per_byte"),
                        "holder_touched_per_byte": med(on_runs, "holder_touched_per_byte"),
                        "hashed_in_cache_per_byte": med(on_runs, "hashed_in_cache_per_byte"),
                        "snapshot_GBps": med(on_runs, "snapshot_copy_GBps"),
                        "snapshot_cpu_GBps": med(on_runs, "snapshot_copy_cpu_GBps"),
                        "replication_GBps": med(on_runs, "replication_GBps"),
                        "memcpy_GBps": copy_gbps, "mpi_p2p_GBps": p2p_gbps}
                    # Lower bound: one copy of the state at memcpy speed + one send of the
                    # payload at p2p speed, in series with the step.
                    floor_ms = state / (copy_gbps * 1e9) * 1e3 + payload / (p2p_gbps * 1e9) * 1e3
                    r["snapshot_floor_ms"] = floor_ms
                    r["cpu_ratio_bound"] = (off + floor_ms) / off if device_ms == 0 else None
                    r["ratio_over_bound"] = r["ratio"] / r["cpu_ratio_bound"] if device_ms == 0 else None
                    r["snapshot_share_of_memcpy"] = r["snapshot_GBps"] / copy_gbps
                    r["snapshot_cpu_share_of_memcpy"] = r["snapshot_cpu_GBps"] / copy_gbps
                    r["replication_share_of_p2p"] = r["replication_GBps"] / p2p_gbps
                    rows.append(r)
                    bound = (f", bound {r['cpu_ratio_bound']:.3f} (measured/bound {r['ratio_over_bound']:.3f})"
                             if device_ms == 0 else f", step/floor {off / floor_ms:.1f}x")
                    print(f"ranks {ranks:2d} state {mib:4d} MiB {r['step']}: step {off:8.2f} ms off, {on:8.2f} ms on, "
                          f"ratio {r['ratio']:.3f}{bound}, exposed wait {r['exposed_wait_ms']:.2f} ms, "
                          f"protection CPU {r['protection_cpu_ms']:.1f} ms/step, touched {r['sender_touched_per_byte']:.2f}"
                          f"/{r['holder_touched_per_byte']:.2f} per byte, snapshot {r['snapshot_GBps']:.2f} GB/s, "
                          f"replication {r['replication_GBps']:.2f} GB/s (memcpy {copy_gbps:.2f}, MPI p2p {p2p_gbps:.2f})",
                          flush=True)
    print()
    print("| ranks | sharded MiB | step | off (ms) | on (ms) | ratio | CPU bound | ratio/bound | exposed wait (ms) "
          "| prot. CPU ms/step | touched/byte sender | touched/byte holder | snapshot GB/s (% memcpy) "
          "| snapshot GB/s on CPU clock (% memcpy) | replication GB/s (% p2p) | memcpy GB/s | MPI p2p GB/s |")
    print("|" + "---|" * 17)
    for r in rows:
        bound = f"{r['cpu_ratio_bound']:.3f} | {r['ratio_over_bound']:.3f}" if r["device_ms"] == 0 else "- | -"
        print(f"| {r['ranks']} | {r['sharded_state_mib']} | {r['step']} | {r['step_ms_off']:.2f} | {r['step_ms_on']:.2f} | "
              f"{r['ratio']:.3f} | {bound} | {r['exposed_wait_ms']:.2f} | {r['protection_cpu_ms']:.1f} | "
              f"{r['sender_touched_per_byte']:.2f} | {r['holder_touched_per_byte']:.2f} | "
              f"{r['snapshot_GBps']:.2f} ({100 * r['snapshot_share_of_memcpy']:.0f} %) | "
              f"{r['snapshot_cpu_GBps']:.2f} ({100 * r['snapshot_cpu_share_of_memcpy']:.0f} %) | "
              f"{r['replication_GBps']:.2f} ({100 * r['replication_share_of_p2p']:.0f} %) | "
              f"{r['memcpy_GBps']:.2f} | {r['mpi_p2p_GBps']:.2f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
