#!/usr/bin/env python3
"""Recovery latency: median and spread of every recovery phase, hot vs spawned spare.

  recovery_latency.py --build BUILD [--ranks 4 8 16] [--trials 5] [--state-mib 64]
                      [--spare hot spawned] [--device-ms 0] [--kill-role 1] [--json OUT]
                      [--trainer examples/mlp_cuda/mlp_cuda_trainer] [--bitwise]
                      [--every 1 8]

--trainer examples/mlp_cuda/mlp_cuda_trainer measures the CUDA example (docs/gpu.md): its state in device
memory (trainer.extra_device_mib), the DP collectives through NCCL, whose rebuild in the first
step after the repair is the column first_step_nccl_init. Several ranks on one GPU need
FLASHREC_GPU_SHARED=1 and NCCL_SOCKET_IFNAME=lo in the environment. --bitwise also runs the
job without a failure once and counts the trials whose final checksum is bitwise the same.

Each trial runs the example trainer with `state-mib` MiB of sharded state per rank and kills
role `kill-role` (SIGKILL) in the forward pass of step 6. The recovery record carries every
rank's phases; each phase column is the slowest rank's time in that phase (phases_ms_max),
and the slowest rank overall is named. "detect" is injection -> the first rank noticed (wall
clock, same machine); "to_loop" is injection -> the last rank back in the step loop with its
state restored (back_in_loop_unix_us), the repair as a whole; "first_step" is the slowest
rank's first step after it, reported apart from the repair. Records without those fields
(older builds) fall back to role 0's phases.

--every K... runs each row once per protection.every = K, with the kill at the last offset of
the second interval (step 2 x max(K) - 1: at K = 8, step 15 replays 7 steps from version 8) and
2 x max(K) + 4 steps. Each row then adds steps_replayed and the replay's cost, measured as the
first step after the repair (first_step, on the clock) plus the other replayed steps at the run's
median step (job_stats; they are ordinary steps), and compares to_loop + replay with the issue's
bound: K x the median step + today's repair, the K = 1 row's to_loop + replay in the same run (at
K = 1 a repair replays the step the failure interrupted).
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
ORDER = ["detect", "nccl_release", "revoke", "shrink", "agree", "exchange", "spawn", "merge", "rebuild", "restore",
         "resumed", "to_loop", "first_step", "first_step_nccl_init"]
CUDA_TRAINER = "examples/mlp_cuda/mlp_cuda_trainer"


def config(ranks, hot, state_mib, device_ms=0, trainer="examples/mlp_trainer", every=None, steps=12):
    nodes = max(1, ranks // 2)
    state_param = "extra_device_mib" if trainer == CUDA_TRAINER else "extra_sharded_mib"
    protection = f"protection: {{every: {every}}}\n" if every else ""
    return f"""job: {{name: bench-rec-{ranks}-{int(hot)}-{every or 1}-{os.getpid()}, nodes: {nodes}, ranks_per_node: {ranks // nodes}, dp: {ranks},
       hot_spares: {1 if hot else 0}, steps: {steps}, seed: 9}}
trainer: {{model: {{input: 32, hidden: 64, output: 8}}, batch_per_rank: 8, log_every: 1000,
          {state_param}: {state_mib}, device_ms: {device_ms}}}
recovery: {{phase_deadline_ms: 60000}}
""" + protection


def trial(build, ranks, hot, path, timeout, kill_role=1, trainer="examples/mlp_trainer", fault=True, kill_step=6):
    fault_args = ["--fault", f"role={kill_role}:step={kill_step}:phase=forward:action=kill"] if fault else []
    job = frlib.run_job(ranks + (1 if hot else 0),
                        [os.path.join(build, trainer), "--config", path] + fault_args,
                        timeout=timeout, expect="^final_checksum=")
    if not fault:
        return None, {"final_checksum": job.checksum}
    injected = job.fault_injected_us()
    e = job.event("recovery")
    if e:
        phases = dict(e.get("phases_ms_max") or e["phases_ms"])
        if injected and e.get("failure_noticed_unix_us"):
            phases["detect"] = (e["failure_noticed_unix_us"] - injected) / 1e3
        if injected and e.get("back_in_loop_unix_us"):
            phases["to_loop"] = (e["back_in_loop_unix_us"] - injected) / 1e3
        else:
            phases["to_loop"] = sum(v for k, v in phases.items() if k not in ("first_step",))
        stats = job.event("job_stats") or {}
        return phases, dict(e, final_checksum=job.checksum, median_step_ms=stats.get("median_step_ms"))
    print(job.output[-3000:], file=sys.stderr)
    return None, None


def replay_samples(row, every, kill_step, outcomes):
    """The replay after each trial's repair: steps_replayed from the record; its cost measured as
    the first step after the repair (first_step) plus the other replayed steps at the run's
    median step (job_stats of role 0)."""
    row["every"] = every
    row["kill_step"] = kill_step
    samples = []
    for phases, record in outcomes:
        replayed = record.get("steps_replayed", 0)
        step = record.get("median_step_ms") or 0
        cost = (phases.get("first_step", step) + (replayed - 1) * step) if replayed > 0 else 0.0
        samples.append({"steps_replayed": replayed, "median_step_ms": step, "replay_ms": cost,
                        "to_loop_plus_replay_ms": phases["to_loop"] + cost})
    row["replay"] = samples


def every_cell(row):
    return f" {row['every']} |" if "every" in row else ""


def print_every_table(results):
    """to_loop + replay at each k beside the issue's bound: k x the median step + today's repair,
    to_loop + replay at k = 1 in the same run (same ranks and spare kind)."""
    print("\n| ranks | spare | every | kill step | steps replayed | median step (ms) | to_loop (ms) | replay (ms) "
          "| to_loop + replay (ms) | bound: k x step + (to_loop + replay at k = 1) (ms) | within |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results:
        base = next((r for r in results if r["ranks"] == row["ranks"] and r["spare"] == row["spare"]
                     and r.get("every") == 1), None)
        def med(key, row=row):
            return statistics.median(s[key] for s in row["replay"]) if row["replay"] else float("nan")
        to_loop = row["phases"].get("to_loop", {}).get("median", float("nan"))
        total = med("to_loop_plus_replay_ms")
        bound = row["every"] * med("median_step_ms") + med("to_loop_plus_replay_ms", base) if base else float("nan")
        replayed = sorted({s["steps_replayed"] for s in row["replay"]})
        print(f"| {row['ranks']} | {row['spare']} | {row['every']} | {row['kill_step']} | "
              f"{'/'.join(map(str, replayed))} | {med('median_step_ms'):.1f} | {to_loop:.1f} | {med('replay_ms'):.1f} | "
              f"{total:.1f} | {bound:.1f} | {'yes' if total <= bound else 'NO'} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--state-mib", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--spare", nargs="+", choices=["hot", "spawned"], default=["hot", "spawned"])
    ap.add_argument("--device-ms", type=int, default=0, help="trainer.device_ms: a device-like step")
    ap.add_argument("--kill-role", type=int, default=1)
    ap.add_argument("--trainer", default="examples/mlp_trainer", help="relative to --build")
    ap.add_argument("--bitwise", action="store_true", help="compare every trial's checksum with a failure-free run")
    ap.add_argument("--every", type=int, nargs="+", help="protection.every per row (see above)")
    ap.add_argument("--json")
    a = ap.parse_args()
    results = []
    kill_step, steps = (2 * max(a.every) - 1, 2 * max(a.every) + 4) if a.every else (6, 12)
    with tempfile.TemporaryDirectory() as tmp:
        for ranks, hot, every in [(r, k == "hot", e) for r in a.ranks for k in a.spare for e in (a.every or [None])]:
            path = os.path.join(tmp, f"r{ranks}-{int(hot)}-{every}.yaml")
            with open(path, "w") as f:
                f.write(config(ranks, hot, a.state_mib, a.device_ms, a.trainer, every, steps))
            outcomes = [trial(a.build, ranks, hot, path, a.timeout, a.kill_role, a.trainer, kill_step=kill_step)
                        for _ in range(a.trials)]
            samples = [s for s, _ in outcomes if s]
            slow = sorted({e.get("slowest_role", "role 0") for s, e in outcomes if s})
            row = {"ranks": ranks, "spare": "hot" if hot else "spawned", "trials": len(samples),
                   "slowest_roles": slow, "phases": {}}
            if every:
                replay_samples(row, every, kill_step, [(s, e) for s, e in outcomes if s])
            if a.bitwise:
                _, clean = trial(a.build, ranks, hot, path, a.timeout, trainer=a.trainer, fault=False)
                row["failure_free_checksum"] = clean["final_checksum"]
                row["bitwise_identical"] = sum(1 for s, e in outcomes if s and e["final_checksum"] == clean["final_checksum"])
                print(f"ranks {ranks} {row['spare']}: {row['bitwise_identical']} of {len(outcomes)} trials end "
                      f"bitwise identical to the failure-free run ({clean['final_checksum']})", flush=True)
            for phase in ORDER:
                vals = [s[phase] for s in samples if phase in s]
                if vals:
                    row["phases"][phase] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
            results.append(row)
            tl = row["phases"].get("to_loop", {})
            slowest = max(((p, v["median"]) for p, v in row["phases"].items()
                           if p not in ("to_loop", "first_step")), key=lambda x: x[1], default=("-", 0))
            print(f"ranks {ranks:2d} {row['spare']:>7}: crash -> back in loop median "
                  f"{tl.get('median', float('nan')):7.1f} ms (min {tl.get('min', float('nan')):.1f}, "
                  f"max {tl.get('max', float('nan')):.1f}), {len(samples)} trials; dominant phase: "
                  f"{slowest[0]} {slowest[1]:.1f} ms; slowest rank(s): {', '.join(slow)}", flush=True)
    print()
    print("| ranks | spare |" + (" every |" if a.every else "") + " " + " | ".join(ORDER) + " |")
    print("|---|---|" + ("---|" if a.every else "") + "---|" * len(ORDER))
    for row in results:
        cells = []
        for p in ORDER:
            v = row["phases"].get(p)
            cells.append(f"{v['median']:.1f} ({v['min']:.1f}-{v['max']:.1f})" if v else "-")
        print(f"| {row['ranks']} | {row['spare']} |{every_cell(row)} " + " | ".join(cells) + " |")
    print("\n(median (min-max) in ms over the trials; each phase: its slowest rank; state: %d MiB "
          "sharded per rank)" % a.state_mib)
    if a.every:
        print_every_table(results)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
