#!/usr/bin/env python3
"""Unit test of tools/frlib.py's readers on output in the runtime's real formats: one
final_checksum per good run, flashrec-event records in order (a record cut off by a killed
process skipped), the injected fault's time, fr-run's timeout, and the command line it builds; the event-log follower and launch() around a
stand-in launcher.
Prints PASS or FAIL lines; exit code 1 on any FAIL."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import frlib  # noqa: E402

failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail else ""))
    failures += 0 if ok else 1


OUT = """step 0 loss 22.929081
flashrec: fault injected: role=1:step=25:phase=allreduce:action=kill (pid 31330, unix_us 1795513922872170)
flashrec-event: {"event":"fault_injected","v":1,"fault":"role=1:step=25:phase=allreduce:action=kill","pid":31330,"unix_us":1795513922872178,"action":"kill","step":25,"phase":"allreduce"}
flashrec-event: {"event":"recovery","epoch":1,"tier":1}
flashrec-event: {"event":"recovery","epoch":2,"tier":1
flashrec-event: {"event":"job_stats","median_step_ms":25.6}
the trainer said final_checksum=0123456789abcdef in passing
final_checksum=89abcdef01234567
fr-run: ok in 1.3 s (exit code 0)
"""

job = frlib.Job(OUT, 0, 1.0)
check("checksums: only whole final_checksum= lines", frlib.checksums(OUT) == ["89abcdef01234567"],
      str(frlib.checksums(OUT)))
check("Job.checksum: the one checksum", job.checksum == "89abcdef01234567", str(job.checksum))
two = frlib.Job(OUT + "final_checksum=0000000000000000\n", 0, 1.0)
check("Job.checksum: None when a run printed two", two.checksum is None, str(two.checksum))
check("events: in order, the cut-off record skipped",
      [e["event"] for e in job.events()] == ["fault_injected", "recovery", "job_stats"], str(job.events()))
check("events(name): only that event", [e["epoch"] for e in job.events("recovery")] == [1])
check("event(name): the first record, or None",
      job.event("job_stats") == {"event": "job_stats", "median_step_ms": 25.6} and job.event("nope") is None)
check("fault_injected_us: the record's clock, not the prose line's", job.fault_injected_us() == 1795513922872178,
      str(job.fault_injected_us()))
check("fault_injected_us: None without a fault record",
      frlib.fault_injected_us("step 0 loss 1.0\nflashrec: fault injected: x (pid 1, unix_us 5)\n") is None)
check("hung: fr-run's timeout", frlib.Job("fr-run: FAIL: timed out after 30 s; killed the whole process tree",
                                          1, 30.0).hung and not job.hung)

cmd = frlib.command(2, ["trainer", "--config", "a.yaml"], 30, expect="^final_checksum=")
want = [frlib.FR_RUN, "--timeout", "30", "--expect", "^final_checksum=", "--", frlib.FR_MPIRUN, "-n", "2",
        "trainer", "--config", "a.yaml"]
check("command: fr-run around fr-mpirun", cmd == want, str(cmd))
check("command: several --expect", frlib.command(1, ["x"], 5, expect=["a", "b"])[3:7] == ["--expect", "a", "--expect", "b"])
check("command: the tools exist", all(os.access(p, os.X_OK) for p in (frlib.FR_RUN, frlib.FR_MPIRUN)))

# The event-log follower: a line still being written waits for its newline.
import shutil  # noqa: E402
import time  # noqa: E402
import tempfile  # noqa: E402
work = tempfile.mkdtemp(prefix="test_frlib.")
log_path = os.path.join(work, "job.events.jsonl")
follower = frlib.EventLog(log_path)
check("EventLog: no log yet, no records", follower.records() == [] and frlib.read_events(log_path) == [])
with open(log_path, "w") as f:
    f.write('{"event":"launch","pid":1}\n{"event":"st')
check("EventLog: the half-written line is left out", [r["event"] for r in follower.records()] == ["launch"])
with open(log_path, "a") as f:
    f.write('ep","step":3}\n')
check("EventLog: it is read once complete, after the earlier ones",
      [r["event"] for r in follower.records()] == ["launch", "step"], str(follower.records()))

# launch() around a stand-in launcher (a FAKE flashrec-launch, a shell script: what is under test is
# frlib and fr-run): it writes an event log, leaves a process behind and exits 3.
fake = os.path.join(work, "fake-launch")
with open(fake, "w") as f:
    f.write("""#!/bin/sh
# usage: fake-launch CONFIG --events PATH [--fault F]...
events=$3
echo '{"event":"launch","pid":'$$'}' >> "$events"
sleep 0.3
echo '{"event":"step","step":1}' >> "$events"
# Exits only once the watcher has seen the step (it touches $events.seen; fr-run's timeout bounds
# the wait): on a loaded machine the watcher may not run between this write and the exit.
while [ ! -e "$events.seen" ]; do sleep 0.01; done
echo final_checksum=0123456789abcdef
sleep 30 >/dev/null 2>&1 &
exit 3
""")
os.chmod(fake, 0o755)
seen = []


def watcher(run):
    seen.append(len(run.records()))
    if any(r["event"] == "step" for r in run.records()):
        run.done = True
        open(log_path + ".seen", "w").close()


run = frlib.launch(fake, "train.yaml", log_path, faults=["role=0:step=1:action=kill"], timeout=20, watcher=watcher,
                   context={"mark": "x"})
check("launch: the launcher's own exit code", run.exit_code == 3, str(run.exit_code))
check("launch: the records of its event log", [r["event"] for r in run.events()] == ["launch", "step"])
check("launch: the output and its checksum", run.checksum == "0123456789abcdef")
check("launch: the watcher saw the log grow, and stopped when done",
      seen and seen[0] <= 1 and seen[-1] == 2 and run.running.done and run.running.mark == "x", str(seen))
check("launch: a process left behind is found, reaped and fails the run", run.left_behind and not run.ok,
      str(run.failures))
slow = frlib.launch(fake, "train.yaml", log_path, timeout=0.1)
check("launch: fr-run's timeout: hung, no exit code", slow.hung and slow.exit_code is None and not slow.ok)

# fr-run ends a tree whose mpirun outlives its ranks (PRRTE's trap). A stand-in named prterun (a
# FAKE mpirun, a Python script whose body after the fork is `rank`, then `parent`) never exits.
import json  # noqa: E402
import subprocess  # noqa: E402


def run_fake_mpirun(rank, parent):
    """(fr-run's --result, its output, seconds) for a fake prterun: fork, the child runs `rank`,
    the parent `parent` and then sleeps a minute."""
    fake_mpirun = os.path.join(work, "prterun")
    with open(fake_mpirun, "w") as f:
        f.write(f"#!{sys.executable}\nimport os, time\npid = os.fork()\nif pid == 0:\n{rank}\n{parent}\ntime.sleep(60)\n")
    os.chmod(fake_mpirun, 0o755)
    result_path = os.path.join(work, "lingered.json")
    start = time.monotonic()
    p = subprocess.run([frlib.FR_RUN, "--timeout", "30", "--mpirun-grace", "1", "--result", result_path, "--",
                        fake_mpirun], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(result_path) as f:
        return json.load(f), p.stdout, time.monotonic() - start


# Its "rank" exits after 1 s and is left unreaped.
result, out, took = run_fake_mpirun("    time.sleep(1)\n    os._exit(3)", "")
check("fr-run: an mpirun that outlives its ranks is ended after the grace, not at the timeout",
      result["mpirun_lingered"] and not result["timed_out"] and took < 20, str(result))
check("fr-run: and says so", "after its last rank exited" in out, out[-300:])
# The whole job goes by between two of fr-run's looks (soak.chaos, 2026-11-27: all ranks _exit(76)
# within 0.3 s of the start): the "rank" uses the CPU for 0.1 s and is reaped before the first look.
result, out, took = run_fake_mpirun("    end = time.monotonic() + 0.1\n    while time.monotonic() < end: pass\n"
                                    "    os._exit(76)", "os.waitpid(pid, 0)")
check("fr-run: an mpirun whose ranks all ended before its first look is still ended after the grace",
      result["mpirun_lingered"] and not result["timed_out"] and took < 20, str(result))
# Nested: a script under fr-run runs the lingering FAKE prterun under an inner fr-run (as the
# checkpoint tests do). The inner one ends it after its grace; the outer, with a shorter grace,
# leaves it to the inner and lets the script go on (it had killed the script: ft.checkpoint.crash_whole).
script = os.path.join(work, "nested.py")
with open(script, "w") as f:
    f.write(f"import subprocess, sys\nsubprocess.run([{frlib.FR_RUN!r}, '--timeout', '30', '--mpirun-grace', '3', '--', "
            f"{os.path.join(work, 'prterun')!r}])\nprint('the script went on', flush=True)\n")
outer = subprocess.run([frlib.FR_RUN, "--timeout", "30", "--mpirun-grace", "1", "--", sys.executable, script],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
check("fr-run: an mpirun under a nested fr-run is left to that one; the outer run's script goes on",
      "the script went on" in outer.stdout and outer.returncode == 0, outer.stdout[-400:])
shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failures else 0)
