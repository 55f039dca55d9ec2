#!/usr/bin/env python3
"""Unit test of tools/frlib.py's readers on output in the runtime's real formats: one
final_checksum per good run, flashrec-event records in order (a record cut off by a killed
process skipped), the injected fault's time, fr-run's timeout, and the command line it builds.
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
sys.exit(1 if failures else 0)
