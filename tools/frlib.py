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

A job under flashrec-launch runs through launch(): the same fr-run around the launcher, its event
log (typed records, one JSON object a line) read back, and a watcher called while it runs that
sees the records as they are written (to kill mpirun at a step, flood the control port, ...):

    run = frlib.launch(launcher, config, events_path, faults=["role=1:step=10:action=kill"])
    run.exit_code, run.checksum, run.events("warm_relaunch")
"""
import json
import os
import re
import signal
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


def read_events(path):
    """The records of a flashrec-launch event log (docs/launcher.md), in order; [] when there is
    none yet. A line the launcher is still writing is left out."""
    return EventLog(path).records()


class EventLog:
    """Follows an event log while the launcher writes it: records() reads only what was appended
    since the last call (a watcher polls every few ms)."""

    def __init__(self, path):
        self.path = path
        self._offset = 0
        self._records = []

    def records(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return self._records
        complete = chunk[: chunk.rfind(b"\n") + 1]
        for line in complete.splitlines():
            if line.strip():
                self._records.append(json.loads(line))
        self._offset += len(complete)
        return self._records


class Running:
    """What a launch() watcher gets while the launcher runs: `proc` (fr-run's process), the event
    log so far (records()), `done` (set it to stop being called), and the `context` given to
    launch() as attributes, for the watcher's own state."""

    def __init__(self, proc, log, context):
        self.proc = proc
        self.log = log
        self.done = False
        for key, value in (context or {}).items():
            setattr(self, key, value)

    def records(self):
        return self.log.records()


class Launch:
    """One finished flashrec-launch run: the launcher's exit code (None when fr-run killed it at
    its timeout), fr-run's verdict (`ok`: no timeout, nothing left behind, `exit_code` as required),
    the merged output, the event log's records and the wall time."""

    def __init__(self, result, ok, output, records, seconds, running):
        self.exit_code = None if result.get("timed_out") else result.get("exit_code")
        self.hung = bool(result.get("timed_out"))
        self.left_behind = bool(result.get("left_behind"))
        self.failures = result.get("failures", [])
        self.ok = ok
        self.output = output
        self.records = records
        self.seconds = seconds
        self.running = running  # the watcher's state, as it left it

    @property
    def checksum(self):
        """The final checksum when the run printed exactly one, else None."""
        sums = checksums(self.output)
        return sums[0] if len(sums) == 1 else None

    def events(self, name=None):
        return [r for r in self.records if name is None or r.get("event") == name]


def launch(launcher, config, events_path, faults=(), extra=(), timeout=240, exit_code=None, env=None,
           watcher=None, context=None, poll_s=0.005):
    """Runs `launcher config --events events_path` (plus --fault for each of `faults`, then
    `extra`) under fr-run: a hard timeout, every process of it reaped, a leak check, and with
    `exit_code` that exit code required. The event log is removed first; the merged output is
    kept beside it (events_path + ".out"). `watcher(running)` is called every `poll_s` while the
    launcher runs, until it sets running.done; records written just before the launcher exits may
    never be shown to it (a loaded machine), so judge the run by the returned Launch's records."""
    if os.path.exists(events_path):
        os.remove(events_path)
    result_path = events_path + ".fr-run.json"
    if os.path.exists(result_path):
        os.remove(result_path)
    cmd = [FR_RUN, "--timeout", str(timeout), "--result", result_path]
    if exit_code is not None:
        cmd += ["--exit-code", str(exit_code)]
    cmd += ["--", launcher, config, "--events", events_path]
    for f in faults:
        cmd += ["--fault", f]
    cmd += list(extra)
    out_path = events_path + ".out"
    start = time.monotonic()
    with open(out_path, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                             env=None if env is None else dict(os.environ, **env))
        running = Running(p, EventLog(events_path), context)
        while p.poll() is None:
            if watcher and not running.done:
                watcher(running)
            time.sleep(poll_s)
    seconds = time.monotonic() - start
    with open(out_path) as f:
        output = f.read()
    try:
        with open(result_path) as f:
            result = json.load(f)
    except (FileNotFoundError, ValueError):
        result = {"failures": ["fr-run wrote no result"]}
    return Launch(result, p.returncode == 0, output, read_events(events_path), seconds, running)


def signal_all(pids, sig):
    """Sends `sig` to each of `pids`; one already gone is skipped."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def state_of(pid):
    """The state letter of /proc/<pid>/stat ("R", "S", "T", "Z", ...); "X" once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _depth_of(pid):
    """How many ancestors `pid` has (0 once it is gone)."""
    depth = 0
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
        depth += 1
    return depth


def _all_threads_stopped(pid):
    """Every thread of `pid` stopped (or gone): the main thread shows "T" while another thread
    may still run for a moment."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return all(state_of(f"{pid}/task/{tid}") in ("T", "t", "Z", "X") for tid in tids)


def _stop_all(find_pids, limit_s):
    deadline = time.monotonic() + limit_s
    stopped = set()
    while True:
        found = find_pids()
        running = [p for p in found if not _all_threads_stopped(p)]
        stopped.update(found)
        if not running or time.monotonic() > deadline:
            return sorted(stopped)
        signal_all(running, signal.SIGSTOP)
        time.sleep(0.005)


def kill_at_once(find_pids, pgid=None, stop_limit_s=2.0):
    """Kills a whole job like a node losing power: nothing in it gets to act on a peer's death.
    `find_pids()` lists its processes (ranks in sessions of their own included); `pgid` is the
    process group of the command that started it.

    Every process is SIGSTOPped first and checked stopped, every thread of it (one still running
    when the others die would start a recovery, or under plain mpirun leave by an exception and
    remove its snapshot segments). Then children die before their parents: a stopped rank whose
    mpirun dies first is left in an orphaned process group, which the kernel wakes with SIGHUP and
    SIGCONT."""
    stopped = _stop_all(find_pids, stop_limit_s)
    signal_all(sorted(stopped, key=_depth_of, reverse=True), signal.SIGKILL)
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    signal_all(find_pids(), signal.SIGKILL)


def run_and_kill_at_step(nprocs, argv, step, timeout, ready=None):
    """Runs a job under plain mpirun (no fr-run) until its leader prints "step N ..." with N >=
    `step` (and, with `ready`, ready() is true at such a line: what the caller needs on disk,
    which an asynchronous writer may still owe on a loaded machine), then kills all of it at
    once (kill_at_once). Returns (the step reached or None, its output so far)."""
    tag = os.urandom(16).hex()
    # stdbuf: the leader's "step N" lines arrive as they are printed, not at the end.
    cmd = [FR_MPIRUN, "-n", str(nprocs), "stdbuf", "-oL", *argv]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env={**os.environ, "FLASHREC_TEST_TAG": tag})
    out, start, reached = [], time.monotonic(), None
    for line in p.stdout:
        out.append(line)
        m = re.match(r"step (\d+) ", line)
        if m and int(m.group(1)) >= step and (ready is None or ready()):
            reached = int(m.group(1))
            break
        if time.monotonic() - start > timeout:
            break
    kill_at_once(lambda: pids_with_env("FLASHREC_TEST_TAG", tag), p.pid)
    p.wait()
    return reached, "".join(out)
