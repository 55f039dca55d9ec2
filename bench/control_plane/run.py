#!/usr/bin/env python3
"""Control-plane benchmarks (issue 6): heartbeat processing cost, detection latency, warm relaunch.

  bench/control_plane/run.py --build BUILD [--trials N] [--reps N] [--ranks R...] [--json FILE]
                             [--only heartbeat|detection|relaunch ...]

  heartbeat   bench_heartbeat_cost: CPU/wall time the controller spends on one heartbeat from
              each of 1,000 / 10,000 / 32,768 simulated ranks (Controller::feed_heartbeat), and one
              hang-detector pass over them.
  detection   flashrec-launch runs of the MLP example with an injected crash (action=kill) and an
              injected hang (action=stop), --trials each: time from the injection (the fault
              injector's wall-clock stamp) to the controller's decision (the launcher's `failure`
              record); for the crash also when ULFM told the survivors (the recovery record).
  relaunch    flashrec-launch runs in which mpirun is SIGKILLed at step 100, --reps each at every
              --ranks count: time from the kill to every rank back in the step loop (the launcher's
              warm_relaunch record), with its phases.

Every launch runs under tools/fr-run (hard timeout, no process left behind). Prints markdown
tables (lines starting with '|'); --json writes every number.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FR_RUN = os.path.join(ROOT, "tools", "fr-run")


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def fmt(s, unit="ms", digits=1):
    if not s.get("n"):
        return "-"
    return f"{s['median']:.{digits}f} {unit} ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def events(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    try:
                        out.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass  # a line being written
    return out


class Tail:
    """The records appended to an event log since the last read (the watchers poll every few ms)."""

    def __init__(self, path):
        self.path, self.pos = path, 0

    def read(self):
        if not os.path.exists(self.path):
            return []
        with open(self.path) as f:
            f.seek(self.pos)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self.pos += len(complete.encode())
        return [json.loads(line) for line in complete.splitlines() if line.strip()]


def write_config(path, job, ranks, steps, heartbeat_ms, hang_timeout_ms, hot_spares=1, model="16, hidden: 32, output: 4",
                 batch=8, trainer=None):
    nodes = max(1, ranks // 2)
    with open(path, "w") as f:
        f.write(f"job: {{name: {job}, nodes: {nodes}, ranks_per_node: {ranks // nodes}, dp: {ranks}, "
                f"hot_spares: {hot_spares}, steps: {steps}, seed: 3}}\n")
        f.write(f"launch: {{program: {trainer}}}\n")
        f.write(f"trainer: {{model: {{input: {model}}}, batch_per_rank: {batch}, lr: 0.003, log_every: 1000}}\n")
        f.write(f"detection: {{heartbeat_ms: {heartbeat_ms}, hang_timeout_ms: {hang_timeout_ms}}}\n")
        f.write("recovery: {phase_deadline_ms: 20000}\n")


def launch(launcher, config, events_path, extra=(), watcher=None, timeout=180):
    if os.path.exists(events_path):
        os.remove(events_path)
    cmd = [FR_RUN, "--timeout", str(timeout), "--expect", r"^final_checksum=", "--",
           launcher, config, "--events", events_path, *extra]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = []
    if watcher:
        import threading
        done = threading.Event()

        def watch():
            while not done.is_set():
                watcher(events_path)
                time.sleep(0.003)

        t = threading.Thread(target=watch, daemon=True)
        t.start()
    for line in p.stdout:
        out.append(line)
    p.wait()
    if watcher:
        done.set()
        t.join()
    return p.returncode, "".join(out)


# ---------------------------------------------------------------------------------------------

def bench_heartbeat(a, results):
    exe = os.path.join(a.build, "bench", "control_plane", "bench_heartbeat_cost")
    if not os.access(exe, os.X_OK):
        print(f"heartbeat: {exe} is not built (cmake --build {a.build} --target bench_heartbeat_cost)")
        return
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as t:
        path = t.name
    p = subprocess.run([exe, "--ranks", "1000", "10000", "32768", "--rounds", "50", "--json", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    sys.stdout.write(p.stdout)
    with open(path) as f:
        results["heartbeat"] = json.load(f)
    os.remove(path)


def bench_detection(a, results, work):
    rows = {}
    for kind, action in (("crash", "kill"), ("hang", "stop")):
        cfg = os.path.join(work, f"detect-{kind}.yaml")
        hang_timeout = a.hang_timeout_ms
        write_config(cfg, f"b-detect-{kind}", 4, 80, a.heartbeat_ms, hang_timeout, trainer=a.trainer)
        decided, ulfm, since_hb = [], [], []
        for t in range(a.trials):
            ev_path = os.path.join(work, f"detect-{kind}-{t}.events.jsonl")
            rc, out = launch(a.launcher, cfg, ev_path, ["--fault", f"role=1:step=30:phase=forward:action={action}"])
            ev = events(ev_path)
            fault = next((e for e in ev if e["event"] == "fault_injected"), None)
            fail = next((e for e in ev if e["event"] == "failure" and e.get("role") == "dp1.tp0.pp0"), None)
            rec = next((e for e in ev if e["event"] == "recovery"), None)
            if rc != 0 or not fault or not fail:
                print(f"detection {kind} trial {t}: no measurement (fr-run rc {rc})\n{out[-1500:]}")
                continue
            decided.append(fail.get("since_injection_ms"))
            since_hb.append(fail.get("detection_latency_ms"))
            if rec and rec.get("failure_noticed_unix_us"):
                ulfm.append((rec["failure_noticed_unix_us"] - fault["unix_us"]) / 1000.0)
        rows[kind] = {"controller_decision_ms": stats(decided), "since_last_heartbeat_ms": stats(since_hb),
                      "ulfm_survivors_noticed_ms": stats(ulfm), "raw_decision_ms": decided,
                      "hang_timeout_ms": hang_timeout, "heartbeat_ms": a.heartbeat_ms}
    results["detection"] = rows
    print(f"\nDetection latency, injection -> decision (median (min-max) over {a.trials} trials; 4 ranks; "
          f"heartbeat {a.heartbeat_ms} ms, hang_timeout {a.hang_timeout_ms} ms):\n")
    print("| failure | controller's decision | ULFM: survivors notice | controller: since last heartbeat |")
    print("| --- | ---: | ---: | ---: |")
    c, h = rows["crash"], rows["hang"]
    print(f"| crash (SIGKILL) | {fmt(c['controller_decision_ms'])} | {fmt(c['ulfm_survivors_noticed_ms'])} | "
          f"{fmt(c['since_last_heartbeat_ms'])} |")
    print(f"| hang (SIGSTOP) | {fmt(h['controller_decision_ms'])} | never (a stopped process is alive) | "
          f"{fmt(h['since_last_heartbeat_ms'])} |")
    print("\n(A hang is declared after hang_timeout_ms of silence, checked every min(heartbeat, 100 ms); the "
          "launcher then SIGKILLs the rank and ULFM recovers it like a crash.)")


def bench_relaunch(a, results, work):
    rows = []
    for ranks in a.ranks:
        cfg = os.path.join(work, f"relaunch-{ranks}.yaml")
        write_config(cfg, f"b-relaunch-{ranks}", ranks, 1500, 20, 10000, model="64, hidden: 128, output: 8",
                     batch=32, trainer=a.trainer)
        totals, by_clock, replayed, phases = [], [], [], {}
        for t in range(a.reps):
            ev_path = os.path.join(work, f"relaunch-{ranks}-{t}.events.jsonl")
            state = {"killed": None}

            tail = Tail(ev_path)

            def watcher(path, state=state, tail=tail):
                if state["killed"]:
                    return
                for e in tail.read():
                    if e["event"] == "launch" and "pid" not in state:
                        state["pid"] = e["pid"]
                    elif e["event"] == "step":
                        state["step"] = max(state.get("step", -1), e["step"])
                pid, step = state.get("pid"), state.get("step", -1)
                if pid and step >= 100:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        return
                    state["killed"] = time.time()

            rc, out = launch(a.launcher, cfg, ev_path, watcher=watcher)
            ev = events(ev_path)
            rel = next((e for e in ev if e["event"] == "warm_relaunch"), None)
            if rc != 0 or not rel or not state["killed"] or "total_ms" not in rel:
                print(f"relaunch {ranks} ranks trial {t}: no measurement (fr-run rc {rc})\n{out[-1500:]}")
                continue
            totals.append(rel["total_ms"])
            by_clock.append(rel["resumed_unix_ms"] - state["killed"] * 1000)
            replayed.append(rel.get("steps_replayed"))
            for k, v in rel.get("phases_ms", {}).items():
                phases.setdefault(k, []).append(v)
        rows.append({"ranks": ranks, "total_ms": stats(totals), "kill_to_resumed_ms": stats(by_clock),
                     "phases_ms": {k: stats(v) for k, v in phases.items()}, "steps_replayed": replayed})
    results["warm_relaunch"] = rows
    print(f"\nWarm relaunch (tier 2): mpirun SIGKILLed at step 100 -> every rank back in the step loop "
          f"(median (min-max) over {a.reps} trials; heartbeat 20 ms):\n")
    print("| ranks | kill -> resumed (test's clock) | launcher's total | detect | teardown | launch (mpirun -> all registered) | restore (registered -> in the loop) | steps replayed |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        p = r["phases_ms"]
        print(f"| {r['ranks']} | {fmt(r['kill_to_resumed_ms'])} | {fmt(r['total_ms'])} | {fmt(p.get('detect', {}), digits=2)} | "
              f"{fmt(p.get('teardown', {}))} | {fmt(p.get('launch', {}))} | {fmt(p.get('restore', {}))} | "
              f"{r['steps_replayed']} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--trials", type=int, default=5, help="detection trials per failure kind")
    ap.add_argument("--reps", type=int, default=5, help="warm relaunches per rank count")
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--heartbeat-ms", type=int, default=100)
    ap.add_argument("--hang-timeout-ms", type=int, default=1000)
    ap.add_argument("--only", nargs="+", choices=["heartbeat", "detection", "relaunch"])
    ap.add_argument("--json")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    a.launcher = os.path.join(a.build, "launcher", "flashrec-launch")
    a.trainer = os.path.join(a.build, "examples", "mlp_trainer")
    want = set(a.only or ["heartbeat", "detection", "relaunch"])
    results = {}
    if "heartbeat" in want:
        bench_heartbeat(a, results)
    if want & {"detection", "relaunch"}:
        if not os.access(a.launcher, os.X_OK) or not os.access(a.trainer, os.X_OK):
            print(f"detection/relaunch: need {a.launcher} and {a.trainer} (cmake --build {a.build})")
        else:
            with tempfile.TemporaryDirectory(prefix="flashrec-cp-bench.") as work:
                if "detection" in want:
                    bench_detection(a, results, work)
                if "relaunch" in want:
                    bench_relaunch(a, results, work)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
