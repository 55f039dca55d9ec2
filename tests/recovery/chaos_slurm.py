#!/usr/bin/env python3
"""The chaos soak on the Slurm test cluster (issue 29): whole nodes of slurm/testcluster killed or
frozen during a flashrec-launch job submitted with the sbatch template, as a user would.

  chaos_slurm.py --launcher EXE --trainer EXE --slurm-tool EXE --trials N [--seed S]
                 [--only CAT...] [--cycle] [--job-name NAME] [--launch mpirun|srun]

Categories (each at a random step of a 400-step job on 4 active nodes + 2 spare nodes; the
victim is a random active node other than frnode1, which runs the launcher):

  slurm-node-kill           every process of the node SIGKILLed at once (node.sh kill: cgroup.kill,
                            slurmd and its /dev/shm go too): tier 2, a spare node takes its rank
  slurm-node-freeze         every process of the node stopped (node.sh freeze: cgroup.freeze), thawed
                            only after the job ended: found by the heartbeats, tier 2
  slurm-relaunch-node-loss  a node killed, then a second node of the warm relaunch killed as soon as
                            the launcher's launch record of that relaunch appears: a node lost
                            during a warm relaunch

--launch srun (issue 47): the job runs under direct launch (slurm.launch: srun, recovery.spawn:
false; docs/slurm.md "Direct launch"): every rank and hot spare a task of one srun --mpi=pmix
step, a frozen node found by the node timeout. A node loss is then repaired in-job wherever a hot
spare remained: a trial with a hot spare that lost one node passes only if the launcher's job_end
record says so (warm_relaunches 0, hot_spares_used 1; typed fields, not wording), and is judged
wrong otherwise. slurm-relaunch-node-loss needs a warm relaunch to act in, so under srun it runs
without a hot spare (its first loss then goes to a new step in the same allocation).

Random settings of each trial: shards even or uneven (hidden layer one smaller: 655 parameters
over dp 4), a hot spare on the spare node or none, HDF5 checkpoints every 50 steps or none.

Verdicts, from the launcher's typed event log and Slurm's job state (the final checksum is the one
line every trainer prints, compared with a failure-free run of the same train.yaml under fr-run):
identical; clean refusal (job_end says state_lost / spares_exhausted / ..., and the state was
truly gone: no checkpoint, and the two dead nodes held a role's own snapshot and its ring replica,
i.e. adjacent roles, holder (r + 1) % 4 at one rank a node); needless refusal (a refusal otherwise);
wrong; hung (the job not done within --job-timeout, then scancelled); leaked (a process of the job
or a /dev/shm segment of it left on any node after the job ended).

The cluster is brought up once (under the lock the `slurm` tests take) and torn down at the end;
after each trial the victims are thawed or started again and resumed, and every node must be
idle before the next trial.
"""
import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import frlib  # noqa: E402
from chaos_launch import VERDICTS, REFUSALS  # noqa: E402

TC = os.path.join(ROOT, "slurm", "testcluster")
TEMPLATE = os.path.join(ROOT, "slurm", "templates", "flashrec.sbatch")
CATEGORIES = ["slurm-node-kill", "slurm-node-freeze", "slurm-relaunch-node-loss"]
NODES, ACTIVE, SPARE_NODES, STEPS = 6, 4, 2, 400
LOCK = "/run/lock/flashrec-slurm-tests.lock"


def sh(*argv, timeout=30, check=False):
    r = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stdout[-500:]}")
    return r.stdout


def node_sh(action, node, *rest, timeout=30):
    return sh(os.path.join(TC, "node.sh"), action, node, *rest, timeout=timeout)


class Cluster:
    """The test cluster for the whole soak: up under the slurm tests' lock, down at the end."""

    def __enter__(self):
        os.makedirs(os.path.dirname(LOCK), exist_ok=True)
        self.lock = open(LOCK, "w")
        import fcntl
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        sh(os.path.join(TC, "down.sh"), timeout=60)
        out = sh(os.path.join(TC, "up.sh"), "--nodes", str(NODES), timeout=120, check=True)
        for key, value in re.findall(r"^export (\w+)=(.*)$", out, re.M):
            os.environ[key] = value
        self.dir = tempfile.mkdtemp(prefix="flashrec-slurm-chaos.", dir="/tmp")
        os.chmod(self.dir, 0o755)
        return self

    def __exit__(self, *exc):
        sh(os.path.join(TC, "down.sh"), timeout=90)
        subprocess.run(["rm", "-rf", self.dir])
        self.lock.close()

    @staticmethod
    def state(node):
        return sh("sinfo", "-h", "-N", "-n", node, "-o", "%T", timeout=10).strip().splitlines()[:1] or [""]

    @staticmethod
    def job_state(job):
        m = re.search(r"JobState=(\S+)", sh("scontrol", "show", "job", "-o", str(job), timeout=10))
        return m.group(1) if m else "UNKNOWN"

    def heal(self, tool, killed, frozen):
        """Every node back: thawed, started, resumed, idle."""
        for n in frozen:
            node_sh("thaw", n)
        for n in killed:
            if node_sh("status", n).strip() == "dead":
                node_sh("start", n, timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = {f"frnode{i}": self.state(f"frnode{i}")[0] for i in range(1, NODES + 1)}
            for n, s in states.items():
                if s.startswith("drain") or s.startswith("down") and not s.endswith("*"):
                    sh(tool, "resume", n, timeout=10)
            if all(s == "idle" for s in states.values()):
                return True
            time.sleep(0.5)
        return False


class SlurmChaos:
    def __init__(self, cluster, launcher, trainer, tool, job_name, job_timeout, launch="mpirun", yield_when_idle="auto"):
        self.c, self.launcher, self.trainer, self.tool = cluster, launcher, trainer, tool
        self.job, self.job_timeout, self.refs = job_name, job_timeout, {}
        self.launch = launch
        self.yield_when_idle = yield_when_idle

    def yaml(self, path, setting, ckpt):
        shards, hot, checkpoint = setting
        hidden = 32 if shards == "even" else 31
        text = (f"job: {{name: {self.job}, nodes: {ACTIVE}, ranks_per_node: 1, dp: 4, spare_nodes: {SPARE_NODES}, "
                f"hot_spares: {1 if hot else 0}, steps: {STEPS}, seed: 7}}\n"
                f"launch: {{program: {self.trainer}}}\n"
                f"trainer: {{model: {{input: 16, hidden: {hidden}, output: 4}}, batch_per_rank: 8, lr: 0.01, "
                f"log_every: 100, device_ms: 10}}\n"
                # A launch stuck on a node killed as it started ends in 30 s (startup_stuck), not at
                # the trial's timeout: a relaunch here is up in 1-5 s.
                "detection: {hang_timeout_ms: 3000, startup_timeout_ms: 30000}\n"
                f"slurm: {{launch: {self.launch}, when_spares_exhausted: shrink}}\n")
        if self.launch == "srun":
            text += "recovery: {spawn: false}\n"  # MPI_Comm_spawn has no server under srun
        if self.yield_when_idle != "auto":
            text += f"mpi: {{yield_when_idle: {self.yield_when_idle}}}\n"
        if checkpoint:
            text += f"checkpoint: {{dir: {ckpt}, every_steps: 50}}\n"
        with open(path, "w") as f:
            f.write(text)

    def reference(self, setting):
        """The failure-free checksum of the setting: the same job on this machine under fr-run (the
        result does not depend on placement, ft.mlp_repeatable_and_placement_independent)."""
        if setting not in self.refs:
            path = os.path.join(self.c.dir, "reference.yaml")
            self.yaml(path, setting, os.path.join(self.c.dir, "reference-ckpt"))
            job = frlib.run_job(4 + (1 if setting[1] else 0), [self.trainer, "--config", path], 180)
            if not job.checksum:
                sys.exit("the failure-free reference run failed:\n" + job.output[-3000:])
            self.refs[setting] = job.checksum
            subprocess.run(["rm", "-rf", os.path.join(self.c.dir, "reference-ckpt")])
        return self.refs[setting]

    def leftovers(self):
        """Segments of the job in any live node's /dev/shm, and processes of it on any node."""
        left = []
        for i in range(1, NODES + 1):
            n = f"frnode{i}"
            if node_sh("status", n).strip() != "running":
                continue
            shm = node_sh("exec", n, "ls", "/dev/shm")
            left += [f"{n}:/dev/shm/{s}" for s in shm.split()
                     if s.startswith(f"flashrec.{self.job}.") or s.startswith("flashrec-slurm-job.")]
        for pid in self._job_pids():
            left.append(f"pid {pid} {open(f'/proc/{pid}/comm').read().strip() if os.path.exists(f'/proc/{pid}') else ''}")
        return left

    def _job_pids(self):
        """Processes inside the test nodes' cgroups that belong to the job: the launcher, mpirun,
        PRRTE's daemons and the ranks carry the job's SLURM_JOB_NAME (or are the trainer), and
        the ranks' PMIx connection keepers (ft/pmix_connection_keeper.hpp)."""
        mount = next((line.split()[4] for line in open("/proc/self/mountinfo") if " - cgroup2 " in line), None)
        root = os.path.join(mount or "/sys/fs/cgroup", "flashrec-slurm")
        want = f"SLURM_JOB_NAME={self.job}".encode()
        out = []
        for dirpath, _, files in os.walk(root):
            if "cgroup.procs" not in files:
                continue
            try:
                pids = [int(p) for p in open(os.path.join(dirpath, "cgroup.procs")).read().split()]
            except OSError:
                continue
            for pid in pids:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        env = f.read().split(b"\0")
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        argv0 = f.read().split(b"\0")[0]
                except OSError:
                    continue
                # A rank's PMIx connection keeper (direct launch) carries no environment of the job.
                if want in env or argv0 in (self.trainer.encode(), b"flashrec-pmix-keeper"):
                    out.append(pid)
        return out

    def trial(self, rng, t, category, keep=None, keep_all=False):
        setting = (rng.choice(["even", "uneven"]), rng.random() < 0.5, rng.random() < 0.5)
        if self.launch == "srun" and category == "slurm-relaunch-node-loss":
            setting = (setting[0], False, setting[2])  # a warm relaunch to act in: no hot spare
        want = self.reference(setting)
        at = rng.randrange(STEPS // 10, STEPS // 2)
        pick_a, pick_b = rng.random(), rng.random()
        ckpt = os.path.join(self.c.dir, f"ckpt-{t}")
        cfg = os.path.join(self.c.dir, f"train-{t}.yaml")
        self.yaml(cfg, setting, ckpt)
        events = os.path.join(self.c.dir, f"{self.job}.events.jsonl")
        for p in (events,):
            if os.path.exists(p):
                os.remove(p)
        start = time.monotonic()
        env = dict(os.environ, FLASHREC_LAUNCH=self.launcher)
        jobid = subprocess.run(["sbatch", "--parsable", f"--nodes={NODES}", "--time=10", "-J", self.job,
                                TEMPLATE, cfg], cwd=self.c.dir, env=env, stdout=subprocess.PIPE, text=True,
                               timeout=10, check=True).stdout.strip()
        out_path = os.path.join(self.c.dir, f"{self.job}-{jobid}.out")  # the template's %x-%j.out
        log = frlib.EventLog(events)
        killed, frozen, note, phase, seen, state_gone = [], [], "", 0, 0, False
        deadline = start + self.job_timeout
        hung = False
        first_nodes = None
        while True:
            st = self.c.job_state(jobid)
            if st not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED"):
                break
            if time.monotonic() > deadline:
                hung = True
                sh("scancel", jobid, timeout=10)
                break
            ev = log.records()
            if phase == 0:
                step = max((e["step"] for e in ev if e["event"] == "step"), default=-1)
                launch = next((e for e in reversed(ev) if e["event"] == "launch"), None)
                if launch and step >= at:
                    first_nodes = launch["nodes"]
                    victims = [n for n in launch["nodes"] if n != "frnode1"]
                    a = victims[int(pick_a * len(victims))]
                    if category == "slurm-node-freeze":
                        node_sh("freeze", a)
                        frozen.append(a)
                        note = f"froze {a} at step {step}"
                        phase = 9
                    else:
                        node_sh("kill", a)
                        killed.append(a)
                        note = f"killed {a} at step {step}"
                        phase = 1 if category == "slurm-relaunch-node-loss" else 9
                        seen = len(ev)
            elif phase == 1:
                relaunch = next((e for e in ev[seen:] if e["event"] == "launch"), None)
                if relaunch:
                    victims = [n for n in relaunch["nodes"] if n != "frnode1" and n not in killed]
                    b = victims[int(pick_b * len(victims))]
                    node_sh("kill", b)
                    killed.append(b)
                    ran = any(e["event"] == "job_running" for e in ev[seen:])
                    note += f"; killed {b} in the warm relaunch (attempt {relaunch['attempt']}{', running' if ran else ''})"
                    # Truly gone: no checkpoint written yet (none configured, or the first kill
                    # came before checkpoint.every_steps), and the two dead nodes ran adjacent
                    # roles of the first layout (one held the other's only replica, holder
                    # (r + 1) % 4).
                    checkpointed = setting[2] and any(e["event"] == "checkpoint" for e in ev)
                    ra, rb = first_nodes.index(killed[0]), (first_nodes.index(b) if b in first_nodes else None)
                    state_gone = not checkpointed and rb is not None and (ra - rb) % 4 in (1, 3)
                    phase = 9
            time.sleep(0.1)
        seconds = time.monotonic() - start
        for n in frozen:
            node_sh("thaw", n)
        # The job's processes and segments: gone within 15 s of the job's end (Slurm's cleanup).
        left = []
        for _ in range(30):
            left = self.leftovers()
            if not left:
                break
            time.sleep(0.5)
        output = open(out_path, errors="replace").read() if os.path.exists(out_path) else ""
        records = frlib.read_events(events) if os.path.exists(events) else []
        end = next((e for e in reversed(records) if e["event"] == "job_end"), {})
        # A daemon PRRTE lost while a launch started, and what srun's check of the nodes found.
        for check in (e for e in records if e["event"] == "node_check"):
            note += f"; srun check: {', '.join(check.get('unreachable', [])) or 'every node answered'}"
        # A refused job keeps its segments for a relaunch (as in-job refusals do): not a leak.
        # Whatever is left is removed, so that every trial starts on empty nodes.
        for item in left:
            if ":/dev/shm/" in item:
                node, path = item.split(":", 1)
                node_sh("exec", node, "rm", "-f", path)
        if end.get("outcome") in REFUSALS:
            left = [item for item in left if ":/dev/shm/" not in item]
        sums = frlib.checksums(output)
        if hung:
            verdict = "hung"
        elif left:
            verdict = "leaked"
        elif self.c.job_state(jobid) == "COMPLETED" and sums and sums[-1] == want:
            verdict = "identical"
            if not any(e["event"] in ("warm_relaunch", "cold_restart", "recovery") for e in records):
                verdict, note = "wrong", note + "; no warm_relaunch/recovery record"
        elif end.get("outcome") in REFUSALS and not sums:
            verdict = "clean refusal" if state_gone else "needless refusal"
        else:
            verdict = "wrong"
        # Direct launch: one node lost with a hot spare left must be repaired in-job (tier 1), by the
        # launcher's own typed figures in job_end.
        in_job = {"warm_relaunches": end.get("warm_relaunches"), "hot_spares_used": end.get("hot_spares_used"),
                  "replacements_in_job": end.get("replacements_in_job")}
        must_be_in_job = self.launch == "srun" and setting[1] and category != "slurm-relaunch-node-loss"
        if must_be_in_job and verdict == "identical" and not (end.get("warm_relaunches") == 0
                                                               and (end.get("hot_spares_used") or 0) >= 1):
            verdict = "wrong"
            note += (f"; not repaired in-job although a hot spare remained (warm_relaunches "
                     f"{end.get('warm_relaunches')}, hot_spares_used {end.get('hot_spares_used')})")
        # A node the trial killed or froze is not given to the next job: the launcher drained it.
        drained = {e.get("node") for e in records if e["event"] == "node_drained"}
        undrained = [n for n in killed + frozen if n not in drained]
        if verdict == "identical" and undrained:
            verdict, note = "wrong", note + f"; {', '.join(undrained)} lost but never drained"
        if phase == 0 or (category == "slurm-relaunch-node-loss" and phase == 1):
            verdict, note = "wrong", note + "; the trial never got to act (the job ended first)"
        if not self.c.heal(self.tool, killed, frozen):
            note += "; the cluster did not heal"
            verdict = "wrong"
        shards, hot, checkpoint = setting
        name = (f"chaos {t}: slurm {shards} {'hot' if hot else 'no-hot'} {'ckpt' if checkpoint else 'no-ckpt'} "
                f"{category} ({note}; job_end {end.get('outcome')}{'; left: ' + ', '.join(left[:5]) if left else ''})")
        if keep and (keep_all or verdict not in ("identical", "clean refusal")):
            kept = os.path.join(keep, f"trial-{t}")
            os.makedirs(kept, exist_ok=True)
            for p in (out_path, cfg, events):
                if os.path.exists(p):
                    subprocess.run(["cp", p, kept])
        for p in (out_path, cfg):
            if os.path.exists(p):
                os.remove(p)
        subprocess.run(["rm", "-rf", ckpt])
        self.last_in_job = dict(in_job, must_be_in_job=must_be_in_job, hot=setting[1],
                                node_lost=sum(1 for e in records if e["event"] == "node_lost"))
        return name, verdict, output, seconds


def print_table(results):
    """The soak table of a --results file: verdicts by category and launch, and the in-job check."""
    trials = [json.loads(line) for line in open(results) if line.strip()]
    rows = {}
    for t in trials:
        rows.setdefault((t.get("launch", "mpirun"), t["category"]), []).append(t)
    print(f"{'launch':<7} {'category':<26}" + "".join(f"{k:>17}" for k in VERDICTS) + f"{'s/trial':>9}"
          + f"{'hot: in-job':>13}")
    for (launch, category), ts in sorted(rows.items()):
        counts = [sum(t["verdict"] == k for t in ts) for k in VERDICTS]
        hot = [t for t in ts if t.get("must_be_in_job")]
        in_job = sum(t.get("warm_relaunches") == 0 and (t.get("hot_spares_used") or 0) >= 1 for t in hot)
        print(f"{launch:<7} {category:<26}" + "".join(f"{v:>17}" for v in counts)
              + f"{sum(t['seconds'] for t in ts) / len(ts):>9.1f}" + f"{f'{in_job}/{len(hot)}':>13}")
    bad = sum(t["verdict"] not in ("identical", "clean refusal") for t in trials)
    print(f"{len(trials)} trials, {len(trials) - bad} passed, {bad} failed")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--slurm-tool", required=True, help="flashrec-slurm (resume of the drained nodes)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--seed", type=int, default=int(os.environ.get("FLASHREC_SOAK_SEED", "1")))
    ap.add_argument("--only", nargs="+", choices=CATEGORIES)
    ap.add_argument("--cycle", action="store_true", help="take the categories in turn")
    ap.add_argument("--job-name", default="t-chaos-slurm")
    ap.add_argument("--job-timeout", type=float, default=180)
    ap.add_argument("--results", help="append one chaos_trial JSON record a trial (fault_matrix.py table reads it)")
    ap.add_argument("--keep-failed", metavar="DIR",
                    help="copy a failed trial's job output, event log and train.yaml into DIR/trial-N/")
    ap.add_argument("--keep-all", action="store_true", help="with --keep-failed: every trial's, passed or not")
    ap.add_argument("--launch", choices=["mpirun", "srun"], default="mpirun",
                    help="slurm.launch of every trial's train.yaml (srun: direct launch, issue 47)")
    ap.add_argument("--yield-when-idle", choices=["auto", "true", "false"], default="auto",
                    help="mpi.yield_when_idle of every trial (true: the cluster's nodes share this machine's cores)")
    ap.add_argument("--table", metavar="RESULTS",
                    help="only print the soak table of a --results file (trials of several runs, or of a run cut short)")
    a = ap.parse_args()
    if a.table:
        return print_table(a.table)
    if os.geteuid() != 0:
        print("SKIP: the Slurm test cluster needs root")
        return 77
    if " - cgroup2 " not in open("/proc/self/mountinfo").read():
        print("SKIP: no cgroup v2 hierarchy mounted")
        return 77
    print(f"slurm chaos soak: {a.trials} trials, seed {a.seed}, launch {a.launch}", flush=True)
    rng = random.Random(a.seed)
    pool = a.only or CATEGORIES
    table = dict.fromkeys(VERDICTS, 0)
    rows, secs = {}, {}
    with Cluster() as c:
        soak = SlurmChaos(c, os.path.realpath(a.launcher), os.path.realpath(a.trainer), os.path.realpath(a.slurm_tool),
                          a.job_name, a.job_timeout, a.launch, a.yield_when_idle)
        for t in range(a.trials):
            category = pool[t % len(pool)] if a.cycle else rng.choice(pool)
            name, verdict, out, seconds = soak.trial(rng, t, category, a.keep_failed, a.keep_all)
            table[verdict] += 1
            rows.setdefault(category, dict.fromkeys(VERDICTS, 0))[verdict] += 1
            secs.setdefault(category, []).append(seconds)
            ok = verdict in ("identical", "clean refusal")
            print(f"{'ok  ' if ok else 'FAIL'} {name} {verdict}  ({seconds:.1f} s)", flush=True)
            if a.results:
                with open(a.results, "a") as f:
                    f.write(json.dumps({"event": "chaos_trial", "seed": a.seed, "trial": t, "category": category,
                                        "every": "1", "verdict": verdict, "seconds": round(seconds, 2),
                                        "launch": a.launch, "yield_when_idle": a.yield_when_idle, **soak.last_in_job, "name": name}) + "\n")
            if not ok:
                print(out[-2500:], flush=True)
                if a.keep_failed:
                    print(f"(its job output, event log and train.yaml: {os.path.join(a.keep_failed, f'trial-{t}')})",
                          flush=True)
    print(f"{'category':<26}" + "".join(f"{k:>18}" for k in table) + f"{'s/trial':>9}")
    for category, row in sorted(rows.items()):
        s = secs[category]
        print(f"{category:<26}" + "".join(f"{v:>18}" for v in row.values()) + f"{sum(s) / len(s):>9.1f}")
    print("slurm chaos soak: " + " / ".join(f"{k} {v}" for k, v in table.items())
          + f" (trials {a.trials}, seed {a.seed}, launch {a.launch})")
    bad = sum(v for k, v in table.items() if k not in ("identical", "clean refusal"))
    print(f"{a.trials - bad} passed, {bad} failed")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # ctest's timeout: tear the cluster down
    sys.exit(main())
