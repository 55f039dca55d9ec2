#!/usr/bin/env python3
"""Recovery phases vs rank count in two series, for the scale model (docs/scale-model.md).

  scale_phases.py --build BUILD [--ranks 4 8 16 32] [--trials 3] [--state-mib 8]
                  [--series cpu device] [--device-ms 100] [--spares hot spawned]
                  [--latency-ranks 2 4 8 16 32] [--bandwidth] --json OUT

Series "cpu": the example trainer's step as it is, CPU-bound (all ranks compute on the
machine's cores at once). Series "device": trainer.device_ms = --device-ms, a device-like step
in which each rank's host thread sleeps after its (tiny) compute, as a GPU trainer's host waits
for its kernels, so ranks do not compete for cores while they train. In both, role 1 is
SIGKILLed in the forward pass of step 6 and the recovery record (docs/recovery.md) gives every
phase as seen by role 0; "detect" is injection -> the first rank noticed (same clock).

The recovery itself still runs n processes on this machine's cores (MPI polls while it waits),
so phases at n > cores are still time-shared in both series; the model (scale_model.py) states
that factor instead of hiding it. --latency-ranks also runs bench_latency (small-message
latency, barrier, ULFM agree, shrink, comm dup on a healthy communicator) at those rank counts.

--json OUT is merged: rows already in OUT for other (series, ranks, spare, state) keys are kept,
so a long measurement can be run in short chunks.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

import recovery_latency

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
sys.path.insert(0, TOOLS)
import frlib  # noqa: E402
ORDER = ["detect", "nccl_release", "revoke", "shrink", "agree", "exchange", "spawn", "merge", "rebuild", "restore",
         "resumed", "first_step"]


def trial(build, ranks, hot, path, timeout):
    """Role 0's phases (as the model's series have always been measured), with "detect" from
    the first notice by any rank, and the bytes a replacement received."""
    phases_max, record = recovery_latency.trial(build, ranks, hot, path, timeout)
    if record is None:
        return None, None
    phases = dict(record["phases_ms"])
    if "detect" in phases_max:
        phases["detect"] = phases_max["detect"]
    return phases, record.get("bytes_restored_per_replacement")


def latency(build, ranks, timeout):
    exe = os.path.join(build, "bench", "bench_latency")
    out = frlib.run_job(ranks, [exe, "200"], timeout, expect="^latency ").output
    m = re.search(r"^latency (.*)$", out, re.M)
    if not m:
        print(out[-2000:], file=sys.stderr)
        return None
    r = {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    r["ranks"] = int(r["ranks"])
    return r


def bandwidth(build, timeout):
    exe = os.path.join(build, "bench", "bench_bandwidth")
    out = frlib.run_job(2, [exe, str(64 << 20)], timeout, expect="^bandwidth ").output
    m = re.search(r"^bandwidth (.*)$", out, re.M)
    return {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())} if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--ranks", type=int, nargs="*", default=[4, 8, 16, 32])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--state-mib", type=int, default=8)
    ap.add_argument("--series", nargs="*", choices=["cpu", "device"], default=["cpu", "device"])
    ap.add_argument("--device-ms", type=int, default=100, help="trainer.device_ms of the device series")
    ap.add_argument("--spares", nargs="*", choices=["hot", "spawned"], default=["hot", "spawned"])
    ap.add_argument("--latency-ranks", type=int, nargs="*", default=[])
    ap.add_argument("--bandwidth", action="store_true", help="also run bench_bandwidth (2 ranks, 64 MiB)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", required=True)
    a = ap.parse_args()
    data = {"rows": [], "latency": []}
    if os.path.exists(a.json):
        with open(a.json) as f:
            data = json.load(f)
    with open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "?")
    cores = len(os.sched_getaffinity(0))
    data["machine"] = {"cores": cores, "cpu": model}
    if a.bandwidth:
        data["bandwidth"] = bandwidth(a.build, a.timeout)
        print(f"bandwidth {data['bandwidth']}", flush=True)
    for n in a.latency_ranks:
        r = latency(a.build, n, a.timeout)
        if r:
            data["latency"] = [x for x in data["latency"] if x["ranks"] != n] + [r]
            print("latency " + " ".join(f"{k}={v:g}" for k, v in r.items()), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for series in a.series:
            dms = a.device_ms if series == "device" else 0
            for ranks in a.ranks:
                for spare in a.spares:
                    hot = spare == "hot"
                    path = os.path.join(tmp, f"{series}-{ranks}-{spare}.yaml")
                    with open(path, "w") as f:
                        f.write(recovery_latency.config(ranks, hot, a.state_mib, dms))
                    load_before = os.getloadavg()[0]
                    if ranks > cores or load_before > 0.5:
                        print(f"warning: {ranks} ranks on {cores} cores, load average {load_before:.2f}: "
                              "time-shared; bench/scale_fair.py fits only rows with ranks <= cores, and a "
                              "loaded machine shares them anyway", file=sys.stderr, flush=True)
                    got = [trial(a.build, ranks, hot, path, a.timeout) for _ in range(a.trials)]
                    samples = [s for s, _ in got if s]
                    row = {"series": series, "device_ms": dms, "ranks": ranks, "spare": spare,
                           "state_mib": a.state_mib, "trials": len(samples), "cores": cores,
                           "loadavg_before": load_before,
                           "bytes_restored": next((b for s, b in got if s), None), "phases": {}}
                    for ph in ORDER:
                        vals = [s[ph] for s in samples if ph in s]
                        if vals:
                            row["phases"][ph] = {"median": statistics.median(vals), "min": min(vals),
                                                 "max": max(vals), "samples": vals}
                    key = (series, ranks, spare, a.state_mib)
                    data["rows"] = [r for r in data["rows"]
                                    if (r["series"], r["ranks"], r["spare"], r["state_mib"]) != key] + [row]
                    with open(a.json, "w") as f:  # after every point: a cut-off chunk keeps what it measured
                        json.dump(data, f, indent=1)
                    cells = ", ".join(f"{p} {v['median']:.1f}" for p, v in row["phases"].items())
                    print(f"{series:6s} n={ranks:2d} {spare:7s} {a.state_mib} MiB, {len(samples)} trials: {cells}",
                          flush=True)
    with open(a.json, "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
