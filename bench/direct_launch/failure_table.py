#!/usr/bin/env python3
"""The per-failure table of issue 47 (docs/slurm.md, "What a node loss does"): each failure kind
of tests/slurm/launch_e2e.sh, under direct launch (srun) and mpirun, per mpi.transport and
mpi.yield_when_idle, run on the test cluster; one row a run, from the typed records of the run's
event log (`recovery`, `warm_relaunch`, `node_lost`) and the injection time the test wrote
(injected.json). A figure, not a test: a run whose test failed is shown as failed.

  failure_table.py --launcher L --trainer T --out DIR [--runs N] SPEC ...
  SPEC: mode[:transport[:yield_when_idle]], e.g. direct_node_freeze:auto:true ranks_of_node_hot:tcp
  failure_table.py --table DIR      (only print the table of the runs kept in DIR)
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "..", "..", "tests", "slurm", "launch_e2e.sh")


def run(spec, n, a):
    mode, transport, yld = (spec.split(":") + ["auto", "true"])[:3]
    keep = os.path.join(a.out, f"{mode}-{transport}-yield_{yld}-{n}")
    env = dict(os.environ, FLASHREC_E2E_KEEP=keep, FLASHREC_E2E_TRANSPORT=transport, FLASHREC_E2E_YIELD=yld)
    start = time.monotonic()
    p = subprocess.run(["bash", E2E, mode, a.launcher, a.trainer], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=900)
    os.makedirs(keep, exist_ok=True)
    with open(os.path.join(keep, "test.log"), "w") as f:
        f.write(p.stdout)
    with open(os.path.join(keep, "test.json"), "w") as f:
        json.dump({"mode": mode, "rc": p.returncode, "seconds": round(time.monotonic() - start, 1)}, f)
    print(f"{os.path.basename(keep)}: {'passed' if p.returncode == 0 else 'FAILED (rc %d)' % p.returncode}", flush=True)


def row(keep):
    test = json.load(open(os.path.join(keep, "test.json")))
    injected_path = os.path.join(keep, "injected.json")
    if not os.path.exists(injected_path):
        return {"run": os.path.basename(keep), "mode": test["mode"], "result": f"failed before the injection (rc {test['rc']})"}
    inj = json.load(open(injected_path))
    t0 = inj["injected_unix_ms"]
    events = glob.glob(os.path.join(keep, "*.events.jsonl"))
    recs = [json.loads(line) for line in open(events[0])] if events else []
    out = {"run": os.path.basename(keep), "mode": inj["mode"], "transport": inj["transport"],
           "yield": inj["yield_when_idle"], "result": "passed" if test["rc"] == 0 else f"FAILED (rc {test['rc']})",
           "launch": "srun" if inj["mode"].startswith("direct") else "mpirun"}
    lost = [r for r in recs if r["event"] == "node_lost" and "silent_ms" in r]
    if lost:
        out["node_lost"] = f"silent {lost[0]['silent_ms']:.0f} ms (timeout {lost[0]['node_timeout_ms']})"
    relaunch = [r for r in recs if r["event"] == "warm_relaunch" and r.get("outcome") == "resumed"]
    recovery = [r for r in recs if r["event"] == "recovery" and r.get("failure_noticed_unix_us")]
    if recovery:
        r = recovery[0]
        out.update(tier=r["tier"], detection_ms=round(r["failure_noticed_unix_us"] / 1000 - t0),
                   back_in_loop_ms=round(r["back_in_loop_unix_us"] / 1000 - t0),
                   repair_ms=round(r["total_ms"]), rebuild_ms=round(r["phases_ms"].get("rebuild", 0)))
    elif relaunch:
        r = relaunch[0]
        out.update(tier=r["tier"], detection_ms=round(r["died_unix_ms"] - t0),
                   back_in_loop_ms=round(r["resumed_unix_ms"] - t0), repair_ms=round(r["total_ms"]))
    return out


def table(out_dir):
    rows = [row(k) for k in sorted(glob.glob(os.path.join(out_dir, "*"))) if os.path.exists(os.path.join(k, "test.json"))]
    cols = ["mode", "launch", "transport", "yield", "result", "tier", "detection_ms", "node_lost", "repair_ms",
            "rebuild_ms", "back_in_loop_ms"]
    print("| " + " | ".join(cols) + " |")
    print("|" + " --- |" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r.get(c, "-")) for c in cols) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launcher")
    ap.add_argument("--trainer")
    ap.add_argument("--out", help="one directory a run (the test's kept job directory)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--table", metavar="DIR")
    ap.add_argument("specs", nargs="*")
    a = ap.parse_args()
    if a.table:
        return table(a.table)
    if not (a.launcher and a.trainer and a.out and a.specs):
        ap.error("--launcher, --trainer, --out and at least one SPEC are needed (or --table DIR)")
    for spec in a.specs:
        for n in range(1, a.runs + 1):
            run(spec, n, a)
    table(a.out)


if __name__ == "__main__":
    sys.exit(main())
