#!/usr/bin/env python3
"""Protection overhead: the example trainer with protection off vs on, in the same run,
alternating, at several rank counts and sharded-state sizes.

  protection_overhead.py --build BUILD [--ranks 4 8] [--state-mib 8 256] [--pairs 3]
                         [--steps 30] [--json OUT]

For each (ranks, state): `pairs` x (off, on) runs, alternating so that machine noise hits both
alike. Reports the median step time of each, their ratio, the exposed wait at the sync point,
the snapshot's copy+replication time and throughput, and memcpy / MPI point-to-point bandwidth
of the same size measured in the same run (bench_bandwidth).
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


def config_text(ranks, state_mib, steps, protected):
    nodes = max(1, ranks // 2)
    # Compute per step is fixed (model x batch); the state is dominated by the "ema" buffer.
    return f"""job: {{name: bench-prot-{ranks}-{state_mib}-{int(protected)}-{os.getpid()}, nodes: {nodes}, ranks_per_node: {ranks // nodes},
       dp: {ranks}, steps: {steps}, seed: 3}}
trainer: {{model: {{input: 256, hidden: 512, output: 16}}, batch_per_rank: 64, lr: 0.001,
          log_every: 1000, extra_sharded_mib: {state_mib}}}
protection: {{enabled: {str(protected).lower()}, replicas: 1}}
"""


def run_job(build, ranks, path, timeout):
    cmd = [os.path.join(TOOLS, "fr-run"), "--timeout", str(timeout), "--expect", "^final_checksum=",
           "--", os.path.join(TOOLS, "fr-mpirun"), "-n", str(ranks),
           os.path.join(build, "examples", "mlp_trainer"), "--config", path]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for m in re.findall(r"flashrec-event: (\{.*\})$", p.stdout, re.M):
        e = json.loads(m)
        if e.get("event") == "job_stats":
            return e
    sys.exit(f"run failed:\n{p.stdout[-3000:]}")


def bandwidth(build, nbytes):
    out = subprocess.run([os.path.join(TOOLS, "fr-mpirun"), "-n", "2",
                          os.path.join(build, "bench", "bench_bandwidth"), str(nbytes)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    m = re.search(r"memcpy_GBps=([0-9.]+) mpi_p2p_GBps=([0-9.]+)", out)
    return (float(m.group(1)), float(m.group(2))) if m else (float("nan"), float("nan"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--state-mib", type=int, nargs="+", default=[8, 256])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in a.ranks:
            for mib in a.state_mib:
                paths = {}
                for protected in (False, True):
                    paths[protected] = os.path.join(tmp, f"p{ranks}-{mib}-{int(protected)}.yaml")
                    with open(paths[protected], "w") as f:
                        f.write(config_text(ranks, mib, a.steps, protected))
                runs = {False: [], True: []}
                for _ in range(a.pairs):
                    for protected in (False, True):
                        runs[protected].append(run_job(a.build, ranks, paths[protected], a.timeout))
                copy_gbps, p2p_gbps = bandwidth(a.build, mib << 20)
                off = statistics.median(r["median_step_ms"] for r in runs[False])
                on = statistics.median(r["median_step_ms"] for r in runs[True])
                last = runs[True][-1]
                snap_ms = statistics.median(r["snapshot_ms"] for r in runs[True])
                moved = last["snapshot_copied_bytes"] + last["snapshot_sent_bytes"]
                rows.append({
                    "ranks": ranks, "sharded_state_mib": mib, "state_bytes_per_rank": last["state_bytes"],
                    "shm_bytes_per_rank": last["shm_bytes"], "step_ms_off": off, "step_ms_on": on,
                    "ratio": on / off, "exposed_wait_ms": statistics.median(r["median_exposed_wait_ms"] for r in runs[True]),
                    "snapshot_ms": snap_ms, "snapshot_GBps": moved / (snap_ms / 1e3) / 1e9 if snap_ms else 0,
                    "memcpy_GBps": copy_gbps, "mpi_p2p_GBps": p2p_gbps})
                r = rows[-1]
                print(f"ranks {ranks:2d} state {mib:4d} MiB: step {off:8.2f} ms off, {on:8.2f} ms on, "
                      f"ratio {r['ratio']:.3f}, exposed wait {r['exposed_wait_ms']:.2f} ms, snapshot "
                      f"{snap_ms:.1f} ms ({r['snapshot_GBps']:.2f} GB/s; memcpy {copy_gbps:.2f}, "
                      f"MPI p2p {p2p_gbps:.2f} GB/s), /dev/shm {r['shm_bytes_per_rank'] / 2**20:.0f} MiB/rank",
                      flush=True)
    print()
    print("| ranks | sharded MiB | step off (ms) | step on (ms) | ratio | exposed wait (ms) | snapshot (ms) | snapshot GB/s | memcpy GB/s | MPI p2p GB/s | /dev/shm per rank (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['sharded_state_mib']} | {r['step_ms_off']:.2f} | {r['step_ms_on']:.2f} | "
              f"{r['ratio']:.3f} | {r['exposed_wait_ms']:.2f} | {r['snapshot_ms']:.1f} | {r['snapshot_GBps']:.2f} | "
              f"{r['memcpy_GBps']:.2f} | {r['mpi_p2p_GBps']:.2f} | {r['shm_bytes_per_rank'] / 2**20:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
