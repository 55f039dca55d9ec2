#!/usr/bin/env python3
"""The GPT example (examples/gpt) at dp 2 x tp 2 x pp 2: protection overhead and recovery latency.

  gpt_bench.py --build BUILD [--pairs 3] [--steps 100] [--trials 3] [--json OUT]
               [--d-model 32 --layers 2 --seq 16]   (--trials 0: overhead only)

Overhead: `pairs` x (protection off, on) runs, alternating so that machine noise hits both
alike; the median step time of each (role 0's job_stats) and their ratio.
Recovery: `trials` runs per (spare kind, victim): role 0's TP peer killed in its first TP
exchange, its pipeline peer in its first pipeline exchange, its DP peer in forward, at step 10.
"detect" is the fault's injection -> role 0 noticed it (wall clock, same machine); "to_loop"
is detect + every phase up to "resumed" (every rank back in the step loop, state restored);
"first_step" is the step after it. Medians over the trials. Figures from a 2-core VM running
8-10 processes: they measure this machine, oversubscribed, not a cluster.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
sys.path.insert(0, TOOLS)
import frlib  # noqa: E402
MODEL = ("trainer: {{model: {{vocab: 64, seq: {seq}, d_model: {d}, heads: 4, layers: {layers}, mlp: {mlp}}}, "
         "micro_batches: 2, batch_per_micro: 2, lr: 0.003, log_every: 1000}}\n")
SHAPE = {"d": 32, "seq": 16, "layers": 2, "mlp": 128}
VICTIMS = {"tp peer, tp_exchange": "0,1,0:step=10:phase=tp_exchange",
           "pp peer, pp_exchange": "0,0,1:step=10:phase=pp_exchange",
           "dp peer, forward": "1,0,0:step=10:phase=forward"}


def config(name, steps, protected=True, hot=0):
    return (f"job: {{name: {name}-{os.getpid()}, nodes: 4, ranks_per_node: 2, dp: 2, tp: 2, pp: 2, "
            f"hot_spares: {hot}, steps: {steps}, seed: 9}}\n" + MODEL.format(**SHAPE) +
            f"protection: {{enabled: {str(protected).lower()}, replicas: 1}}\n"
            "recovery: {phase_deadline_ms: 60000}\n")


def run(build, procs, text, faults=()):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
        path = f.name
    argv = [os.path.join(build, "examples", "gpt_trainer"), "--config", path]
    for fault in faults:
        argv += ["--fault", fault]
    job = frlib.run_job(procs, argv, timeout=300, expect="^final_checksum=")
    os.unlink(path)
    if job.returncode != 0:
        sys.exit(f"run failed:\n{job.output[-3000:]}")
    return job.events(), job.fault_injected_us()


def overhead(build, pairs, steps):
    times = {False: [], True: []}
    for _ in range(pairs):
        for protected in (False, True):
            events, _ = run(build, 8, config("gpt-ovh", steps, protected))
            stats = next(e for e in events if e.get("event") == "job_stats")
            times[protected].append(stats["median_step_ms"])
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print(f"overhead: median step {off:.3f} ms unprotected, {on:.3f} ms protected, ratio {on / off:.3f} "
          f"(runs off {['%.3f' % t for t in times[False]]}, on {['%.3f' % t for t in times[True]]})")
    return {"step_ms_off": off, "step_ms_on": on, "ratio": on / off}


def recovery(build, trials):
    results = {}
    for hot in (True, False):
        for victim, fault in VICTIMS.items():
            rows = []
            for _ in range(trials):
                events, injected = run(build, 8 + (1 if hot else 0), config("gpt-rec", 20, True, 1 if hot else 0),
                                       [f"role={fault}:action=kill"])
                rec = next(e for e in events if e.get("event") == "recovery")
                phases = dict(rec.get("phases_ms", {}))
                row = {k: v for k, v in phases.items()}
                row["detect"] = (rec["failure_noticed_unix_us"] - injected) / 1000 if injected else float("nan")
                row["to_loop"] = row["detect"] + sum(v for k, v in phases.items() if k != "first_step")
                rows.append(row)
            keys = [k for k in ["detect", "revoke", "shrink", "agree", "exchange", "spawn", "merge", "rebuild",
                                "restore", "resumed", "to_loop", "first_step"] if all(k in r for r in rows)]
            med = {k: statistics.median(r[k] for r in rows) for k in keys}
            kind = "hot" if hot else "spawned"
            results[f"{kind} / {victim}"] = med
            print(f"recovery {kind:>7} / {victim:<21} " + " ".join(f"{k} {v:.1f}" for k, v in med.items()) + "  (ms)")
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    a = ap.parse_args()
    SHAPE.update(d=a.d_model, seq=a.seq, layers=a.layers, mlp=4 * a.d_model)
    print(f"model: d_model {a.d_model}, layers {a.layers}, seq {a.seq}, mlp {4 * a.d_model}, vocab 64, 4 heads")
    out = {"model": dict(SHAPE), "overhead": overhead(a.build, a.pairs, a.steps),
           "recovery_ms": recovery(a.build, a.trials) if a.trials > 0 else {}}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
