"""Runs an MPI job the way flashrec's tests and benchmarks do, and reads what it reports.

A job runs under tools/fr-run (timeout, leak check, --expect) and tools/fr-mpirun (mpirun with
ULFM); stdout and stderr come back merged. The records read back are the trainer's
`final_checksum=<16 hex>` line and the runtime's `flashrec-event: {json}` lines (its typed
records, ft/records.hpp: recovery, job_stats, fault_injected, checkpoint, ending_job, ...; never
its prose, which is for people).

    import sys, os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
    import frlib
    job = frlib.run_job(4, [trainer, "--config", path], timeout=120, expect="^final_checksum=")
    job.checksum, job.event("job_stats"), job.events("recovery")
"""
import json
import os
import re
import subprocess
import time

TOOLS = os.path.dirname(os.path.abspath(__file__))
FR_RUN = os.path.join(TOOLS, "fr-run")
FR_MPIRUN = os.path.join(TOOLS, "fr-mpirun")

_CHECKSUM = re.compile(r"^final_checksum=([0-9a-f]{16})$", re.M)
_EVENT = re.compile(r"flashrec-event: (\{.*\})$", re.M)


def command(nprocs, argv, timeout, expect=()):
    """The command line that runs `argv` on `nprocs` processes under fr-run and fr-mpirun."""
    cmd = [FR_RUN, "--timeout", str(timeout)]
    for regex in [expect] if isinstance(expect, str) else expect:
        cmd += ["--expect", regex]
    return cmd + ["--", FR_MPIRUN, "-n", str(nprocs)] + list(argv)


def checksums(text):
    """Every `final_checksum=` value in `text` (a good run prints exactly one)."""
    return _CHECKSUM.findall(text)


def events(text, name=None):
    """The `flashrec-event:` records in `text`, in order; only those of event `name` if given.
    A line cut off mid-record (a killed process) is skipped."""
    out = []
    for m in _EVENT.findall(text):
        try:
            e = json.loads(m)
        except ValueError:
            continue
        if name is None or e.get("event") == name:
            out.append(e)
    return out


def fault_injected_us(text):
    """unix_us of the first injected fault (its fault_injected record), or None."""
    found = events(text, "fault_injected")
    return found[0]["unix_us"] if found else None


class Job:
    """One finished run: its merged output, fr-run's exit code and its wall time."""

    def __init__(self, output, returncode, seconds):
        self.output = output
        self.returncode = returncode
        self.seconds = seconds

    @property
    def checksum(self):
        """The run's final checksum when it printed exactly one, else None."""
        sums = checksums(self.output)
        return sums[0] if len(sums) == 1 else None

    @property
    def hung(self):
        """fr-run killed the job at its timeout."""
        return "timed out after" in self.output

    def events(self, name=None):
        return events(self.output, name)

    def event(self, name):
        """The first record of event `name`, or None."""
        found = events(self.output, name)
        return found[0] if found else None

    def fault_injected_us(self):
        return fault_injected_us(self.output)


def run_job(nprocs, argv, timeout, expect=(), env=None):
    """Runs `argv` on `nprocs` processes under fr-run + fr-mpirun and waits for it."""
    start = time.monotonic()
    p = subprocess.run(command(nprocs, argv, timeout, expect), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True,
                       env=None if env is None else dict(os.environ, **env))
    return Job(p.stdout, p.returncode, time.monotonic() - start)


def pids_with_env(name, value):
    """Processes (other than this one) whose environment has name=value: how a test or benchmark
    finds every process it started, MPI ranks in sessions of their own included. A process that
    exits while it is read is skipped."""
    wanted, pids = f"{name}={value}".encode(), []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if wanted in f.read().split(b"\0"):
                    pids.append(int(d))
        except OSError:
            pass
    return pids
