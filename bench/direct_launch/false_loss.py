#!/usr/bin/env python3
"""The false-loss run of issue 47: a direct-launch job (slurm.launch: srun) on the Slurm test
cluster for --minutes with --burners CPU burners (`sh -c 'while :; do :; done'`) on the machine's
cores and no failure injected. It prints what choosing detection.node_timeout_ms needs:

  - every `node_lost` record of the launcher's event log (the node timeout declared a node lost;
    with no failure each one is a false loss), before and after the end of the run;
  - the launcher's `node_silence` record: each node's longest time between two heartbeats as the
    controller received them (launcher/core/node_liveness.hpp), beside the node timeout.

A figure, not a test: nothing is judged by a threshold. The run is ended by SIGINT to
flashrec-launch after --minutes (job_end `interrupted`); `node_lost` records after that instant
are counted apart (the ranks are being ended then).

  false_loss.py --launcher build/launcher/flashrec-launch --trainer build/examples/mlp_trainer \\
                [--minutes 30] [--burners 2] [--node-timeout-ms 1000] [--results FILE] [--keep DIR]

Takes the test cluster's lock (the `slurm` tests' and chaos_slurm.py's) for the whole run.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tests", "recovery"))
import frlib  # noqa: E402
import chaos_slurm  # noqa: E402

TEMPLATE = os.path.join(ROOT, "slurm", "templates", "flashrec.sbatch")
JOB = "b-false-loss"
NODES, ACTIVE = 5, 4  # 4 active nodes + 1 spare node with the hot spare (as slurm.launch.direct*)


def write_yaml(path, trainer, node_timeout_ms):
    with open(path, "w") as f:
        f.write(f"job: {{name: {JOB}, nodes: {ACTIVE}, ranks_per_node: 1, dp: 4, spare_nodes: 1, hot_spares: 1, "
                f"steps: 100000000, seed: 7}}\n"
                f"launch: {{program: {trainer}}}\n"
                "trainer: {model: {input: 16, hidden: 32, output: 4}, batch_per_rank: 8, lr: 0.01, "
                "log_every: 100000, device_ms: 10}\n"
                f"detection: {{node_timeout_ms: {node_timeout_ms}}}\n"
                "recovery: {spawn: false}\n"
                "slurm: {launch: srun}\n")


def launcher_pid(launcher, jobid):
    """flashrec-launch of this Slurm job (the batch script's child, on the batch host)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.realpath(argv0) == launcher and f"SLURM_JOB_ID={jobid}".encode() in env:
            return int(d)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--node-timeout-ms", type=int, default=1000)
    ap.add_argument("--results", help="write the figures as JSON here")
    ap.add_argument("--keep", help="copy the event log and the job output into this directory")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("SKIP: the Slurm test cluster needs root")
        return 77
    launcher, trainer = os.path.realpath(a.launcher), os.path.realpath(a.trainer)
    chaos_slurm.NODES = NODES
    burners = []
    with chaos_slurm.Cluster() as c:
        cfg = os.path.join(c.dir, "train.yaml")
        write_yaml(cfg, trainer, a.node_timeout_ms)
        events = os.path.join(c.dir, f"{JOB}.events.jsonl")
        env = dict(os.environ, FLASHREC_LAUNCH=launcher)
        jobid = None
        try:
            for _ in range(a.burners):
                burners.append(subprocess.Popen(["sh", "-c", "while :; do :; done"]))
            print(f"false-loss run: {a.minutes} min, {a.burners} CPU burners (pids "
                  f"{' '.join(str(b.pid) for b in burners)}), node timeout {a.node_timeout_ms} ms", flush=True)
            jobid = subprocess.run(["sbatch", "--parsable", f"--nodes={NODES}", f"--time={int(a.minutes) + 10}",
                                    "-J", JOB, TEMPLATE, cfg], cwd=c.dir, env=env, stdout=subprocess.PIPE, text=True,
                                   timeout=10, check=True).stdout.strip()
            log = frlib.EventLog(events)
            started = None
            while started is None:  # the first step counts as the start of the measured run
                if c.job_state(jobid) not in ("PENDING", "RUNNING", "CONFIGURING"):
                    break
                if any(r["event"] == "step" for r in log.records()):
                    started = time.monotonic()
                time.sleep(0.5)
            print(f"job {jobid}: training since {time.strftime('%H:%M:%S')}", flush=True)
            end_at = (started or time.monotonic()) + a.minutes * 60
            ended_early = False
            while time.monotonic() < end_at:
                if c.job_state(jobid) not in ("PENDING", "RUNNING", "CONFIGURING"):
                    ended_early = True
                    break
                time.sleep(5)
            trained_s = time.monotonic() - (started or time.monotonic())
            pid = launcher_pid(launcher, jobid)
            if pid and not ended_early:
                os.kill(pid, signal.SIGINT)  # job_end `interrupted`; the controller logs node_silence
            deadline = time.monotonic() + 120
            while c.job_state(jobid) in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") and time.monotonic() < deadline:
                time.sleep(1)
        finally:
            for b in burners:
                b.kill()
                b.wait()
            if jobid and c.job_state(jobid) in ("PENDING", "RUNNING", "CONFIGURING"):
                chaos_slurm.sh("scancel", jobid, timeout=10)
        records = frlib.read_events(events)
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            for p in [events] + [os.path.join(c.dir, f) for f in os.listdir(c.dir) if f.endswith(".out")]:
                if os.path.exists(p):
                    subprocess.run(["cp", p, a.keep])
    cut = next((i for i, r in enumerate(records) if r["event"] == "interrupted"), len(records))
    lost_during = [r for r in records[:cut] if r["event"] == "node_lost"]
    lost_after = [r for r in records[cut:] if r["event"] == "node_lost"]
    silence = next((r for r in reversed(records) if r["event"] == "node_silence"), None)
    end = next((r for r in reversed(records) if r["event"] == "job_end"), {})
    steps = max((r.get("step", -1) for r in records if r["event"] == "step"), default=-1)
    print(f"job {jobid}: trained {trained_s / 60:.1f} min{' (ENDED EARLY)' if ended_early else ''}, "
          f"{steps + 1} steps, job_end {end.get('outcome')} (failures {end.get('failures')})")
    print(f"node_lost records during the run: {len(lost_during)}; after the SIGINT: {len(lost_after)}")
    for r in lost_during + lost_after:
        print("  " + json.dumps(r))
    if silence:
        print(f"longest heartbeat silence per node (heartbeat {silence['heartbeat_ms']} ms, node timeout "
              f"{silence['node_timeout_ms']} ms):")
        print(f"  {'node':<10} {'longest ms':>10} {'heartbeats':>10}")
        for n in sorted(silence["nodes"], key=lambda n: n["node"]):
            print(f"  {n['node']:<10} {n['longest_silence_ms']:>10} {n['heartbeats']:>10}")
        worst = max((n["longest_silence_ms"] for n in silence["nodes"]), default=0)
        print(f"  longest of all: {worst} ms = {worst / silence['node_timeout_ms']:.2f} x the node timeout")
    else:
        print("no node_silence record (the launcher was built without it, or it did not end normally)")
    if a.results:
        with open(a.results, "w") as f:
            json.dump({"job": jobid, "minutes": round(trained_s / 60, 2), "ended_early": ended_early,
                       "burners": a.burners, "steps": steps + 1, "job_end": end.get("outcome"),
                       "node_lost_during": lost_during, "node_lost_after": lost_after,
                       "node_silence": silence}, f, indent=1)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear the cluster down, kill the burners
    sys.exit(main())
