#!/usr/bin/env python3
"""Checkpoint-restart baseline vs flashrec in-job recovery: time to resume progress after a
failure, measured in the same run on the same trainer (DeadPool §VII-C, issue 10 item 2).

  checkpoint_restart_baseline.py --build BUILD [--ranks 4] [--state-mib 16] [--trials 2]
        [--every-steps 10] [--fail-step N] [--spares hot] [--model 128,256,16] [--batch 32]
        [--json OUT] [--timeout S] [--workdir DIR]

Every trial runs one job configuration (same trainer, same model, same HDF5 checkpoint every
`every-steps` steps) three times, killing role 1 (SIGKILL) in the all-reduce of step F:

  flashrec     hot_spares 1 (or 0 with recovery.spawn for --spares spawned): the job repairs
               itself in place and resumes from the in-memory snapshot (R = F-1 or F);
  ckpt job 1   hot_spares 0, recovery.spawn false: no replacement, the job ends (exit 77);
  ckpt job 2   the same job started again with --resume: every rank restores the newest complete
               HDF5 checkpoint C (<= F) and replays steps C..F.

Time to resume progress = from the failure (the fault injector's own clock) until step F is
completed again, i.e. T2 -> T4 in DeadPool's Fig. 3. Each is split into
  flashrec:  detect (injection -> a survivor noticed), recover (-> back in the loop with the
             state restored, from the recovery record), replay (steps R..F, incl. step F)
  ckpt:      job death (injection -> mpirun gone), restart (new mpirun, MPI init, the trainer's
             setup, checkpoint read: until the checkpoint_resumed record), replay (C..F)
The restart starts the moment job 1 is gone: no scheduler queue wait, no node replacement.

Times come from the processes' own output lines, each stamped when written (a bash reader
around every rank: `@<EPOCHREALTIME> line`; the trainer's stdout is line-buffered with
stdbuf), so fr-run can still capture the whole output. Every run goes through tools/fr-run
and tools/fr-mpirun. Steps are made large enough (model, batch) that the replay is visible.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "tools")
sys.path.insert(0, TOOLS)
import frlib  # noqa: E402
# Stamp every line a rank writes (stdout and stderr) with the wall clock when it was written.
# `exec` keeps the rank's pid (mpirun and ULFM see the trainer itself); the reader exits at EOF.
STAMP = ('exec > >(while IFS= read -r l; do printf "@%s %s\\n" "$EPOCHREALTIME" "$l"; done) 2>&1; '
         'exec stdbuf -oL "$@"')
LINE = re.compile(r"^@(\d+\.\d+) (.*)$")


def config(name, ranks, state_mib, steps, every, ckpt_dir, model, batch, hot, spawn):
    nodes = max(1, ranks // 2)
    i, h, o = model
    return f"""job: {{name: {name}, nodes: {nodes}, ranks_per_node: {ranks // nodes}, dp: {ranks},
       hot_spares: {hot}, steps: {steps}, seed: 11}}
trainer: {{model: {{input: {i}, hidden: {h}, output: {o}}}, batch_per_rank: {batch}, lr: 0.001,
          log_every: 1, extra_sharded_mib: {state_mib}}}
protection: {{replicas: 1}}
checkpoint: {{dir: {ckpt_dir}, every_steps: {every}, keep: 2}}
recovery: {{spawn: {str(spawn).lower()}, phase_deadline_ms: 60000}}
"""


class Run:
    def __init__(self, cmd, timeout):
        self.start = time.time()
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout + 30)
        self.end = time.time()
        self.rc = p.returncode
        self.text = p.stdout
        self.lines = []
        for raw in p.stdout.splitlines():
            m = LINE.match(raw)
            self.lines.append((float(m.group(1)), m.group(2)) if m else (None, raw))

    def find(self, regex, after=None):
        r = re.compile(regex)
        for ts, text in self.lines:
            if ts is not None and after is not None and ts < after:
                continue
            m = r.search(text)
            if m:
                return ts, m
        return None, None

    def stamped_event(self, name):
        """(time, record) of the first `flashrec-event:` record of event `name` (the runtime's
        typed records, never its prose), or (None, None)."""
        for ts, text in self.lines:
            found = frlib.events(text, name)
            if found:
                return ts, found[0]
        return None, None

    def event(self, name):
        return self.stamped_event(name)[1]

    def checkpoints(self):
        out = []
        for _, text in self.lines:
            for c in frlib.events(text, "checkpoint"):
                out.append({"step": c["step"], "files": c["files"], "bytes": c["bytes"], "seconds": c["seconds"]})
        return out

    def tail(self):
        return "\n".join(t for _, t in self.lines[-40:])


def launch(build, nprocs, cfg_path, extra, timeout, expect_final):
    argv = ["bash", "-c", STAMP, "frts", os.path.join(build, "examples", "mlp_trainer"), "--config", cfg_path]
    return Run(frlib.command(nprocs, argv + extra, timeout, expect="final_checksum=" if expect_final else ()),
               timeout)


def injected_at(run):
    fault = run.event("fault_injected")
    return fault["unix_us"] / 1e6 if fault else None


def checksum(run):
    _, m = run.find(r"final_checksum=([0-9a-f]+)")
    return m.group(1) if m else None


def trial_flashrec(a, ranks, spares, tmp, index):
    name = f"bench-crb-fr-{os.getpid()}-{ranks}-{index}"
    ck = os.path.join(tmp, name)
    path = os.path.join(tmp, name + ".yaml")
    hot = 1 if spares == "hot" else 0
    with open(path, "w") as f:
        f.write(config(name, ranks, a.state_mib, a.steps, a.every_steps, ck, a.model, a.batch, hot, True))
    run = launch(a.build, ranks + hot, path, ["--fault", f"role=1:step={a.fail_step}:phase=allreduce:action=kill"],
                 a.timeout, True)
    shutil.rmtree(ck, ignore_errors=True)
    t_fail = injected_at(run)
    rec = run.event("recovery")
    stats = run.event("job_stats") or {}
    t_f, _ = run.find(rf"^step {a.fail_step} loss ", after=t_fail)
    if not (t_fail and rec and t_f):
        print(f"flashrec trial failed (ranks {ranks}):\n{run.tail()}", file=sys.stderr)
        return None
    noticed = rec["failure_noticed_unix_us"] / 1e6
    back = noticed + sum(v for k, v in rec["phases_ms"].items() if k != "first_step") / 1e3
    return {"method": "flashrec", "spare": rec.get("replacement", spares), "tier": rec.get("tier"),
            "phases_s": {"detect": noticed - t_fail, "recover": back - noticed, "replay": t_f - back},
            "total_s": t_f - t_fail, "resumed_version": rec.get("recovery_version"),
            "steps_replayed": a.fail_step - rec.get("recovery_version", a.fail_step),
            "step_ms": stats.get("median_step_ms"), "checkpoints": run.checkpoints(),
            "record_total_ms": rec.get("total_ms"), "checksum": checksum(run)}


def trial_ckpt(a, ranks, tmp, index):
    name = f"bench-crb-ck-{os.getpid()}-{ranks}-{index}"
    ck = os.path.join(tmp, name)
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(config(name, ranks, a.state_mib, a.steps, a.every_steps, ck, a.model, a.batch, 0, False))
    first = launch(a.build, ranks, path, ["--fault", f"role=1:step={a.fail_step}:phase=allreduce:action=kill"],
                   a.timeout, False)
    t_fail = injected_at(first)
    died_ts, died = first.stamped_event("ending_job")
    if not t_fail or not died:
        print(f"checkpoint-restart: job 1 did not end as expected (ranks {ranks}):\n{first.tail()}", file=sys.stderr)
        shutil.rmtree(ck, ignore_errors=True)
        return None
    second = launch(a.build, ranks, path, ["--resume"], a.timeout, True)
    shutil.rmtree(ck, ignore_errors=True)
    t_resumed, resumed = second.stamped_event("checkpoint_resumed")
    t_f, _ = second.find(rf"^step {a.fail_step} loss ", after=t_resumed)
    stats = second.event("job_stats") or {}
    if not (resumed and t_f):
        print(f"checkpoint-restart: job 2 (--resume) did not resume (ranks {ranks}):\n{second.tail()}",
              file=sys.stderr)
        return None
    c = resumed["step"]
    return {"method": "checkpoint-restart", "spare": "none (job ends, restarted with --resume)", "tier": 3,
            "phases_s": {"job_death": first.end - t_fail, "restart": t_resumed - first.end,
                         "replay": t_f - t_resumed},
            "total_s": t_f - t_fail, "resumed_version": c, "steps_replayed": a.fail_step - c,
            "ranks_noticed_s": died_ts - t_fail if died_ts else None,
            "restart_gap_s": second.start - first.end, "job1_exit_code": first.rc,
            "step_ms": stats.get("median_step_ms"), "checkpoints": first.checkpoints(), "checksum": checksum(second)}


def median_row(samples, ranks, method):
    row = {"ranks": ranks, "method": method, "trials": len(samples)}
    if not samples:
        return row
    row["spare"] = samples[0]["spare"]
    row["total_s"] = statistics.median(s["total_s"] for s in samples)
    row["total_min_s"] = min(s["total_s"] for s in samples)
    row["total_max_s"] = max(s["total_s"] for s in samples)
    row["phases_s"] = {k: statistics.median(s["phases_s"][k] for s in samples) for k in samples[0]["phases_s"]}
    row["steps_replayed"] = statistics.median(s["steps_replayed"] for s in samples)
    row["resumed_version"] = samples[0]["resumed_version"]
    steps = [s["step_ms"] for s in samples if s.get("step_ms")]
    row["step_ms"] = statistics.median(steps) if steps else None
    ck = [c for s in samples for c in s["checkpoints"]]
    if ck:
        row["checkpoint_write_s"] = statistics.median(c["seconds"] for c in ck)
        row["checkpoint_bytes"] = ck[0]["bytes"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[4])
    ap.add_argument("--state-mib", type=int, default=16, help="extra sharded state per rank (trainer ema buffer)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--every-steps", type=int, default=10, help="HDF5 checkpoint interval K")
    ap.add_argument("--fail-step", type=int, default=None,
                    help="step F whose all-reduce is killed (default 2K + K/2: the expected (K-1)/2 replay)")
    ap.add_argument("--spares", choices=["hot", "spawned"], nargs="+", default=["hot"])
    ap.add_argument("--model", default="128,256,16", help="input,hidden,output of the MLP (sets the step time)")
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--workdir", help="where checkpoints go (default: a temporary directory)")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.model = tuple(int(x) for x in a.model.split(","))
    if a.fail_step is None:
        a.fail_step = 2 * a.every_steps + a.every_steps // 2
    a.steps = a.fail_step + 3
    if not shutil.which("stdbuf"):
        sys.exit("checkpoint_restart_baseline: needs stdbuf (coreutils)")
    tmp = tempfile.mkdtemp(prefix="fr-crb-", dir=a.workdir)
    rows, raw = [], []
    try:
        for ranks in a.ranks:
            fr = {s: [] for s in a.spares}
            ck = []
            for t in range(a.trials):
                for s in a.spares:  # alternate so that machine noise hits both alike
                    r = trial_flashrec(a, ranks, s, tmp, f"{t}{s[0]}")
                    if r:
                        fr[s].append(r)
                        raw.append(dict(r, ranks=ranks, trial=t))
                r = trial_ckpt(a, ranks, tmp, t)
                if r:
                    ck.append(r)
                    raw.append(dict(r, ranks=ranks, trial=t))
            base = median_row(ck, ranks, "checkpoint-restart")
            for s in a.spares:
                row = median_row(fr[s], ranks, "flashrec")
                if row.get("total_s") and base.get("total_s"):
                    row["speedup_vs_ckpt"] = base["total_s"] / row["total_s"]
                rows.append(row)
                print(f"ranks {ranks:2d} flashrec ({s}): time to resume progress {row.get('total_s', float('nan')):.3f} s "
                      f"over {row['trials']} trials; replayed {row.get('steps_replayed', '-')} step(s)", flush=True)
            rows.append(base)
            print(f"ranks {ranks:2d} checkpoint-restart: time to resume progress {base.get('total_s', float('nan')):.3f} s "
                  f"over {base['trials']} trials; resumed from step {base.get('resumed_version', '-')}, replayed "
                  f"{base.get('steps_replayed', '-')} step(s)", flush=True)
            sums = {s["checksum"] for s in ck + [x for v in fr.values() for x in v] if s.get("checksum")}
            if len(sums) > 1:
                print(f"WARNING: final checksums differ between the runs: {sorted(sums)}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"(kill role 1 in the all-reduce of step {a.fail_step}; HDF5 checkpoint every {a.every_steps} steps; "
          f"{a.state_mib} MiB extra sharded state per rank; median of trials; seconds)")
    print("| ranks | method | detect / job death | recover / restart | replay | steps replayed | "
          "time to resume progress (min-max) | step (ms) | vs flashrec |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r.get("total_s"):
            print(f"| {r['ranks']} | {r['method']} | - | - | - | - | failed | - | - |")
            continue
        ph = r["phases_s"]
        first = ph.get("detect", ph.get("job_death"))
        second = ph.get("recover", ph.get("restart"))
        label = r["method"] + (f" ({r['spare']})" if r["method"] == "flashrec" else "")
        fr_total = next((x.get("total_s") for x in rows if x["ranks"] == r["ranks"] and x["method"] == "flashrec"
                         and x.get("total_s")), None)
        vs = f"{r['total_s'] / fr_total:.1f}x" if fr_total and r["method"] != "flashrec" else "1x"
        print(f"| {r['ranks']} | {label} | {first:.3f} | {second:.3f} | {ph['replay']:.3f} | {r['steps_replayed']:g} | "
              f"{r['total_s']:.3f} ({r['total_min_s']:.3f}-{r['total_max_s']:.3f}) | "
              f"{r['step_ms']:.1f} | {vs} |" if r.get("step_ms") else
              f"| {r['ranks']} | {label} | {first:.3f} | {second:.3f} | {ph['replay']:.3f} | {r['steps_replayed']:g} | "
              f"{r['total_s']:.3f} | - | {vs} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": {"ranks": a.ranks, "state_mib": a.state_mib, "trials": a.trials,
                                  "every_steps": a.every_steps, "fail_step": a.fail_step, "steps": a.steps,
                                  "model": a.model, "batch": a.batch, "spares": a.spares},
                       "rows": rows, "trials": raw}, f, indent=1)


if __name__ == "__main__":
    main()
