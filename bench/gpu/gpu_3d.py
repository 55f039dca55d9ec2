#!/usr/bin/env python3
"""The 3-D CUDA example (examples/mlp3d_cuda, dp 2 x tp 2 x pp 2) on a GPU: issue 49's figures.

  gpu_3d.py matrix  --build B [--spare hot spawned] [--cpu] [--only tp pp ...] [--json OUT]
  gpu_3d.py compare --build B [--tolerance 1e-3] [--json OUT]
  gpu_3d.py repair  --build B [--trials 2] [--json OUT]

matrix:  the fault matrix. A failure-free run per spare kind, then one run per fault: a kill in
         each phase (forward, allreduce, sync, optimizer, tp_exchange, pp_exchange) with a hot
         spare, and of a TP peer, a PP peer and a DP peer with a spawned replacement. Every run
         must end with the failure-free run's final_checksum (bitwise). --cpu runs the trainer's
         CPU version (host buffers, MPI path): the same matrix without a GPU.
compare: the CPU and the GPU version of the same shape, failure-free, the loss of every step;
         passes when every step's |gpu - cpu| <= tolerance * max(1, |cpu|) (default 1e-3: the
         two differ in the last bits of every float sum, FMA contraction and tanhf, never more).
repair:  NCCL repaired per group after role 0's TP peer (0,1,0) is killed (hot spare): recovery.nccl_repair auto
         (shrink + grow where the NCCL loaded has ncclCommGrow) against reinit, alternating. Per
         group (dp, tp, pp) the slowest rank's first_step_nccl_<group>_<action> ms, the first step
         after the repair against the median step (target: <= median + 50 ms), bitwise.

Every run goes through tools/fr-run + fr-mpirun (frlib), 9 processes (8 roles + the hot spare),
all on one GPU when there is one (FLASHREC_GPU_SHARED=1, NCCL over loopback sockets). Exits 77
when a GPU is needed and there is none, 1 when a check fails.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import frlib  # noqa: E402

CONFIGS = os.path.join(ROOT, "tests", "gpu", "configs")
TRAINER = os.path.join("examples", "mlp3d_cuda", "mlp3d_trainer")
ROLES = 8
# (spare, role as dp,tp,pp, step, phase, what the role is to role 0 = 0,0,0)
FAULTS = [
    ("hot", "0,1,0", 8, "tp_exchange", "TP peer"),
    ("hot", "0,0,1", 10, "pp_exchange", "PP peer"),
    ("hot", "1,0,0", 12, "allreduce", "DP peer"),
    ("hot", "1,1,0", 6, "forward", "dp1.tp1.pp0"),
    ("hot", "0,1,1", 14, "sync", "dp0.tp1.pp1"),
    ("hot", "1,0,1", 16, "optimizer", "dp1.tp0.pp1"),
    ("spawned", "0,1,0", 8, "tp_exchange", "TP peer"),
    ("spawned", "0,0,1", 10, "pp_exchange", "PP peer"),
    ("spawned", "1,0,0", 12, "allreduce", "DP peer"),
]
GROUPS = ("dp", "tp", "pp")
ENV = {"FLASHREC_GPU_SHARED": "1", "NCCL_SOCKET_IFNAME": "lo"}


def config(spare, nccl_repair=None):
    """The test config of `spare`; with `nccl_repair`, a copy that sets recovery.nccl_repair."""
    path = os.path.join(CONFIGS, f"mlp3d-{spare}.yaml")
    if nccl_repair is None:
        return path
    with open(path) as f:
        text = f.read()
    text, n = re.subn(r"^recovery: \{", f"recovery: {{nccl_repair: {nccl_repair}, ", text, flags=re.M)
    if n != 1:
        raise SystemExit(f"gpu_3d: {path} has no 'recovery: {{' line to set nccl_repair in")
    copy = os.path.join(tempfile.gettempdir(), f"mlp3d-{spare}-{nccl_repair}-{os.getpid()}.yaml")
    with open(copy, "w") as f:
        f.write(text)
    return copy


def run(build, spare, extra=(), cpu=False, timeout=180, nccl_repair=None):
    argv = ([os.path.join(build, TRAINER), "--config", config(spare, nccl_repair)] + (["--cpu"] if cpu else [])
            + list(extra))
    return frlib.run_job(ROLES + (1 if spare == "hot" else 0), argv, timeout=timeout,
                         expect="^final_checksum=", env=ENV)


def have_gpu(build):
    import subprocess
    probe = os.path.join(build, "tests", "gpu", "gpu_device_probe")
    return subprocess.run([probe, "1"], env=dict(os.environ, **ENV)).returncode == 0


def losses(job):
    return {int(s): float(v) for s, v in re.findall(r"^step (\d+) loss (\S+)$", job.output, re.M)}


def recovery(job):
    e = job.event("recovery")
    if not e:
        return None
    return {"phases_ms_max": e.get("phases_ms_max") or e.get("phases_ms"), "replacement": e.get("replacement")}


def save(a, out):
    """Rewrites --json with what is done so far: a run cut short keeps its figures."""
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


def cmd_matrix(a):
    rows, ok = [], True
    for spare in a.spare:
        base = run(a.build, spare, cpu=a.cpu, timeout=a.timeout)
        print(f"{spare}: failure-free final_checksum={base.checksum} ({base.seconds:.1f} s)", flush=True)
        if base.checksum is None:
            print(base.output[-3000:], file=sys.stderr)
            ok = False
            continue
        for s, role, step, phase, what in FAULTS:
            if s != spare or (a.only and phase.split("_")[0] not in a.only and phase not in a.only):
                continue
            job = run(a.build, spare, ["--fault", f"role={role}:step={step}:phase={phase}:action=kill"], cpu=a.cpu,
                      timeout=a.timeout)
            bitwise = job.checksum is not None and job.checksum == base.checksum
            rec = recovery(job)
            rows.append({"spare": spare, "role": role, "what": what, "step": step, "phase": phase,
                         "final_checksum": job.checksum, "baseline": base.checksum, "bitwise": bitwise,
                         "recovered": rec is not None, "seconds": round(job.seconds, 1), "recovery": rec})
            print(f"  kill role {role} ({what}) at step {step} in {phase}: "
                  f"{'bitwise' if bitwise else 'DIFFERS'} ({job.checksum}, {job.seconds:.1f} s)", flush=True)
            if not bitwise or rec is None:
                print(job.output[-3000:], file=sys.stderr)
                ok = False
            save(a, {"cpu": a.cpu, "runs": rows, "partial": True})
    out = {"cpu": a.cpu, "runs": rows, "bitwise": sum(r["bitwise"] for r in rows), "of": len(rows), "ok": ok}
    print(f"fault matrix: {out['bitwise']} of {out['of']} bitwise")
    return out, ok


def cmd_compare(a):
    cpu = run(a.build, "hot", cpu=True, timeout=a.timeout)
    gpu = run(a.build, "hot", timeout=a.timeout)
    lc, lg = losses(cpu), losses(gpu)
    steps = sorted(set(lc) & set(lg))
    worst = max((abs(lg[s] - lc[s]) / max(1.0, abs(lc[s])) for s in steps), default=float("inf"))
    ok = bool(steps) and len(steps) == len(lc) == len(lg) and worst <= a.tolerance and lg[steps[-1]] < lg[steps[0]]
    print(f"CPU vs GPU: {len(steps)} steps, worst relative loss difference {worst:.3g} "
          f"(tolerance {a.tolerance}); GPU loss {lg.get(steps[0]) if steps else '-'} -> "
          f"{lg.get(steps[-1]) if steps else '-'}: {'ok' if ok else 'FAIL'}")
    if not ok:
        print(cpu.output[-2000:], gpu.output[-2000:], file=sys.stderr)
    return {"steps": len(steps), "tolerance": a.tolerance, "worst_relative": worst,
            "cpu": [lc[s] for s in steps], "gpu": [lg[s] for s in steps],
            "cpu_checksum": cpu.checksum, "gpu_checksum": gpu.checksum, "ok": ok}, ok


def cmd_repair(a):
    base = run(a.build, "hot", timeout=a.timeout)
    trials = {mode: [] for mode in a.modes}
    for t in range(a.trials):
        for mode in a.modes:
            job = run(a.build, "hot", ["--fault", "role=0,1,0:step=10:phase=forward:action=kill"], timeout=a.timeout,
                      nccl_repair=mode)
            rec = recovery(job)
            stats = job.event("job_stats") or {}
            phases = (rec or {}).get("phases_ms_max") or {}
            row = {"trial": t, "bitwise": job.checksum is not None and job.checksum == base.checksum,
                   "first_step_ms": phases.get("first_step"), "median_step_ms": stats.get("median_step_ms"),
                   "nccl_init_ms": phases.get("first_step_nccl_init"),
                   "groups": {g: {k.rsplit(f"first_step_nccl_{g}_", 1)[1]: v for k, v in phases.items()
                                  if k.startswith(f"first_step_nccl_{g}_")} for g in GROUPS}}
            trials[mode].append(row)
            save(a, {"trials": trials, "partial": True})
            print(f"  {mode} trial {t}: groups {row['groups']}, first step {row['first_step_ms']} ms "
                  f"(median step {row['median_step_ms']} ms), bitwise {row['bitwise']}", flush=True)
            if rec is None:
                print(job.output[-3000:], file=sys.stderr)

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    table, ok = [], True
    for mode, rows in trials.items():
        for g in GROUPS:
            actions = sorted({act for r in rows for act in r["groups"][g]})
            for act in actions:
                table.append({"mode": mode, "group": g, "action": act,
                              "ms": med([r["groups"][g].get(act) for r in rows])})
        first, median = med([r["first_step_ms"] for r in rows]), med([r["median_step_ms"] for r in rows])
        table.append({"mode": mode, "group": "all", "action": "first_step", "ms": first, "median_step_ms": median,
                      "target_first_step_le_median_plus_50": (first is not None and median is not None
                                                              and first <= median + 50)})
        ok = ok and all(r["bitwise"] for r in rows)
    for row in table:
        print(f"  {row['mode']:8} {row['group']:4} {row['action']:12} {row['ms']}")
    return {"trials": trials, "table": table, "ok": ok}, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["matrix", "compare", "repair"])
    ap.add_argument("--build", required=True)
    ap.add_argument("--spare", nargs="+", choices=["hot", "spawned"], default=["hot", "spawned"])
    ap.add_argument("--only", nargs="+", help="matrix: only these phases (tp, pp, allreduce, ...)")
    ap.add_argument("--cpu", action="store_true", help="matrix: the trainer's CPU version (no GPU needed)")
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--modes", nargs="+", choices=["auto", "reinit"], default=["auto", "reinit"])
    ap.add_argument("--timeout", type=float, default=180, help="per job (s)")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    if not (a.what == "matrix" and a.cpu) and not have_gpu(a.build):
        print("gpu_3d: no CUDA device: skipped")
        return 77
    out, ok = {"matrix": cmd_matrix, "compare": cmd_compare, "repair": cmd_repair}[a.what](a)
    save(a, out)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
