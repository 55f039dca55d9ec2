"""Launcher-level chaos trials for `fault_matrix.py chaos` (issue 15): the job runs under
flashrec-launch (inside tools/fr-run: hard timeout, every process reaped, exit code checked) and
the trial does to it what the in-job grammar cannot:

  mpirun-kill           SIGKILL of mpirun at a random step: the launcher warm-relaunches (tier 2)
  flip-before-relaunch  the launcher is SIGSTOPped, mpirun and every rank SIGKILLed, one byte of a
                        random snapshot segment of the job flipped, the launcher resumed: the
                        relaunch must reject the corrupt copy (or never need it) and use another
  port-garbage          a few seconds of connection flood and malformed frames on the control port
                        while the job runs, with a rank killed in it half of the time
  sigstop-rank          SIGSTOP of a random rank at a random step: declared hung, killed, replaced
  pause-all             the launcher, mpirun and every rank SIGSTOPped together for 1.5-2.5 hang
                        timeouts, then resumed together (a paused VM, the stall of docs/slurm.md):
                        nobody was hung, so no failure, kill, drain or relaunch may follow
  node-kill             (issue 29) every process of one virtual node (its ranks and a hot spare
                        placed on it) SIGKILLed at once at a random step: its snapshots stay in
                        /dev/shm (the node's memory lives), in-job recovery or a relaunch resumes
  node-freeze           (issue 29) every process of one virtual node SIGSTOPped at a random step
                        and never resumed: found by the heartbeats, killed and replaced
  relaunch-node-loss    (issue 29) the whole job killed at once (launcher stopped, as in
                        flip-before-relaunch), and once the warm relaunch's ranks of one virtual node
                        have registered, before the relaunched job runs, every process of that node
                        SIGKILLed: a node lost during a warm relaunch

Each trial draws protection.every (k) like the in-job ones (fault_matrix.py chaos --every), runs
under a job name of its own (`<job>-k<k>[-<job suffix>]`) and is judged like an in-job one, against
the failure-free launch at k = 1: identical (exit 0 and the failure-free checksum of the
same job under the launcher), wrong, hung (fr-run's timeout) or leaked (a process or a segment
of the job left). No launcher category loses state, so none may end in a refusal.
"""
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
sys.path.insert(0, os.path.join(HERE, "..", "launcher"))
import frlib  # noqa: E402
from launch_tests import flood  # noqa: E402

CATEGORIES = ["mpirun-kill", "flip-before-relaunch", "port-garbage", "sigstop-rank", "pause-all",
              "node-kill", "node-freeze", "relaunch-node-loss"]
SHARDS = ["even", "uneven"]
SPARES = ["hot", "spawned"]
# The verdicts of a trial, the columns of the soak's table (issue 29).
VERDICTS = ["identical", "clean refusal", "needless refusal", "wrong", "hung", "leaked"]
# job_end outcomes that refuse to go on: the job ends without its result.
REFUSALS = ("state_lost", "spares_exhausted", "relaunch_budget_spent", "restart_loop")
TRIAL_ENV = "FLASHREC_CHAOS_TRIAL"  # marks every process of one trial (fr-run's tag is its own)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


class LaunchChaos:
    def __init__(self, launcher, config, workdir, timeout, snapshots, job_name=None):
        self.launcher = launcher
        self.snapshots = snapshots
        self.workdir = workdir
        self.timeout = timeout
        with open(config) as f:
            self.text = f.read()
        if job_name:
            self.text = re.sub(r"(name:\s*)[A-Za-z0-9_-]+", rf"\g<1>{job_name}", self.text, count=1)
        self.base_job = re.search(r"name:\s*([A-Za-z0-9_-]+)", self.text).group(1)
        self.steps = int(re.search(r"steps:\s*(\d+)", self.text).group(1))
        self.ranks = int(re.search(r"dp:\s*(\d+)", self.text).group(1))
        self.hang_ms = int(re.search(r"hang_timeout_ms:\s*(\d+)", self.text).group(1))
        self.refs = {}
        os.makedirs(workdir, exist_ok=True)
        self.use(("even", "hot"))

    def use(self, setting):
        """Writes the config of one setting (shards, spare) and makes it the current job."""
        shards, spare = setting
        text = self.text
        suffix = ("" if shards == "even" else "-u") + ("" if spare == "hot" else "-s")
        text = re.sub(r"(name:\s*)[A-Za-z0-9_-]+", rf"\g<1>{self.base_job}{suffix}", text, count=1)
        if shards == "uneven":
            # One hidden unit fewer: the parameter count is no longer a multiple of dp.
            text = re.sub(r"hidden:\s*(\d+)", lambda m: f"hidden: {int(m.group(1)) - 1}", text, count=1)
        if spare == "spawned":
            text = re.sub(r"hot_spares:\s*\d+", "hot_spares: 0", text)
        self.setting = setting
        self.job = f"{self.base_job}{suffix}"
        self.config = os.path.join(self.workdir, f"{self.job}.yaml")
        with open(self.config, "w") as f:
            f.write(text)

    def segments(self):
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"flashrec.{self.job}."))

    def launch(self, faults=(), watcher=None):
        """Runs the launcher (frlib.launch: under fr-run, exit 0 required); watcher(run) is polled
        while it runs. Every process of the trial carries TRIAL_ENV=run.trial."""
        trial = uuid.uuid4().hex
        events = os.path.join(self.workdir, f"{self.job}.chaos.events.jsonl")
        return frlib.launch(self.launcher, self.config, events, faults=faults, timeout=self.timeout, exit_code=0,
                            env={TRIAL_ENV: trial}, watcher=watcher, context={"trial": trial, "note": ""},
                            poll_s=0.01)

    def baseline(self):
        if self.setting not in self.refs:
            run = self.launch()
            sums = frlib.checksums(run.output)
            if len(sums) != 1 or not run.ok:
                print(run.output[-3000:])
                sys.exit(f"failure-free launch of the chaos job {self.job} failed")
            self.refs[self.setting] = sums[0]
        return self.refs[self.setting]

    # --- what each category does while the job runs ---------------------------------------------

    def _pids(self, state):
        return frlib.pids_with_env(TRIAL_ENV, state.trial)

    def _launcher_pid(self, state):
        for pid in self._pids(state):
            cmd = _cmdline(pid)
            if cmd and os.path.basename(cmd[0]) == b"flashrec-launch":
                return pid
        return None

    def _ended(self, state):
        """A role's loop has ended (job_stats, role_finished): too late to hit the job."""
        return any(e["event"] in ("job_stats", "role_finished") for e in state.records())

    def _kill_missed(self, run, category, needed):
        """The kill came after every role had finished its loop and said so (role_finished): the
        job was complete, nothing was hit. The records the watcher reads lag, so it cannot know
        beforehand; the trial runs again."""
        finished = {e.get("role") for e in run.records if e["event"] == "role_finished"}
        return (category in ("mpirun-kill", "flip-before-relaunch", "node-kill", "relaunch-node-loss")
                and len(finished) >= self.ranks and not any(e["event"] in needed for e in run.records))

    @staticmethod
    def _nodes(ev):
        """{virtual node: [roles]} of the newest layout record: the nodes with active ranks, and the
        hot spares placed on them (a spare registers as spare:<rank>)."""
        layout = next((e for e in reversed(ev) if e["event"] == "layout"), None)
        if layout is None:
            return {}
        nodes = {n["node"]: [r["role"] for r in n["ranks"]] for n in layout.get("nodes", [])}
        for spare in layout.get("hot_spares") or []:
            if spare["node"] in nodes:
                nodes[spare["node"]].append(f"spare:{spare['rank']}")
        return nodes

    @staticmethod
    def _role_pids(ev, since=0):
        """{role: pid} of the newest rank_registered record of each role from record `since` on."""
        pids = {}
        for e in ev[since:]:
            if e["event"] == "rank_registered" and e.get("role") is not None:
                pids[e["role"]] = e["pid"]
        return pids

    def _kill_job_at_once(self, state, launcher):
        """Every process of the trial but the launcher and fr-run killed at once (frlib.kill_at_once),
        like its nodes losing power; the caller has stopped the launcher."""
        frlib.kill_at_once(lambda: [p for p in self._pids(state) if p not in (launcher, state.proc.pid)])

    def _progress(self, state):
        ev = state.records()
        mpirun = next((e["pid"] for e in reversed(ev) if e["event"] == "launch"), None)
        step = max((e["step"] for e in ev if e["event"] == "step"), default=-1)
        running = any(e["event"] == "job_running" for e in ev)
        if step >= self.steps * 9 // 10 or any(e["event"] == "job_end" for e in ev):
            # Too late to act on (the watcher saw the step tags late, on a loaded machine):
            # the trial runs again rather than judging a job nothing happened to.
            state.late = True
            return ev, None, -1, False
        return ev, mpirun, step, running

    def config_for(self, every="1", setting=None, job_suffix=""):
        """(train.yaml, job name) of a trial at protection.every = `every` (`setting`: what goes
        inside protection: {...}, e.g. "every: 4"): the job renamed <job>-k<every>[-<job_suffix>]
        (its segments and event log), written beside the event logs. At k = 1 without a suffix,
        the config itself."""
        if every == "1" and not job_suffix:
            return self.config, self.job
        with open(self.config) as f:
            text = f.read()
        job = f"{self.job}-k{every}" + (f"-{job_suffix}" if job_suffix else "")
        text = re.sub(r"(job:\s*\{\s*name:\s*)([\w-]+)", rf"\g<1>{job}", text)
        if every != "1":
            text += "protection: {" + (setting or f"every: {every}") + "}\n"
        path = os.path.join(self.workdir, f"{job}.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path, job

    def trial(self, rng, t, category, every="1", setting=None, job_suffix=""):
        """One trial at protection.every = `every` (config_for): (name, verdict, output, seconds).
        Judged against the failure-free launch at k = 1 of the same shards and spare (drawn here):
        the state is the same for every k."""
        self.use((rng.choice(SHARDS), rng.choice(SPARES)))
        want = self.baseline()
        config, job = self.config, self.job
        self.config, self.job = self.config_for(every, setting, job_suffix)
        try:
            name, verdict, output, seconds = self._trial(rng, t, category, want)
        finally:
            self.config, self.job = config, job
        return name.replace(": launcher ", f": launcher k={every} ", 1), verdict, output, seconds

    def _trial(self, rng, t, category, want):
        at = rng.randrange(self.steps // 10, self.steps * 2 // 3)
        faults, watcher = [], None
        if category == "mpirun-kill":
            def watcher(state):
                _, mpirun, step, _ = self._progress(state)
                if mpirun and step >= at:
                    state.done = True
                    state.late = mpirun not in self._pids(state) or self._ended(state)  # the log lagged
                    if not state.late:
                        frlib.signal_all([mpirun], signal.SIGKILL)
                    state.note = f"SIGKILL mpirun at step {step}"
        elif category in ("node-kill", "node-freeze"):
            pick = rng.random()
            sig = signal.SIGKILL if category == "node-kill" else signal.SIGSTOP

            def watcher(state):
                ev, mpirun, step, running = self._progress(state)
                if not (mpirun and running and step >= at):
                    return
                nodes = self._nodes(ev)
                pids = self._role_pids(ev)
                if not nodes:
                    return
                state.done = True
                node = sorted(nodes)[int(pick * len(nodes))]
                victims = [pids[r] for r in nodes[node] if r in pids]
                if self._ended(state):
                    state.late = True
                    return
                # All at once: stop every process of the node, then (for a kill) SIGKILL them.
                frlib.signal_all(victims, signal.SIGSTOP)
                if sig == signal.SIGKILL:
                    frlib.signal_all(victims, signal.SIGKILL)
                state.note = (f"{'SIGKILL' if sig == signal.SIGKILL else 'SIGSTOP'} node {node} "
                              f"({', '.join(nodes[node])}: {len(victims)} processes) at step {step}")
        elif category == "relaunch-node-loss":
            pick = rng.random()

            def watcher(state):
                if getattr(state, "phase", 0) == 0:
                    _, mpirun, step, _ = self._progress(state)
                    if not (mpirun and step >= at):
                        return
                    launcher = self._launcher_pid(state)
                    if launcher is None:
                        state.done, state.note = True, "no launcher process found"
                        return
                    frlib.signal_all([launcher], signal.SIGSTOP)
                    try:
                        if mpirun not in self._pids(state) or self._ended(state):
                            state.done = state.late = True
                            return
                        self._kill_job_at_once(state, launcher)
                        state.note = f"all killed at step {step}"
                        state.phase, state.seen = 1, len(state.records())
                    finally:
                        frlib.signal_all([launcher], signal.SIGCONT)
                    return
                # The warm relaunch: once its ranks of one node have registered (and before its
                # job runs), that node is lost.
                ev = state.records()
                start = next((i for i in range(state.seen, len(ev)) if ev[i]["event"] == "launch"), None)
                if start is None:
                    return
                if any(e["event"] in ("job_running", "job_end") for e in ev[start:]):
                    state.done = True
                    state.missed_relaunch = True
                    state.note += "; the relaunched job ran before its node's ranks were seen"
                    return
                nodes = self._nodes(ev)
                pids = self._role_pids(ev, start)
                node = sorted(nodes)[int(pick * len(nodes))] if nodes else None
                if node is None or not all(r in pids for r in nodes[node] if not r.startswith("spare")):
                    return
                state.done = True
                victims = [pids[r] for r in nodes[node] if r in pids]
                frlib.signal_all(victims, signal.SIGSTOP)
                frlib.signal_all(victims, signal.SIGKILL)
                state.note += (f"; node {node} ({len(victims)} processes) SIGKILLed in the warm relaunch "
                               f"(attempt {ev[start].get('attempt')})")
        elif category == "flip-before-relaunch":
            def watcher(state):
                _, mpirun, step, _ = self._progress(state)
                if not (mpirun and step >= at):
                    return
                state.done = True
                launcher = self._launcher_pid(state)
                if launcher is None:
                    state.note = "no launcher process found"
                    return
                # The relaunch must not start before the byte is flipped: the launcher waits
                # stopped while its job dies all at once, like a node losing power.
                frlib.signal_all([launcher], signal.SIGSTOP)
                try:
                    if mpirun not in self._pids(state) or not self.segments() or self._ended(state):
                        # The log's step records lag (the job runs ~150 steps/s): its loop had
                        # ended already. Run the trial again rather than judge a job nothing hit.
                        state.late = True
                        return
                    self._kill_job_at_once(state, launcher)
                    state.note = f"all killed at step {step}; " + self.flip(rng)
                finally:
                    frlib.signal_all([launcher], signal.SIGCONT)
        elif category == "port-garbage":
            if rng.random() < 0.5:
                faults = [f"role={rng.randrange(self.ranks)}:step={at}:phase={rng.choice(['forward', 'sync', 'allreduce'])}"
                          ":action=kill"]
            seconds = rng.uniform(1.0, 4.0)

            def watcher(state):
                ev, _, _, running = self._progress(state)
                endpoint = next((e["control"] for e in ev if e["event"] == "layout"), None)
                if endpoint and running:
                    state.done = True
                    counts = flood(endpoint, random.Random(rng.random()), seconds, workers=8)
                    state.note = f"flood {seconds:.1f} s: {counts}"
        elif category == "sigstop-rank":
            victim = f"dp{rng.randrange(self.ranks)}.tp0.pp0"

            def watcher(state):
                ev, _, step, _ = self._progress(state)
                pid = next((e["pid"] for e in reversed(ev) if e["event"] == "rank_registered"
                            and e.get("role") == victim), None)
                if pid and step >= at:
                    frlib.signal_all([pid], signal.SIGSTOP)
                    state.done, state.note = True, f"SIGSTOP {victim} (pid {pid}) at step {step}"
        elif category == "pause-all":
            pause = rng.uniform(1.5, 2.5) * self.hang_ms / 1000

            def watcher(state):
                _, mpirun, step, _ = self._progress(state)
                if not (mpirun and step >= at):
                    return
                state.done = True
                # The whole job, launcher included, stops at once and resumes at once: what a
                # paused VM (or the machine-wide stall of docs/slurm.md) looks like. Nobody was
                # hung, so nobody may be killed for it.
                pids = [p for p in self._pids(state) if p != state.proc.pid]
                frlib.signal_all(pids, signal.SIGSTOP)
                time.sleep(pause)
                frlib.signal_all(pids, signal.SIGCONT)
                state.note = f"{len(pids)} processes stopped for {pause:.1f} s at step {step}"
        else:
            raise ValueError(category)
        needed = {"mpirun-kill": ("warm_relaunch",), "flip-before-relaunch": ("warm_relaunch",),
                  "sigstop-rank": ("hang_kill",), "port-garbage": ("recovery",) if faults else ("job_end",),
                  "pause-all": ("job_end",), "node-kill": ("recovery", "warm_relaunch"),
                  "node-freeze": ("hang_kill",), "relaunch-node-loss": ("warm_relaunch",)}[category]
        for attempt in range(3):
            run = self.launch(faults, watcher)
            state = run.running
            if (state.done and not getattr(state, "late", False) and not getattr(state, "missed_relaunch", False)
                    and not self._kill_missed(run, category, needed)):
                break
            print(f"     (chaos {t}: the job ended before the trial could act; running it again)", flush=True)
        left = self.segments()
        if left:
            subprocess.run(["rm", "-f"] + [os.path.join("/dev/shm", n) for n in left])
        verdict = self.judge(run, want, state_gone=False)
        # What the launcher must have done about it (a trial that did nothing proves nothing).
        ev = run.records
        if verdict == "identical" and not any(e["event"] in needed for e in ev):
            verdict = "wrong"
            state.note += f"; no {' or '.join(needed)} record"
        if category == "pause-all":
            taken = [(e["event"], e.get("role") or e.get("node")) for e in ev
                     if e["event"] in ("failure", "hang_kill", "node_drained", "warm_relaunch")]
            if taken and verdict == "identical":
                verdict = "wrong"
                state.note += f"; the pause was taken for a failure: {taken}"
        if category == "flip-before-relaunch":
            rejected = [e.get("store") for e in ev if e["event"] == "snapshot_rejected"]
            state.note += f"; rejected {rejected}" if rejected else "; the flipped copy was not needed"
        if (not state.done or getattr(state, "late", False) or getattr(state, "missed_relaunch", False)
                or self._kill_missed(run, category, needed)):
            verdict = "wrong"
            state.note = "the trial never got to act (the job ended first)"
        shards, spare = self.setting
        name = f"chaos {t}: launcher {shards} {spare} {category} ({state.note}{'; ' + ' '.join(faults) if faults else ''})"
        return name, verdict, run.output, run.seconds

    @staticmethod
    def judge(run, want, state_gone):
        """The verdict of one launch, from fr-run's result and the launcher's typed records: a
        refusal is a job_end whose outcome refuses to go on (REFUSALS); clean where the state was
        truly gone, needless where a copy of it survived."""
        end = next((e for e in reversed(run.records) if e["event"] == "job_end"), {})
        if run.hung:
            return "hung"
        if run.left_behind:
            return "leaked"
        if run.exit_code == 0 and frlib.checksums(run.output) == [want]:
            return "identical"
        if end.get("outcome") in REFUSALS and frlib.checksums(run.output) == []:
            return "clean refusal" if state_gone else "needless refusal"
        return "wrong"

    def flip(self, rng):
        """Flips one byte in the middle of the newest committed slot of a random store of the job
        (an own snapshot or a ring copy), as flashrec-snapshots verify lists them; says which."""
        listing = subprocess.run([self.snapshots, "verify", self.job], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True).stdout
        slots = re.findall(r"^ok\s+(\S+)\s+version (\d+) \(epoch \d+, slot (\d)\)", listing, re.M)
        if not slots:
            return "no verified store to flip: " + listing[-300:]
        key, version, slot = rng.choice(slots)
        name = f"flashrec.{self.job}.{key}.{slot}"
        path = os.path.join("/dev/shm", name)
        with open(path, "r+b") as f:
            size = f.seek(0, 2)
            off = rng.randrange(size // 4, 3 * size // 4)
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ (1 << rng.randrange(8))]))
        return f"flipped byte {off} of {name} (version {version})"
