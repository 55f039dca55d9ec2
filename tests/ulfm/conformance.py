#!/usr/bin/env python3
"""flashrec's ULFM conformance set (issue 27): death kind x operation x transport.

Each case runs tests/ulfm/ulfm_conformance.cpp on --ranks processes (tools/fr-mpirun, with
FLASHREC_TRANSPORT set to the transport) under tools/fr-run, which kills it at --timeout. A case
passes when it ends (never a hang) in

  repaired   every survivor shrank to ranks-1 and an allreduce on the shrunk communicator
             gave ranks-1 (with --live-on-ms, and then it went on working that long), or
  error      every survivor reported a named error (shrink failed with one) and the job ended;

and, for kind `none` (nobody dies, every rank computes 3 detector timeouts with no MPI call),
when every rank's barrier afterwards succeeded (no false failure). Anything else fails: a hang,
a wrong size, a survivor that never reported. Detection ms: from the victim's last line (its
wall clock just before it died) to each survivor's return from the operation; min-max.

Operation `spawn` (the survivors in MPI_Comm_spawn) is not in the default set: it hangs over tcp
and returns an unnamed error over shm (docs/ulfm-traps.md, "A death while the survivors are
inside MPI_Comm_spawn"); `--ops spawn` runs it.

Transport `ofi` (fr-mpirun's btl ofi over libfabric's tcp provider, not a transport flashrec
accepts) passes this set at 3 ranks, yet a flashrec job's survivors abort over it: its 4-byte
messages leave nothing in flight to the victim (docs/ulfm-traps.md trap 12; test
ulfm.conformance_ofi).

Direct launch (--launch srun, issue 47): each case is one `srun --mpi=pmix --no-kill
--kill-on-bad-exit=0 --overlap` step instead of an mpirun, inside a Slurm allocation, with the
environment flashrec-launch gives its tasks under `slurm.launch: srun` (launcher/core/
direct_launch.cpp: tools/fr-mpirun's flags for the transport as OMPI_MCA_* variables,
OPAL_PREFIX, FLASHREC_DIRECT_LAUNCH=1, SLURM_PMIX_FENCE=ring;
the program is linked to libflashrec, whose PMIx_Notify_event keeps ULFM's failure event out of
Slurm, docs/ulfm-traps.md trap 15, and whose PMIx connection keeper keeps a dead task's end out
of it, trap 17).
--srun-args places the tasks (e.g. "-N3 --ntasks-per-node 1"). There is no PRRTE, so no exit
notice: a death is seen by ULFM itself (a closed TCP connection) or, with --control-plane, by the
controller that sees the process's connection end and passes the loss on (PEER_LOST).

Prints the table and `conformance: N cases, F failed`; exits 1 when any case failed.
  conformance.py --program build/tests/ulfm_conformance [--transports tcp,shm] [--kinds ...]
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
FR_RUN = os.path.join(TOOLS, "fr-run")
FR_MPIRUN = os.path.join(TOOLS, "fr-mpirun")

KINDS = ["kill", "segv", "abort", "exit3", "_exit3", "exit0", "end76", "end77"]
OPS = ["allreduce", "allreduce4m", "recv", "anysource", "agree"]
NAMED = {"PROC_FAILED", "PROC_FAILED_PENDING", "REVOKED"}
RECORD = re.compile(r"^conformance: (\{.*\})$", re.M)


def records(text, role):
    out = []
    for m in RECORD.findall(text):
        try:
            r = json.loads(m)
        except ValueError:
            continue
        if r.get("role") == role:
            out.append(r)
    return out


def judge(kind, ranks, text, result):
    """(passed, outcome, detection text, note) of one case from its output and fr-run's result."""
    note = "mpirun lingered" if result.get("mpirun_lingered") else ""
    if result.get("timed_out"):
        return False, "HANG", "-", note
    finalized = len(re.findall(r"^finalized rank \d+$", text, re.M))
    if kind == "none":
        computers = records(text, "computer")
        ok = len(computers) == ranks and all(c["barrier"] == "SUCCESS" for c in computers)
        got = ",".join(sorted({c["barrier"] for c in computers})) or "no report"
        return ok, "no false failure" if ok else f"FALSE FAILURE ({got}, {len(computers)}/{ranks})", "-", note
    survivors = records(text, "survivor")
    victim = records(text, "victim")
    if len(survivors) != ranks - 1:
        return False, f"MISSING ({len(survivors)}/{ranks - 1} survivors reported)", "-", note
    detection = "-"
    if victim:
        ms = [(s["error_unix_us"] - victim[0]["death_unix_us"]) / 1000 for s in survivors]
        detection = f"{min(ms):.0f}-{max(ms):.0f}" if len(ms) > 1 else f"{ms[0]:.0f}"
    errors = "/".join(sorted({s["error"] for s in survivors}))
    if finalized < ranks - 1:
        note = (note + "; " if note else "") + f"{finalized} finalized"
    if all(s["shrink"] == "SUCCESS" and s["shrunk_size"] == ranks - 1 and s["sum_ok"] for s in survivors):
        lived = "/".join(sorted({s.get("live_on", "SUCCESS") for s in survivors}))
        if lived != "SUCCESS":
            return False, f"repaired, then FAILED ({lived})", detection, note
        if not all(s["error"] in NAMED for s in survivors):
            return False, f"WRONG ERROR ({errors}), repaired", detection, note
        return True, f"repaired ({errors})", detection, note
    if any(s["shrink"] == "SUCCESS" for s in survivors):
        sizes = ",".join(str(s["shrunk_size"]) for s in survivors)
        return False, f"WRONG SIZE ({sizes})", detection, note
    shrink = "/".join(sorted({s["shrink"] for s in survivors}))
    ok = all(s["shrink"] in NAMED for s in survivors)
    return ok, f"error (shrink {shrink})", detection, note


# The step options of flashrec's direct launch (launcher/core/direct_launch.cpp, step_options).
SRUN_STEP_OPTIONS = ["--mpi=pmix", "--no-kill", "--kill-on-bad-exit=0", "--overlap"]


def fr_mpirun_flags(transport):
    """The flags tools/fr-mpirun gives mpirun for this transport, read as flashrec-launch reads them
    (launcher/plan/launch_plan.cpp, wrapper_flags): fr-mpirun run against a stand-in mpirun that
    prints its arguments. Returns (flags, the real Open MPI prefix)."""
    real_prefix = os.environ.get("FLASHREC_MPI_PREFIX") or os.path.realpath(os.path.join(TOOLS, "..", ".deps", "openmpi"))
    with tempfile.TemporaryDirectory(prefix="flashrec-probe.") as root:
        os.makedirs(os.path.join(root, "bin"))
        fake = os.path.join(root, "bin", "mpirun")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do printf \'%s\\n\' "$a"; done\n')
        os.chmod(fake, 0o755)
        env = dict(os.environ, FLASHREC_MPI_PREFIX=root, FLASHREC_TRANSPORT=transport)
        out = subprocess.run([FR_MPIRUN, "--flashrec-probe-end"], stdout=subprocess.PIPE, text=True, env=env, check=True).stdout
    flags = out.split("\n")
    return flags[:flags.index("--flashrec-probe-end")], real_prefix


def direct_environment(transport):
    """The variables flashrec-launch gives every task of a direct launch (launcher/core/
    direct_launch.cpp, mca_environment and DirectLaunch): --mca k v is OMPI_MCA_k=v, --with-ft ulfm
    is OMPI_MCA_mpi_ft_enable=1, -x K=V is K=V; PRRTE's and PMIx's own flags have no daemon to go to."""
    flags, prefix = fr_mpirun_flags(transport)
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    i = 0
    while i < len(flags):
        flag = flags[i]
        if flag in ("--mca", "--prtemca", "--pmixmca"):
            if flag == "--mca":
                env["OMPI_MCA_" + flags[i + 1]] = flags[i + 2]
            i += 3
        elif flag == "--with-ft":
            assert flags[i + 1] == "ulfm", flags[i + 1]
            env["OMPI_MCA_mpi_ft_enable"] = "1"
            i += 2
        elif flag == "-x":
            name, _, value = flags[i + 1].partition("=")
            env[name] = value
            i += 2
        elif flag == "--oversubscribe":
            i += 1
        else:
            raise SystemExit(f"conformance.py: fr-mpirun's flag {flag!r} has no environment form for srun's tasks")
    # Both of MPI_Init's fences on Slurm's ring, as the launcher sets it (docs/ulfm-traps.md trap 16).
    env.update(OPAL_PREFIX=prefix, FLASHREC_DIRECT_LAUNCH="1", SLURM_PMIX_FENCE="ring")
    env["LD_LIBRARY_PATH"] = os.path.join(prefix, "lib") + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")
    return env


def run_case(program, transport, kind, op, ranks, timeout, env_extra, program_args=(), mpirun_args=(), host=(),
             launch="mpirun", srun_args=()):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        result_path = f.name
    env = dict(os.environ, FLASHREC_TRANSPORT=transport, **env_extra)
    if launch == "srun":
        starter = ["srun", *SRUN_STEP_OPTIONS, "--ntasks", str(ranks), *srun_args]
    else:
        starter = [FR_MPIRUN, "-n", str(ranks), *mpirun_args]
    start = time.monotonic()
    p = subprocess.run([FR_RUN, "--timeout", str(timeout), "--result", result_path, "--", *host, *starter,
                        program, kind, op, *program_args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env)
    wall = time.monotonic() - start
    try:
        with open(result_path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"timed_out": False}
    os.unlink(result_path)
    passed, outcome, detection, note = judge(kind, ranks, p.stdout, result)
    setup = records(p.stdout, "setup")
    return {"transport": transport, "kind": kind, "op": op, "passed": passed, "outcome": outcome,
            "detection_ms": detection, "wall_s": round(wall, 1), "note": note,
            "detector": setup[0] if setup else None, "output": p.stdout}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", required=True, help="the built ulfm_conformance")
    ap.add_argument("--transports", default="tcp,shm")
    ap.add_argument("--kinds", default=",".join(KINDS + ["none"]))
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=40, help="seconds per case before it counts as a hang")
    ap.add_argument("--json", help="write every case (with its output) here")
    ap.add_argument("--keep-exit-codes", action="store_true",
                    help="the control experiment: exit(n) ends with its code, not by SIGKILL as in a flashrec "
                    "rank's step loop (docs/ulfm-traps.md trap 14)")
    ap.add_argument("--live-on-ms", type=int, default=0,
                    help="the survivors go on this long on the repaired communicator before they report: an MPI "
                    "job that ends under them after the repair fails the case (docs/ulfm-traps.md trap 14)")
    ap.add_argument("--no-exit-notices", action="store_true",
                    help="the control experiment: the program runs without ft::ExitNotices (trap 1)")
    ap.add_argument("--no-pmix-keeper", action="store_true",
                    help="the control experiment under --launch srun: no process keeps a dead task's PMIx connection "
                    "open, so Slurm cancels the step when the task shared its node (docs/ulfm-traps.md trap 17)")
    ap.add_argument("--verbose", action="store_true", help="print the output of failed cases")
    ap.add_argument("--mpirun-args", default="", help="more mpirun arguments, one shell-quoted string (across "
                    "the Slurm test cluster's nodes: \"--prtemca plm_slurm_args --no-kill --map-by ppr:1:node\")")
    ap.add_argument("--control-plane", metavar="HOST",
                    help="run each case under this control_plane_host (the launcher's controller alone): every "
                    "process keeps a control-plane connection and takes the losses it passes on")
    ap.add_argument("--control-bind", default="127.0.0.1",
                    help="the controller's address, one every node reaches (with --control-plane)")
    ap.add_argument("--launch", choices=["mpirun", "srun"], default="mpirun",
                    help="srun: each case is a direct launch, one srun --mpi=pmix step (inside a Slurm allocation)")
    ap.add_argument("--srun-args", default="", help="more srun arguments, one shell-quoted string "
                    "(placement: \"-N3 --ntasks-per-node 1\")")
    a = ap.parse_args()
    host = [a.control_plane, "--bind", a.control_bind, "--"] if a.control_plane else []
    cases = []
    print(f"{'transport':9} {'kind':8} {'op':9} {'outcome':34} {'detect ms':>10} {'wall s':>6}  note", flush=True)
    for transport in a.transports.split(","):
        env_extra = direct_environment(transport) if a.launch == "srun" else {}
        for kind in a.kinds.split(","):
            for op in ([""] if kind == "none" else a.ops.split(",")):
                program_args = (["--no-exit-notices"] if a.no_exit_notices else []) + \
                    (["--keep-exit-codes"] if a.keep_exit_codes else []) + \
                    (["--no-pmix-keeper"] if a.no_pmix_keeper else []) + \
                    (["--live-on-ms", str(a.live_on_ms)] if a.live_on_ms else [])
                c = run_case(a.program, transport, kind, op or "compute", a.ranks, a.timeout, env_extra, program_args,
                             shlex.split(a.mpirun_args), host, a.launch, shlex.split(a.srun_args))
                cases.append(c)
                mark = "" if c["passed"] else "FAIL "
                print(f"{transport:9} {kind:8} {c['op']:9} {mark + c['outcome']:34} {c['detection_ms']:>10} "
                      f"{c['wall_s']:>6}  {c['note']}", flush=True)
                if not c["passed"] and a.verbose:
                    print("    | " + c["output"].replace("\n", "\n    | "), flush=True)
        detectors = {json.dumps(c["detector"], sort_keys=True) for c in cases if c["transport"] == transport and c["detector"]}
        for d in detectors:
            print(f"  {transport}: {d}", flush=True)
    failed = sum(not c["passed"] for c in cases)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(cases, f, indent=1)
    print(f"conformance: {len(cases)} cases, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
