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
  - memory passes per protected byte, counted by the pipeline itself (SnapshotTiming): on the
    sender the pipeline's own (copy read + write, hashes from memory), then the same including
    the transport's read of the payload it sends; on the holder per held byte (MPI's write);
  - local snapshot throughput: own state / copy+hash time on the protection thread's CPU clock
    (without the time the nice thread waited for a core; wall-clock figure in the JSON);
  - replication throughput: sent bytes / (first send -> last transfer done), on the wall clock,
    and the same without the time the protection thread waited for a core in that window
    (schedstat run_delay: on a 2-core box with the ranks computing, the nice thread is runnable
    but not running for most of it); means over every snapshot of the run;
  - references from the same run (bench_bandwidth, 2 ranks): memcpy by one rank alone and by
    both at once (per rank: the ranks' snapshot threads copy at the same time), MPI point-to-
    point one way (the issue's reference) and both ways at once (per direction: a ring rank
    sends its payload and receives its predecessor's, and over TCP loopback its core pays both);
  - for the CPU-bound step two lower bounds for the ratio, serial with the step (the ranks'
    compute fills both cores): the issue's (one copy of the state at memcpy speed + one send of
    the payload at p2p speed) and the transport's (the copy at the both-ranks memcpy speed +
    the payload at the both-ways exchange speed, times the ranks that share a core), with the
    measured ratio over each;
  - over TCP (the supported transport) the kernel's own cost of loopback TCP, measured by
    bench_bandwidth with plain sockets and no MPI: CPU seconds of both ends per GB moved. From
    it, for the CPU-bound step, the kernel floor: the issue's copy term plus that cost for the
    payload each core's ranks send and receive (no software above the kernel can go below it),
    and its ratio to the issue's bound; and for every row the replication ceiling: with every
    rank moving its payload at once, `cores / (ranks x cost)` GB/s per rank, against p2p.
Role 0's figures (job_stats); on this VM every rank runs the same work.

  protection_overhead.py --build BUILD --every 1 2 4 8 16 auto [--ranks 2] [--state-mib 64 256]
                         [--steps 96] [--pairs 2] [--budget 0.03] [--max-every 64]

With --every, the protection.every table instead (issue 30): per (ranks, state) one run without
protection and one per k, alternating, `pairs` times. Each row: the mean step after the first
(under k > 1 the median hides the snapshotting steps) and its ratio to the run without
protection; the median step with and without a snapshot and their difference (what a snapshot
adds to its step); under auto the k it ended with; and the expected replay per failure at that
k, (k - 1) / 2 steps x the unprotected step ((k - 1) at worst; runtime::failure_cost's arithmetic).
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

# tools/fr-mpirun's BTLs when FLASHREC_BTL is unset: flashrec's supported transport.
SUPPORTED_BTL = "tcp,self"
# The BTLs of each mpi.transport (tools/fr-mpirun; shm adds the in-band failure detector).
TRANSPORT_BTL = {"tcp": SUPPORTED_BTL, "shm": "tcp,sm,self", "auto": "tcp,sm,self"}
# The issue's CPU-bound target: measured ratio <= this x its lower bound.
TARGET_OVER_BOUND = 1.15
# What each row records of bench_bandwidth's line.
BANDWIDTH_FIGURES = ("memcpy_GBps", "mpi_p2p_GBps", "memcpy_both_GBps", "mpi_exchange_GBps",
                     "tcp_GBps", "tcp_cpu_s_per_GB")


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
    """bench_bandwidth's figures (bench/bandwidth.cpp) as {name: value}; NaN for one it lacks."""
    out = subprocess.run([os.path.join(TOOLS, "fr-mpirun"), "-n", "2",
                          os.path.join(build, "bench", "bench_bandwidth"), str(nbytes)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    found = dict(re.findall(r"(\w+)=([0-9.]+)", next((l for l in out.splitlines() if l.startswith("bandwidth ")), "")))
    return {k: float(found.get(k, "nan")) for k in BANDWIDTH_FIGURES}


def med(runs, key):
    return statistics.median(r.get(key, float("nan")) for r in runs)


def derive(r, payload, cores):
    """The bounds and shares of a row (also recomputed by --from-json)."""
    state, off, cpu = r["state_bytes_per_rank"], r["step_ms_off"], r["device_ms"] == 0
    r["payload_bytes_per_rank"], r["cores"] = payload, cores
    # Ranks that share a core: their steps are already time-shared in `off`, and each of
    # their snapshots adds to that core's work, so every bound counts all of them.
    per_core = max(1.0, r["ranks"] / cores)
    # The issue's lower bound: one copy of the state at memcpy speed + one send of the payload
    # at p2p speed, in series with the step, for each rank on the core.
    floor_ms = per_core * (state / (r["memcpy_GBps"] * 1e9) * 1e3 + payload / (r["mpi_p2p_GBps"] * 1e9) * 1e3)
    # The transport's bound: the copy while both ranks copy, the payload at the both-ways speed
    # (each core sends and receives a payload).
    transport_floor_ms = per_core * (state / (r["memcpy_both_GBps"] * 1e9) * 1e3 +
                                     payload / (r["mpi_exchange_GBps"] * 1e9) * 1e3)
    # The kernel's estimate over TCP loopback: the issue's copy term, and for the payload what
    # the kernel alone spent to move it in bench_bandwidth (both ends, plain sockets, no MPI):
    # every rank sends a payload and receives one, so each core carries its ranks' transfers
    # whole. From it, the CPU per GB the transport may spend for the target (measured ratio
    # <= 1.15 x the issue's bound) to be reachable at all; and the replication ceiling: every
    # rank moving its payload at once on `cores` cores, `cores / (ranks x cost)` GB/s each.
    tcp_cost = r.get("tcp_cpu_s_per_GB", float("nan"))
    copy_ms = per_core * state / (r["memcpy_GBps"] * 1e9) * 1e3
    kernel_floor_ms = copy_ms + per_core * payload / 1e9 * tcp_cost * 1e3
    r["kernel_ratio_floor"] = (off + kernel_floor_ms) / off if cpu else None
    r["kernel_floor_over_bound"] = r["kernel_ratio_floor"] / ((off + floor_ms) / off) if cpu else None
    target_ms = (TARGET_OVER_BOUND * (off + floor_ms) / off - 1) * off
    r["transport_budget_s_per_GB"] = ((target_ms - copy_ms) / 1e3 / (per_core * payload / 1e9)
                                      if cpu and payload else None)
    r["replication_ceiling_GBps"] = cores / (r["ranks"] * tcp_cost) if tcp_cost > 0 else float("nan")
    r["replication_ceiling_share_of_p2p"] = r["replication_ceiling_GBps"] / r["mpi_p2p_GBps"]
    r["snapshot_floor_ms"] = floor_ms
    r["transport_floor_ms"] = transport_floor_ms
    r["cpu_ratio_bound"] = (off + floor_ms) / off if cpu else None
    r["ratio_over_bound"] = r["ratio"] / r["cpu_ratio_bound"] if cpu else None
    r["transport_ratio_bound"] = (off + transport_floor_ms) / off if cpu else None
    r["ratio_over_transport_bound"] = r["ratio"] / r["transport_ratio_bound"] if cpu else None
    r["snapshot_share_of_memcpy"] = r["snapshot_GBps"] / r["memcpy_GBps"]
    r["snapshot_cpu_share_of_memcpy"] = r["snapshot_cpu_GBps"] / r["memcpy_GBps"]
    r["snapshot_cpu_share_of_memcpy_both"] = r["snapshot_cpu_GBps"] / r["memcpy_both_GBps"]
    r["replication_share_of_p2p"] = r["replication_GBps"] / r["mpi_p2p_GBps"]
    r["replication_oncpu_share_of_p2p"] = r["replication_oncpu_GBps"] / r["mpi_p2p_GBps"]
    r["replication_oncpu_share_of_exchange"] = r["replication_oncpu_GBps"] / r["mpi_exchange_GBps"]


def print_table(rows):
    print()
    btls = sorted({r.get("btl", SUPPORTED_BTL) for r in rows})
    transports = sorted({r.get("transport", "tcp") for r in rows})
    print(f"MPI transport: mpi.transport {' / '.join(transports)} (Open MPI btl {' / '.join(btls)})"
          + ("" if set(btls) <= set(TRANSPORT_BTL.values()) else
             "  <- FLASHREC_BTL overrides the transport's BTLs: a labelled comparison"))
    print("| ranks | sharded MiB | step | off (ms) | on (ms) | ratio | issue's bound | ratio/bound "
          "| transport bound | ratio/transport bound | exposed wait (ms) | prot. CPU ms/step "
          "| passes/byte sender (incl. send) | passes/byte holder "
          "| snapshot GB/s on CPU clock (% memcpy alone / both) "
          "| replication GB/s wall | replication GB/s on CPU (% p2p / % exchange) "
          "| memcpy alone / both GB/s | MPI p2p / exchange GB/s "
          "| kernel TCP CPU s/GB (target's budget) | kernel estimate (/issue's bound) | replication ceiling GB/s (% p2p) |")
    print("|" + "---|" * 22)
    for r in rows:
        cpu = r["device_ms"] == 0
        bound = (f"{r['cpu_ratio_bound']:.3f} | {r['ratio_over_bound']:.3f} | {r['transport_ratio_bound']:.3f} | "
                 f"{r['ratio_over_transport_bound']:.3f}") if cpu else "- | - | - | -"
        print(f"| {r['ranks']} | {r['sharded_state_mib']} | {r['step']} | {r['step_ms_off']:.2f} | {r['step_ms_on']:.2f} | "
              f"{r['ratio']:.3f} | {bound} | {r['exposed_wait_ms']:.2f} | {r['protection_cpu_ms']:.1f} | "
              f"{r['sender_touched_per_byte']:.2f} ({r['sender_touched_incl_send_per_byte']:.2f}) | "
              f"{r['holder_touched_per_byte']:.2f} | "
              f"{r['snapshot_cpu_GBps']:.2f} ({100 * r['snapshot_cpu_share_of_memcpy']:.0f} / "
              f"{100 * r['snapshot_cpu_share_of_memcpy_both']:.0f} %) | {r['replication_GBps']:.2f} | "
              f"{r['replication_oncpu_GBps']:.2f} ({100 * r['replication_oncpu_share_of_p2p']:.0f} / "
              f"{100 * r['replication_oncpu_share_of_exchange']:.0f} %) | "
              f"{r['memcpy_GBps']:.2f} / {r['memcpy_both_GBps']:.2f} | {r['mpi_p2p_GBps']:.2f} / {r['mpi_exchange_GBps']:.2f} | "
              f"{kernel_columns(r)} |")


def kernel_columns(r):
    """The kernel-TCP columns; blank for rows over another transport or without the figure."""
    if r.get("btl", SUPPORTED_BTL) != SUPPORTED_BTL or not r.get("tcp_cpu_s_per_GB", 0) > 0:
        return "- | - | -"
    cpu = r["kernel_ratio_floor"] is not None
    budget = f" ({r['transport_budget_s_per_GB']:.3f})" if cpu else ""
    floor = f"{r['kernel_ratio_floor']:.3f} ({r['kernel_floor_over_bound']:.3f})" if cpu else "-"
    return (f"{r['tcp_cpu_s_per_GB']:.3f}{budget} | {floor} | {r['replication_ceiling_GBps']:.2f} "
            f"({100 * r['replication_ceiling_share_of_p2p']:.0f} %)")


def every_config_text(ranks, state_mib, steps, every, device_ms, budget, max_every=None):
    if every == "off":
        return config_text(ranks, state_mib, steps, False, device_ms)
    extra = f", every: {every}"
    if every == "auto":
        extra += f", overhead_budget: {budget}" + (f", max_every: {max_every}" if max_every else "")
    return config_text(ranks, state_mib, steps, True, device_ms, extra).replace(
        "name: bench-prot-", f"name: bench-every{every}-")


def every_table(a, tmp):
    """protection.every = k for each k of --every, against no protection, within one run."""
    rows = []
    kinds = ["off"] + a.every
    for ranks in a.ranks:
        for mib in a.state_mib:
            paths = {}
            for every in kinds:
                paths[every] = os.path.join(tmp, f"every-{ranks}-{mib}-{every}.yaml")
                with open(paths[every], "w") as f:
                    f.write(every_config_text(ranks, mib, a.steps, every, a.device_ms[0], a.budget, a.max_every))
            runs = {every: [] for every in kinds}
            for _ in range(a.pairs):
                for every in kinds:
                    runs[every].append(run_job(a.build, ranks, paths[every], a.timeout))
            off = med(runs["off"], "mean_step_ms")
            for every in a.every:
                rs = runs[every]
                mean = med(rs, "mean_step_ms")
                prot, unprot = med(rs, "protected_step_ms"), med(rs, "unprotected_step_ms")
                k = int(statistics.median(r["protection_every"] for r in rs))
                step = unprot if unprot == unprot else off  # NaN at k = 1: no unsnapshotted step
                row = {"ranks": ranks, "sharded_state_mib": mib, "every": every, "k": k,
                       "ks": [r["protection_every"] for r in rs], "step_ms_off": off, "step_ms_on": mean,
                       "ratio": mean / off, "protected_step_ms": prot, "unprotected_step_ms": unprot,
                       "exposed_ms": prot - unprot if unprot == unprot else prot - off,
                       "snapshots": med(rs, "snapshots"), "steps": a.steps,
                       "expected_replay_steps": (k - 1) / 2, "worst_replay_steps": k - 1,
                       "expected_replay_ms": (k - 1) / 2 * step, "worst_replay_ms": (k - 1) * step}
                rows.append(row)
                print(f"ranks {ranks} state {mib} MiB every {every}: k {row['ks']}, mean step {mean:.2f} ms "
                      f"(off {off:.2f}), ratio {row['ratio']:.3f}, snapshot adds {row['exposed_ms']:.2f} ms to its step, "
                      f"replay per failure {row['expected_replay_ms']:.1f} ms expected", flush=True)
    print()
    step_kind = "CPU-bound step" if a.device_ms[0] == 0 else f"device-like step ({a.device_ms[0]} ms)"
    print(f"protection.every, {a.pairs} run(s) each, {a.steps} steps, {step_kind}, ratios within this run "
          f"({os.cpu_count()} cores; a shared, loaded machine makes the absolute times noisy)")
    print("| ranks | sharded MiB | every | k (per run) | off: mean step (ms) | on: mean step (ms) | overhead ratio "
          "| step with / without a snapshot (ms) | snapshot adds (ms) | expected replay per failure: steps (ms) "
          "| worst: steps (ms) |")
    print("|" + "---|" * 11)
    for r in rows:
        print(f"| {r['ranks']} | {r['sharded_state_mib']} | {r['every']} | {'/'.join(map(str, r['ks']))} | "
              f"{r['step_ms_off']:.2f} | {r['step_ms_on']:.2f} | {r['ratio']:.3f} | "
              f"{r['protected_step_ms']:.2f} / {r['unprotected_step_ms']:.2f} | {r['exposed_ms']:.2f} | "
              f"{r['expected_replay_steps']:.1f} ({r['expected_replay_ms']:.1f}) | "
              f"{r['worst_replay_steps']} ({r['worst_replay_ms']:.1f}) |")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", help="build directory (required unless --from-json)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--state-mib", type=int, nargs="+", default=[8, 256])
    ap.add_argument("--device-ms", type=int, nargs="+", default=[0],
                    help="step kinds: 0 = CPU-bound, N = device-like (waits N ms off-core)")
    ap.add_argument("--chunk-bytes", help="protection.chunk_bytes (e.g. 256KiB); default: the config's")
    ap.add_argument("--thread-nice", type=int, help="protection.thread_nice; default: the config's")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--btl", help="Open MPI BTLs for the jobs and the bandwidth reference (FLASHREC_BTL, "
                    "read by tools/fr-mpirun), overriding the transport's: a labelled comparison. Use "
                    "--transport shm for shared memory as flashrec runs it (with the failure detector)")
    ap.add_argument("--transport", choices=sorted(TRANSPORT_BTL),
                    help="mpi.transport for the jobs and the bandwidth reference (FLASHREC_TRANSPORT, read by "
                    "tools/fr-mpirun); default: the environment's, else auto (fr-mpirun's default)")
    ap.add_argument("--every", nargs="+", help="the protection.every table for these values "
                    "(integers and/or auto) instead of the overhead table")
    ap.add_argument("--budget", type=float, default=0.03, help="protection.overhead_budget of the auto runs")
    ap.add_argument("--max-every", type=int, help="protection.max_every of the auto runs (default: the config's, 64)")
    ap.add_argument("--json")
    ap.add_argument("--from-json", metavar="JSON", help="print the table of an earlier run's --json (or of "
                    "a bench/run.py suite's JSON) again, bounds and shares recomputed, and run nothing")
    a = ap.parse_args()
    if a.from_json:
        with open(a.from_json) as f:
            rows = json.load(f)
        if isinstance(rows, dict):  # a bench/run.py suite: this benchmark's rows inside it
            rows = rows["benchmarks"]["protection"]["data"]
        for r in rows:
            # Runs before payload_bytes_per_rank was stored: the pipeline's counters give it
            # (sent bytes per copied byte = passes including the send minus the pipeline's).
            sent_share = r["sender_touched_incl_send_per_byte"] - r["sender_touched_per_byte"]
            derive(r, r.get("payload_bytes_per_rank", round(sent_share * r["state_bytes_per_rank"])),
                   r.get("cores", os.cpu_count() or 1))
        print_table(rows)
        return
    if not a.build:
        ap.error("--build is required")
    if a.btl:
        os.environ["FLASHREC_BTL"] = a.btl
    if a.transport:
        os.environ["FLASHREC_TRANSPORT"] = a.transport
    transport = os.environ.get("FLASHREC_TRANSPORT") or "auto"
    btl = os.environ.get("FLASHREC_BTL", TRANSPORT_BTL[transport])
    extra = ""
    if a.chunk_bytes:
        extra += f", chunk_bytes: {a.chunk_bytes}"
    if a.thread_nice is not None:
        extra += f", thread_nice: {a.thread_nice}"
    rows = []
    if a.every:
        with tempfile.TemporaryDirectory() as tmp:
            rows = every_table(a, tmp)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(rows, f, indent=1)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in a.ranks:
            for mib in a.state_mib:
                refs = bandwidth(a.build, mib << 20)
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
                        "ranks": ranks, "sharded_state_mib": mib, "device_ms": device_ms, "btl": btl,
                        "transport": transport,
                        "step": "cpu" if device_ms == 0 else f"device {device_ms} ms",
                        "state_bytes_per_rank": state, "shm_bytes_per_rank": last["shm_bytes"],
                        "step_ms_off": off, "step_ms_on": on, "ratio": on / off,
                        "exposed_wait_ms": med(on_runs, "median_exposed_wait_ms"),
                        "snapshot_ms": med(on_runs, "snapshot_mean_ms"),
                        "protection_cpu_ms": med(on_runs, "snapshot_cpu_ms"),
                        "sender_touched_per_byte": med(on_runs, "sender_touched_per_byte"),
                        "sender_touched_incl_send_per_byte": med(on_runs, "sender_touched_incl_send_per_byte"),
                        "holder_touched_per_byte": med(on_runs, "holder_touched_per_byte"),
                        "hashed_in_cache_per_byte": med(on_runs, "hashed_in_cache_per_byte"),
                        "snapshot_GBps": med(on_runs, "snapshot_copy_GBps"),
                        "snapshot_cpu_GBps": med(on_runs, "snapshot_copy_cpu_GBps"),
                        "replication_GBps": med(on_runs, "replication_GBps"),
                        "replication_oncpu_GBps": med(on_runs, "replication_oncpu_GBps"),
                        **refs}
                    derive(r, payload, os.cpu_count() or 1)
                    cpu = device_ms == 0
                    floor_ms = r["snapshot_floor_ms"]
                    rows.append(r)
                    bound = (f", bound {r['cpu_ratio_bound']:.3f} (measured/bound {r['ratio_over_bound']:.3f}), "
                             f"transport bound {r['transport_ratio_bound']:.3f} "
                             f"(measured/bound {r['ratio_over_transport_bound']:.3f}), "
                             f"kernel estimate {r['kernel_ratio_floor']:.3f}"
                             if cpu else f", step/floor {off / floor_ms:.1f}x")
                    print(f"ranks {ranks:2d} state {mib:4d} MiB {r['step']}: step {off:8.2f} ms off, {on:8.2f} ms on, "
                          f"ratio {r['ratio']:.3f}{bound}, exposed wait {r['exposed_wait_ms']:.2f} ms, "
                          f"protection CPU {r['protection_cpu_ms']:.1f} ms/step, touched {r['sender_touched_per_byte']:.2f}"
                          f"/{r['holder_touched_per_byte']:.2f} per byte, snapshot {r['snapshot_GBps']:.2f} GB/s, "
                          f"replication {r['replication_GBps']:.2f} GB/s wall, {r['replication_oncpu_GBps']:.2f} on CPU "
                          f"(memcpy {refs['memcpy_GBps']:.2f} / both {refs['memcpy_both_GBps']:.2f}, "
                          f"MPI p2p {refs['mpi_p2p_GBps']:.2f} / exchange {refs['mpi_exchange_GBps']:.2f}, "
                          f"kernel TCP {refs['tcp_cpu_s_per_GB']:.3f} CPU s/GB)",
                          flush=True)
    print_table(rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
