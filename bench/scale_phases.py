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
phase as seen by role 0; "detect" is injection -> role 0 noticed (same clock).

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
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
ORDER = ["detect", "revoke", "shrink", "agree", "exchange", "spawn", "merge", "rebuild", "restore",
         "resumed", "first_step"]


def config(ranks, hot, state_mib, device_ms):
    nodes = max(1, ranks // 2)
    return f"""job: {{name: bench-scale-{ranks}-{int(hot)}-{os.getpid()}, nodes: {nodes}, ranks_per_node: {ranks // nodes}, dp: {ranks},
       hot_spares: {1 if hot else 0}, steps: 12, seed: 9}}
trainer: {{model: {{input: 32, hidden: 64, output: 8}}, batch_per_rank: 8, log_every: 1000,
          extra_sharded_mib: {state_mib}, device_ms: {device_ms}}}
recovery: {{phase_deadline_ms: 60000}}
"""


def trial(build, ranks, hot, path, timeout):
    cmd = [os.path.join(TOOLS, "fr-run"), "--timeout", str(timeout), "--expect", "^final_checksum=", "--",
           os.path.join(TOOLS, "fr-mpirun"), "-n", str(ranks + (1 if hot else 0)),
           os.path.join(build, "examples", "mlp_trainer"), "--config", path,
           "--fault", "role=1:step=6:phase=forward:action=kill"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    injected = re.search(r"fault injected: .* unix_us (\d+)\)", out)
    for m in re.findall(r"flashrec-event: (\{.*\})$", out, re.M):
        e = json.loads(m)
        if e.get("event") == "recovery":
            phases = dict(e["phases_ms"])
            if injected and e.get("failure_noticed_unix_us"):
                phases["detect"] = (e["failure_noticed_unix_us"] - int(injected.group(1))) / 1e3
            return phases, e.get("bytes_restored_per_replacement")
    print(out[-3000:], file=sys.stderr)
    return None, None


def latency(build, ranks, timeout):
    exe = os.path.join(build, "bench", "bench_latency")
    cmd = [os.path.join(TOOLS, "fr-run"), "--timeout", str(timeout), "--expect", "^latency ", "--",
           os.path.join(TOOLS, "fr-mpirun"), "-n", str(ranks), exe, "200"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    m = re.search(r"^latency (.*)$", out, re.M)
    if not m:
        print(out[-2000:], file=sys.stderr)
        return None
    r = {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}
    r["ranks"] = int(r["ranks"])
    return r


def bandwidth(build, timeout):
    exe = os.path.join(build, "bench", "bench_bandwidth")
    cmd = [os.path.join(TOOLS, "fr-run"), "--timeout", str(timeout), "--expect", "^bandwidth ", "--",
           os.path.join(TOOLS, "fr-mpirun"), "-n", "2", exe, str(64 << 20)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
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
    data["machine"] = {"cores": len(os.sched_getaffinity(0)), "cpu": model}
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
                        f.write(config(ranks, hot, a.state_mib, dms))
                    got = [trial(a.build, ranks, hot, path, a.timeout) for _ in range(a.trials)]
                    samples = [s for s, _ in got if s]
                    row = {"series": series, "device_ms": dms, "ranks": ranks, "spare": spare,
                           "state_mib": a.state_mib, "trials": len(samples),
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
