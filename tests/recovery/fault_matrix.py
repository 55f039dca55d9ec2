#!/usr/bin/env python3
"""Fault-injection runs of the example trainer, judged against a failure-free run.

  fault_matrix.py --trainer EXE --config-dir DIR matrix [--ranks 4 8] [--phases ...]
  fault_matrix.py --trainer EXE --config-dir DIR scenarios
  fault_matrix.py --trainer EXE --config-dir DIR soak --trials N [--seed S]
  fault_matrix.py --trainer EXE --config-dir DIR live-nodes
  fault_matrix.py --trainer EXE --config-dir DIR uneven
  fault_matrix.py --trainer EXE --config-dir DIR every --every K... [--phases ...]
  fault_matrix.py --trainer EXE --config-dir DIR every-diverged
  fault_matrix.py --trainer EXE --config-dir DIR every-auto [--phases ...]
  fault_matrix.py --trainer EXE --config-dir DIR chaos --trials N [--seed S] [--only CAT...] [--cycle]
                  [--snapshots EXE] [--launcher EXE --launch-config YAML --workdir DIR]
                  [--results FILE] [--job-prefix P] [--launch-job-name NAME]
  fault_matrix.py --trainer X --config-dir X table FILE...   (the table of chaos --results files)

chaos draws seeded trials from the in-job categories (and, with --launcher, the launcher-level
ones of chaos_launch.py) and prints a table by category: identical / clean refusal (state truly
gone) / needless refusal / wrong / hung / leaked (docs/limitations.md, "The chaos soak").
tests/recovery/chaos_slurm.py adds whole nodes of the Slurm test cluster (issue 29).

Every run goes through tools/fr-run (hard timeout, every process reaped) and
tools/fr-mpirun. A run passes when it prints the same final_checksum as the failure-free run
of the same job, emitted the expected number of recovery records, and no record replayed more
than one step. Prints one line per run, a table, and "N passed, M failed".
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
sys.path.insert(0, TOOLS)
import frlib  # noqa: E402
import chaos_launch  # noqa: E402
PHASES = ["forward", "allreduce", "sync", "optimizer", "replication"]


class Runner:
    def __init__(self, trainer, config_dir, timeout):
        self.trainer = trainer
        self.config_dir = config_dir
        self.timeout = timeout
        self.baselines = {}
        self.results = []

    def run(self, ranks, config, faults, extra_procs=0):
        argv = [self.trainer, "--config", os.path.join(self.config_dir, config)]
        for f in faults:
            argv += ["--fault", f]
        job = frlib.run_job(ranks + extra_procs, argv, self.timeout)
        return {"checksum": job.checksum, "records": job.events("recovery"),
                "diverged": job.events("replay_diverged"), "job_stats": job.events("job_stats"),
                "intervals": job.events("protection_interval"),
                "hung": job.hung, "rc": job.returncode, "seconds": job.seconds, "output": job.output}

    def baseline(self, ranks, config, extra):
        key = (ranks, config)
        if key not in self.baselines:
            r = self.run(ranks, config, [], extra)
            if not r["checksum"]:
                print(r["output"][-3000:])
                sys.exit(f"baseline run of {config} failed")
            self.baselines[key] = r["checksum"]
        return self.baselines[key]

    def check(self, name, ranks, config, faults, expect_recoveries, extra=0, tiers=(1,), slots_ahead=None,
              every=1, judge=None):
        want = self.baseline(ranks, config, extra)
        r = self.run(ranks, config, faults, extra)
        problems = judge(r) if judge else []
        if r["hung"]:
            problems.append("hung")
        if r["checksum"] != want:
            problems.append(f"checksum {r['checksum']} != {want}")
        if len(r["records"]) < expect_recoveries:
            problems.append(f"{len(r['records'])} recovery records, expected {expect_recoveries}")
        for rec in r["records"]:
            # A repair replays at most protection.every steps (a failure while the version at
            # the interval's start was still being snapshotted goes back one interval).
            if rec.get("tier") in (1, 2) and rec.get("steps_replayed", 0) > every:
                problems.append(f"replayed {rec['steps_replayed']} steps")
            if rec.get("tier") not in tiers:
                problems.append(f"tier {rec.get('tier')} not in {tiers}")
            # Snapshot slots the hot spares made while parked and took over (per replacement,
            # one per slot of its own store and of its k=1 held replica); spawned ones make none.
            ahead = rec.get("slots_made_ahead")
            most = 4 * len(rec.get("failed_roles", [])) if "hot" in rec.get("replacement", "") else 0
            allowed = (slots_ahead,) if slots_ahead is not None else range(0, most + 1)
            if ahead not in allowed:
                problems.append(f"slots_made_ahead {ahead}, expected one of {list(allowed)}")
        ok = not problems
        rec = r["records"][0] if r["records"] else {}
        detail = (f"{rec.get('replacement', '-'):>8} R={rec.get('recovery_version', '-')} "
                  f"ahead={rec.get('slots_made_ahead', '-')} "
                  f"replayed={rec.get('steps_replayed', '-')} recovery={rec.get('total_ms', '-')}ms")
        print(f"{'ok  ' if ok else 'FAIL'} {name:<48} {detail}  ({r['seconds']:.1f} s)"
              + ("" if ok else "  <- " + "; ".join(problems)), flush=True)
        if not ok:
            print(r["output"][-2500:], flush=True)
        self.results.append((name, ok, r))
        return ok

    def summary(self):
        passed = sum(1 for _, ok, _ in self.results if ok)
        failed = len(self.results) - passed
        print(f"{passed} passed, {failed} failed")
        return 0 if failed == 0 else 1


def configs(ranks, shards="even"):
    # (config, extra processes) for a hot spare and for a spawned one. shards="even" keeps each
    # ring holder's own shard the size of the one it holds (node-aware, holder r + ranks/2);
    # any other value names a layout of UNEVEN (8 ranks, ring placement: holder r + 1).
    if shards != "even":
        return {"hot": (f"rec-8x{shards}-hot.yaml", 2), "spawned": (f"rec-8x{shards}.yaml", 0)}
    return {"hot": (f"rec-{ranks}-hot.yaml", 2), "spawned": (f"rec-{ranks}.yaml", 0)}


# Uneven ZeRO shards, 8 ranks: 676 parameters (84 or 85 per role) on 8 x 1 and 4 x 2 virtual
# nodes, and 4 parameters (every other role's shard empty) on 2 x 4.
UNEVEN = ["1-uneven", "4x2-uneven", "2x4-empty"]
RANKS_PER_NODE = {"1-uneven": 1, "4x2-uneven": 2, "2x4-empty": 4}  # block placement


def job_name(config_file):
    with open(config_file) as f:
        return f.read().split("name: ", 1)[1].split(",", 1)[0]


def uneven(r):
    """Uneven and empty shards on every layout and spare kind: the ring holder of a dead role
    serves a shard of another size than its own (the defect: state lost, exit 76)."""
    for shards in UNEVEN:
        for kind, (config, extra) in configs(8, shards).items():
            cases = [("exit(42) in replication, role 3", ["role=3:step=16:phase=replication:action=exit=42"], 1),
                     ("kill in forward, role 2", ["role=2:step=9:phase=forward:action=kill"], 1),
                     ("kill in optimizer, role 7 (its holder: role 0)", ["role=7:step=12:phase=optimizer:action=kill"], 1),
                     ("two failures, roles 1 and 4", ["role=1:step=14:phase=allreduce:action=kill",
                                                      "role=4:step=14:phase=allreduce:action=kill"], 1)]
            for what, faults, expect in cases:
                r.check(f"8x{shards} {kind:>7}: {what}", 8, config, faults, expect, extra)


def matrix(r, ranks_list, phases):
    for ranks in ranks_list:
        for kind, (config, extra) in configs(ranks).items():
            for phase in phases:
                r.check(f"{ranks} ranks, {kind:>7}, kill in {phase}", ranks, config,
                        [f"role=1:step=12:phase={phase}:action=kill"], 1, extra)


def every_configs(k):
    return {"hot": (f"every-{k}-hot.yaml", 2), "spawned": (f"every-{k}.yaml", 0)}


def judge_interval(k, fault_step):
    """What a repair under protection.every = k must record: a version that is a multiple of k
    at or before the failure, the steps since it replayed (their cost beside them), and no
    replayed version that hashes differently from before the failure."""
    def judge(r):
        problems = [f"replay_diverged: {d}" for d in r["diverged"]]
        for rec in r["records"][:1]:
            v, replayed = rec.get("recovery_version", -1), rec.get("steps_replayed", -1)
            if rec.get("protection_every") != k:
                problems.append(f"protection_every {rec.get('protection_every')} != {k}")
            if v % k != 0 or not fault_step - k <= v <= fault_step:
                problems.append(f"recovery_version {v}: not a multiple of {k} in [{fault_step - k}, {fault_step}]")
            # The furthest step a survivor reached: the failed step, or the one before it.
            if not fault_step - v - 1 <= replayed <= fault_step - v:
                problems.append(f"steps_replayed {replayed} for a failure in step {fault_step} and version {v}")
            if rec.get("replay_ms") is None or rec["replay_ms"] < 0:
                problems.append(f"replay_ms {rec.get('replay_ms')}")
        for stats in r["job_stats"]:
            if stats.get("protection_every") != k or stats.get("snapshots", 0) > 30 // k + 2:
                problems.append(f"job_stats: protection_every {stats.get('protection_every')}, "
                                f"{stats.get('snapshots')} snapshots for 30 steps")
        return problems
    return judge


def every(r, ks, phases):
    """protection.every = k: a kill at every offset within an interval (0 .. k-1), in each phase,
    hot and spawned, ends bitwise identical to the failure-free run (which is the same for every k)."""
    counts = {}
    for k in ks:
        first = 2 * k if 2 * k + k < 30 else k  # the third interval: versions before it exist
        for kind, (config, extra) in every_configs(k).items():
            for offset in range(k):
                step = first + offset
                for phase in phases:
                    ok = r.check(f"every {k}, {kind:>7}, offset {offset}, step {step}, kill in {phase}", 4, config,
                                 [f"role=1:step={step}:phase={phase}:action=kill"], 1, extra, every=k,
                                 judge=judge_interval(k, step))
                    row = counts.setdefault(k, [0, 0])
                    row[0 if ok else 1] += 1
    if 8 in ks:
        every_scenarios(r)
    sums = {k: r.baselines[(4, every_configs(k)["hot"][0])] for k in ks}
    same = len(set(sums.values())) == 1
    print("failure-free checksum by k: " + ", ".join(f"k={k} {v}" for k, v in sums.items()) +
          (" (identical)" if same else " <- DIFFER"))
    for k, (passed, failed) in counts.items():
        print(f"every {k}: {passed} identical, {failed} not")
    if not same:
        r.results.append(("failure-free checksums identical across k", False, {}))


def every_scenarios(r):
    """k = 8, more than one failure: the repairs replay (part of) the same interval again."""
    for kind, (config, extra) in every_configs(8).items():
        # Two failures in one interval: the second repair restores version 16 again.
        r.check(f"every 8, {kind:>7}, roles 1 and 3 die in steps 17 and 21", 4, config,
                ["role=1:step=17:phase=forward:action=kill", "role=3:step=21:phase=allreduce:action=kill"], 2, extra,
                every=8, judge=lambda res: [f"replay_diverged: {d}" for d in res["diverged"]])
        # The replacement takes only the role's faults beyond the failure: it replays 16..17 and
        # dies at 22, not again at 18 (that fault fired in the process it replaced).
        r.check(f"every 8, {kind:>7}, the replacement dies too", 4, config,
                ["role=1:step=18:phase=forward:action=kill", "role=1:step=22:phase=sync:action=kill"], 2, extra,
                every=8, judge=lambda res: [f"replay_diverged: {d}" for d in res["diverged"]])


def judge_auto(fault_step, max_every):
    """What a repair under protection.every = auto must record: a version at or before the
    failure, at most max_every steps replayed (k <= max_every), the k in use as protection_every,
    no replayed version that hashes differently; job_stats says auto; every protection_interval
    record names a power of two up to max_every, taken at a multiple of it, with its reason."""
    choices = [1 << i for i in range(max_every.bit_length()) if 1 << i <= max_every]
    def judge(r):
        problems = [f"replay_diverged: {d}" for d in r["diverged"]]
        for rec in r["records"][:1]:
            v, replayed = rec.get("recovery_version", -1), rec.get("steps_replayed", -1)
            if not fault_step - 2 * max_every <= v <= fault_step:
                problems.append(f"recovery_version {v} for a failure in step {fault_step}")
            if not 0 <= replayed <= max_every:
                problems.append(f"steps_replayed {replayed} > max_every {max_every}")
            if rec.get("protection_every") not in choices:
                problems.append(f"protection_every {rec.get('protection_every')} not in {choices}")
        for stats in r["job_stats"]:
            if not stats.get("protection_auto") or stats.get("protection_every") not in choices:
                problems.append(f"job_stats: protection_auto {stats.get('protection_auto')}, "
                                f"protection_every {stats.get('protection_every')}")
        for i in r["intervals"]:
            if i.get("every") not in choices or i.get("step", 1) % max_every or not i.get("reason"):
                problems.append(f"protection_interval {i}")
        return problems
    return judge


def every_auto(r, phases):
    """protection.every = auto (max_every 4): a kill at each offset of a period, in each phase,
    hot and spawned, ends bitwise identical to the failure-free run of the same job with k = 1
    (rec-4*.yaml: the same job but its name). The choice differs from run to run (it follows the
    measured times); the state must not. Counts the k each run chose."""
    k_seen = {}
    base = {"hot": ("rec-4-hot.yaml", 2), "spawned": ("rec-4.yaml", 0)}
    for kind, (config, extra) in {"hot": ("every-auto-hot.yaml", 2), "spawned": ("every-auto.yaml", 0)}.items():
        want = r.baseline(4, base[kind][0], base[kind][1])
        # The same job at k = 1 (rec-4*: only the name differs) and under auto: the same state.
        free = r.baseline(4, config, extra)
        if free != want:
            print(f"FAIL failure-free {config} {free} != {base[kind][0]} {want}", flush=True)
            r.results.append((f"failure-free auto = k 1 ({kind})", False, {}))
        for offset in range(4):
            step = 12 + offset
            for phase in phases:
                if phase == "replication" and step % 4:
                    continue  # only multiples of max_every are sure to be replicated
                name = f"every auto, {kind:>7}, step {step}, kill in {phase}"
                ok = r.check(name, 4, config, [f"role=1:step={step}:phase={phase}:action=kill"], 1, extra,
                             every=4, judge=judge_auto(step, 4))
                res = r.results[-1][2]
                for i in res["intervals"]:
                    k_seen[i["every"]] = k_seen.get(i["every"], 0) + 1
    # The default budget: k = 1 likely here (a tiny state), one step a period measured unsnapshotted.
    config = "every-auto-default-hot.yaml"
    r.check("every auto (default budget), hot, step 15 (k = 1's unsnapshotted step), kill in forward", 4, config,
            ["role=2:step=15:phase=forward:action=kill"], 1, 2, every=4, judge=judge_auto(15, 4))
    print(f"failure-free checksum at k = 1: {want}; under auto: {free}")
    print("k chosen (protection_interval records over all runs): " +
          (", ".join(f"k={k}: {n}" for k, n in sorted(k_seen.items())) or "none"))
    if not k_seen:
        r.results.append(("auto chose a k at least once (a protection_interval record)", False, {}))


def every_diverged(r):
    """A trainer whose batch is not a function of data_seed() alone: the failure-free run is the
    same, but the replay after a repair computes other steps. dp1 and dp3 hold each other's ring
    copies and die while replicating version 16, so neither commits it anywhere and the repair
    restores 12; dp0 and dp2 replicate only to each other and commit 16 before the failure is
    noticed (the step's 30 ms of device time). When the replay commits 16 again they must report
    replay_diverged."""
    config = "every-4-counter-data.yaml"
    def judge(r):
        if not r["diverged"]:
            return ["no replay_diverged record (expected one for version 16)"]
        bad = [d for d in r["diverged"] if d.get("step") != 16 or d.get("restored_version") != 12]
        if "replay diverged: version 16" not in r["output"]:
            return ["no log line naming the divergence"]
        return [f"unexpected record {d}" for d in bad]
    want = r.baseline(4, config, 2)
    res = r.run(4, config, ["role=1:step=16:phase=replication:action=kill",
                            "role=3:step=16:phase=replication:action=kill"], 2)
    problems = judge(res)
    if res["checksum"] == want:
        problems.append("the replay computed the same state: the test trainer did not diverge")
    ok = not problems
    d = res["diverged"][0] if res["diverged"] else {}
    print(f"{'ok  ' if ok else 'FAIL'} {'counter data, dp1+dp3 die replicating 16':<48} "
          f"diverged={len(res['diverged'])} store={d.get('store', '-')} buffer={d.get('buffer', '-')}"
          + ("" if ok else "  <- " + "; ".join(problems)), flush=True)
    if not ok:
        print(res["output"][-2500:], flush=True)
    r.results.append(("every-diverged", ok, res))
    # The same failure with data drawn from data_seed(): compared, identical, and no record.
    config = "every-4-exact.yaml"
    want = r.baseline(4, config, 2)
    res = r.run(4, config, ["role=1:step=16:phase=replication:action=kill",
                            "role=3:step=16:phase=replication:action=kill"], 2)
    compared = res["output"].count("replay check: version 16 of ")
    problems = [f"replay_diverged: {d}" for d in res["diverged"]]
    if res["checksum"] != want:
        problems.append(f"checksum {res['checksum']} != {want}")
    if compared == 0:
        problems.append("no replayed version was compared")
    ok = not problems
    print(f"{'ok  ' if ok else 'FAIL'} {'exact data, dp1+dp3 die replicating 16':<48} compared={compared} "
          f"diverged={len(res['diverged'])}" + ("" if ok else "  <- " + "; ".join(problems)), flush=True)
    if not ok:
        print(res["output"][-2500:], flush=True)
    r.results.append(("every-exact", ok, res))


def scenarios(r):
    config, extra = configs(4)["hot"]
    r.check("exit(3) instead of SIGKILL", 4, config, ["role=2:step=9:phase=forward:action=exit=3"], 1, extra)
    # Parked since the start, the spare had 28 steps to make its 4 slots (a few KiB each).
    r.check("a hot spare takes over with its slots made ahead", 4, config,
            ["role=1:step=28:phase=forward:action=kill"], 1, extra, slots_ahead=4)
    r.check("two failures in different steps", 4, config,
            ["role=1:step=8:phase=allreduce:action=kill", "role=3:step=20:phase=sync:action=kill"], 2, extra)
    # Ring holders (node-aware, 2 nodes): 0 -> 2, 1 -> 3; 0 and 1 hold nothing of each other.
    r.check("two simultaneous failures, non-adjacent", 4, config,
            ["role=0:step=14:phase=forward:action=kill", "role=1:step=14:phase=forward:action=kill"], 1, extra)
    r.check("failure during recovery", 4, config,
            ["role=1:step=10:phase=forward:action=kill", "role=2:step=10:phase=recovery:action=kill"], 1, extra)
    r.check("hot spare dies while parked, then a failure", 4, config,
            ["role=spare:0:step=0:phase=recovery:action=kill", "role=3:step=16:phase=forward:action=kill"], 1, extra)
    spawned, _ = configs(4)["spawned"]
    r.check("spawned: two failures in different steps", 4, spawned,
            ["role=0:step=6:phase=sync:action=kill", "role=2:step=18:phase=forward:action=kill"], 2, 0)
    # Issue 15 (6): a fault targets whoever holds the role, so the replacement dies too.
    r.check("the replacement dies too (hot)", 4, config,
            ["role=1:step=8:phase=forward:action=kill", "role=1:step=20:phase=optimizer:action=kill"], 2, extra)
    r.check("the replacement dies too (spawned)", 4, spawned,
            ["role=3:step=7:phase=allreduce:action=kill", "role=3:step=19:phase=forward:action=kill"], 2, 0)


def live_nodes(r):
    """Issue 15 (2), in-job half: dp0 and dp2 hold each other's ring copies (node-aware, 2 nodes)
    and die in the same step. Both dead processes' own snapshots are intact in their nodes'
    /dev/shm: dp1 serves dp0's, dp3 serves dp2's, in-job (before: exit 76, state lost)."""
    for kind, (config, extra) in configs(4).items():
        for phase in ["forward", "optimizer", "replication"]:
            r.check(f"owner + holder on live nodes, {kind:>7}, {phase}", 4, config,
                    [f"role=0:step=14:phase={phase}:action=kill", f"role=2:step=14:phase={phase}:action=kill"],
                    1, extra)
    config, extra = configs(8)["hot"]
    r.check("owner + holder on live nodes, 8 ranks", 8, config,
            ["role=1:step=9:phase=sync:action=kill", "role=5:step=9:phase=sync:action=kill"], 1, extra)


def step0(r):
    """Issue 15 (1): a failure in step 0 recovers like one in any later step."""
    for kind, (config, extra) in configs(4).items():
        for phase in ["forward", "replication", "allreduce", "sync"]:
            r.check(f"step 0, {kind:>7}, kill in {phase}", 4, config,
                    [f"role=1:step=0:phase={phase}:action=kill"], 1, extra)
    config, extra = configs(4)["hot"]
    # Owner and ring holder (node-aware, 2 nodes: 0 -> 2) together, before version 0 is anywhere.
    r.check("step 0, owner + holder in replication", 4, config,
            ["role=0:step=0:phase=replication:action=kill", "role=2:step=0:phase=replication:action=kill"],
            1, extra)
    # A death inside the exchange of snapshot layouts as protection starts: the others must not
    # build a ring from a blank part; they agree it failed and repair.
    for role in (0, 3):
        r.check(f"step 0, role {role} killed as protection starts", 4, config,
                [f"role={role}:step=0:phase=protection_start:action=kill"], 1, extra)


def soak(r, trials, seed):
    rng = random.Random(seed)
    for t in range(trials):
        ranks = rng.choice([4, 8])
        kind = rng.choice(["hot", "spawned"])
        shards = rng.choice(["even"] + UNEVEN) if ranks == 8 else "even"
        config, extra = configs(ranks, shards)[kind]
        victim = rng.randrange(ranks)
        phase = rng.choice(PHASES)
        step = rng.randrange(2, 28)
        r.check(f"soak {t}: {ranks} {kind} {shards} role={victim} step={step} {phase}", ranks, config,
                [f"role={victim}:step={step}:phase={phase}:action=kill"], 1, extra)


# --- the chaos soak (issue 15): random combinations, each trial judged ----------------------------

# Ring holders with placement node-aware on 2 nodes (rec-4*: 0,1 on node0, 2,3 on node1): the copy
# of role r is kept by role (r + 2) % 4. For 8 ranks on 2 nodes: (r + 4) % 8. The uneven-shard
# layouts place replicas on the plain ring: (r + 1) % 8.
def holder_of(role, ranks, shards="even"):
    return (role + (ranks // 2 if shards == "even" else 1)) % ranks


def lost_in_memory(dead, ranks, shards):
    per_node = RANKS_PER_NODE[shards]
    return any(holder_of(x, ranks, shards) in dead and
               all(r in dead for r in range(x - x % per_node, x - x % per_node + per_node)) for x in dead)


IN_JOB = ["single", "single", "two-apart", "owner+holder", "during-recovery", "parked-spare",
          "replacement-dies", "two-steps"]


# protection.every as one more random setting of the chaos soak: a fixed k, or auto (max_every 4,
# a budget small enough that k rises above 1 on this trainer's steps).
EVERY = ["1", "2", "3", "4", "8", "auto"]
AUTO = "{every: auto, max_every: 4, overhead_budget: 0.001}"


def period_of(every):
    """The versions snapshotted whatever happens: multiples of k, or of max_every under auto."""
    return 4 if every == "auto" else int(every)


def fit_faults(faults, period, last=28):
    """Keeps the faults valid under the interval: a replication-phase fault fires only while a
    snapshotted version is sent. The first fault's step goes down to a multiple (with every fault
    of that same step, so that simultaneous failures stay simultaneous); a later one goes up (so it
    stays after the first failure: a replacement takes only faults beyond it), or becomes a
    forward-phase fault past the last step."""
    if period == 1:
        return list(faults)
    out = list(faults)
    for i in range(len(out)):
        f = out[i]
        m = re.search(r"(?<=:)step=(\d+):phase=replication", f) or re.match(r"step=(\d+):phase=replication", f)
        if not m:
            continue
        s = int(m.group(1))
        if i == 0:
            new = s - s % period
            out = [re.sub(rf"(^|:)step={s}:", rf"\g<1>step={new}:", g) for g in out]
        else:
            up = -(-s // period) * period
            out[i] = f.replace(m.group(0), f"step={up}:phase=replication" if up <= last else f"step={s}:phase=forward")
    return out


JOB_PREFIX = ""  # --job-prefix: put before every in-job trial's job name


def every_setting(every):
    """What protection: {...} says for a drawn k."""
    return AUTO[1:-1] if every == "auto" else f"every: {every}"


def config_with_every(config_dir, config, every, job_suffix=""):
    """`config` with protection.every set, written under a temporary directory; the config itself
    when every is 1 and there is no job_suffix. job_suffix renames the job (its /dev/shm segments),
    for a soak run beside other checkouts' tests that use the same configs."""
    if every == "1" and not job_suffix and not JOB_PREFIX:
        return config
    with open(os.path.join(config_dir, config)) as f:
        text = f.read()
    if every != "1":
        setting = every_setting(every)
        if re.search(r"^protection:\s*\{", text, re.M):
            text = re.sub(r"^protection:\s*\{", "protection: {" + setting + ", ", text, flags=re.M)
        else:
            text += "protection: {" + setting + "}\n"
    if job_suffix:
        text = re.sub(r"(job:\s*\{\s*name:\s*)([\w-]+)", rf"\g<1>\g<2>-{job_suffix}", text)
    if JOB_PREFIX:
        text = re.sub(r"(job:\s*\{\s*name:\s*)([\w-]+)", rf"\g<1>{JOB_PREFIX}\g<2>", text)
    folder = os.path.join(tempfile.gettempdir(), f"flashrec-chaos-every-{os.getuid()}")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"every-{every}{'-' + job_suffix if job_suffix else ''}-{JOB_PREFIX}{config}")
    with open(path, "w") as f:
        f.write(text)
    return path


def chaos_trial(rng, t, categories=None, cycle=False, every_rng=None, everies=None):
    """One random trial: (name, ranks, kind, faults, expected recoveries, refusal allowed, every).
    k comes from its own generator: a seed draws the same faults as before k was drawn."""
    ranks = rng.choice([4, 4, 8])
    kind = rng.choice(["hot", "spawned"])
    shards = rng.choice(["even", "even"] + UNEVEN) if ranks == 8 else "even"
    pool = categories or IN_JOB
    category = pool[t % len(pool)] if cycle else rng.choice(pool)
    if category in chaos_launch.CATEGORIES:
        return category, None, None, None, None, None, "1"
    if category == "parked-spare" and kind != "hot":
        kind = "hot"
    step = rng.randrange(0, 26)
    phase = rng.choice(PHASES)
    action = rng.choice(["kill", "kill", "exit=" + str(rng.choice([1, 3, 42]))])
    a = rng.randrange(ranks)
    faults, expect, refusal = [], 1, False
    if category == "single":
        faults = [f"role={a}:step={step}:phase={phase}:action={action}"]
    elif category == "two-apart":
        # Two roles on one node: neither holds the other's copy.
        b = a ^ 1
        faults = [f"role={a}:step={step}:phase={phase}:action=kill", f"role={b}:step={step}:phase={phase}:action=kill"]
    elif category == "owner+holder":
        b = holder_of(a, ranks, shards)
        faults = [f"role={a}:step={step}:phase=forward:action=kill", f"role={b}:step={step}:phase=forward:action=kill"]
        # Both ring copies are gone, but the nodes live: a survivor on each dead process's node
        # serves its own snapshot (issue 15, case 2), so no refusal is allowed.
    elif category == "during-recovery":
        b = (a + 1) % ranks
        faults = [f"role={a}:step={step}:phase={phase}:action=kill", f"role={b}:step={step}:phase=recovery:action=kill"]
        # Where b holds a's copy (or a b's), the dead one's own snapshot on its live node serves.
    elif category == "parked-spare":
        faults = ["role=spare:0:step=0:phase=recovery:action=kill", f"role={a}:step={step}:phase={phase}:action=kill"]
    elif category == "replacement-dies":
        later = min(28, step + rng.randrange(3, 10))
        faults = [f"role={a}:step={step}:phase={phase}:action=kill",
                  f"role={a}:step={later}:phase={rng.choice(PHASES)}:action=kill"]
        expect = 2
    else:  # two failures in different steps
        b = rng.randrange(ranks)
        later = min(28, step + rng.randrange(3, 10))
        faults = [f"role={a}:step={step}:phase={phase}:action=kill", f"role={b}:step={later}:phase=forward:action=kill"]
        expect = 2
    if shards != "even" and category in ("two-apart", "owner+holder", "during-recovery"):
        # The ring layouts with 1 or 2 ranks a node: a dead role whose holder died too and whose
        # node has no survivor to serve its own snapshot is lost in memory (exit 76, documented).
        refusal = lost_in_memory({a, b}, ranks, shards)
    every = every_rng.choice(everies or EVERY) if every_rng else "1"
    faults = fit_faults(faults, period_of(every))
    name = f"chaos {t}: {ranks}{'' if shards == 'even' else 'x' + shards} {kind} k={every} {category}"
    return name, ranks, configs(ranks, shards)[kind], faults, expect, refusal, every


def chaos(r, trials, seed, snapshots, categories=None, launch=None, cycle=False, everies=None, job_suffix="",
          results=None):
    rng = random.Random(seed)
    every_rng = random.Random(f"{seed}/protection.every")
    # The launcher trials' k: a generator of their own, so that the in-job trials of a seed keep their k.
    launch_every_rng = random.Random(f"{seed}/launcher protection.every")
    table = dict.fromkeys(chaos_launch.VERDICTS, 0)
    by_category, by_every, seconds_of = {}, {}, {}
    for t in range(trials):
        name, ranks, config, faults, expect, refusal_ok, every = chaos_trial(rng, t, categories, cycle, every_rng,
                                                                             everies)
        if name in chaos_launch.CATEGORIES:
            category = name
            every = launch_every_rng.choice(everies or EVERY)
            name, verdict, out, seconds = launch.trial(rng, t, category, every, every_setting(every), job_suffix)
            res, detail = {"output": out, "seconds": seconds}, ""
        else:
            category = name.split()[-1]
            verdict, res = chaos_in_job(r, ranks, config, faults, expect, refusal_ok, snapshots, every, job_suffix)
            out, seconds, detail = res["output"], res["seconds"], " ".join(faults)
        table[verdict] += 1
        seconds_of.setdefault(category, []).append(seconds)
        row = by_category.setdefault(category, dict.fromkeys(table, 0))
        row[verdict] += 1
        by_every.setdefault(every, dict.fromkeys(table, 0))[verdict] += 1
        ok = verdict in ("identical", "clean refusal")
        print(f"{'ok  ' if ok else 'FAIL'} {name:<44} {verdict:<19} {detail}  ({seconds:.1f} s)", flush=True)
        if not ok:
            print(out[-2500:], flush=True)
        r.results.append((name, ok, res))
        if results:
            # One typed record a trial: `fault_matrix.py table FILE...` prints the table of a run
            # (or of a run cut short, or of several runs together).
            with open(results, "a") as f:
                f.write(json.dumps({"event": "chaos_trial", "seed": seed, "trial": t, "category": category,
                                    "every": every, "verdict": verdict, "seconds": round(seconds, 2),
                                    "name": name}) + "\n")
    print_table(by_category, by_every, table, seconds_of)
    print("chaos soak: " + " / ".join(f"{k} {v}" for k, v in table.items()) + f" (trials {trials}, seed {seed})")


def table_of(paths):
    """Prints the table of the chaos_trial records in `paths` (--results files)."""
    table = dict.fromkeys(chaos_launch.VERDICTS, 0)
    by_category, by_every, seconds_of, seeds = {}, {}, {}, set()
    for path in paths:
        for rec in frlib.read_events(path):
            if rec.get("event") != "chaos_trial":
                continue
            v, c = rec["verdict"], rec["category"]
            table[v] += 1
            by_category.setdefault(c, dict.fromkeys(table, 0))[v] += 1
            by_every.setdefault(rec["every"], dict.fromkeys(table, 0))[v] += 1
            seconds_of.setdefault(c, []).append(rec["seconds"])
            seeds.add(rec["seed"])
    print_table(by_category, by_every, table, seconds_of)
    total = sum(table.values())
    print("chaos soak: " + " / ".join(f"{k} {v}" for k, v in table.items())
          + f" (trials {total}, seeds {sorted(seeds)}, {sum(map(sum, seconds_of.values())):.0f} s of trials)")
    return 0 if all(v == 0 for k, v in table.items() if k not in ("identical", "clean refusal")) else 1


def print_table(by_category, by_every, table, seconds_of):
    """The soak's table by category (the verdicts, and the mean seconds of a trial), then by k."""
    print(f"{'category':<22}" + "".join(f"{k:>18}" for k in table) + f"{'s/trial':>9}")
    for category, row in sorted(by_category.items()):
        secs = seconds_of.get(category) or [0]
        print(f"{category:<22}" + "".join(f"{v:>18}" for v in row.values()) + f"{sum(secs) / len(secs):>9.1f}")
    print(f"{'protection.every':<22}" + "".join(f"{k:>18}" for k in table))
    for every, row in sorted(by_every.items(), key=lambda kv: (kv[0] == "auto", kv[0].zfill(4))):
        print(f"{'k=' + every:<22}" + "".join(f"{v:>18}" for v in row.values()))


def chaos_in_job(r, ranks, config, faults, expect, refusal_ok, snapshots, every="1", job_suffix=""):
    config, extra = config
    # At k = 1: the state is the same for every k.
    want = r.baseline(ranks, config_with_every(r.config_dir, config, "1", job_suffix), extra)
    run_config = config_with_every(r.config_dir, config, every, job_suffix)
    res = r.run(ranks, run_config, faults, extra)
    out = res["output"]
    job = job_name(os.path.join(r.config_dir, run_config))
    leaked_procs = "fr-run: FAIL" in out and "left" in out
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"flashrec.{job}.")]
    # mpirun's exit code says little under ULFM (docs/ulfm-traps.md trap 9): judged by the ranks'
    # typed ending_job records (76: the state is lost in memory).
    refused = (res["checksum"] is None and any(e["exit_code"] == 76 for e in frlib.events(out, "ending_job"))
               and "mlp_trainer: error" not in out)
    if res["hung"]:
        verdict = "hung"
    elif res["checksum"] == want and len(res["records"]) >= expect:
        verdict = "leaked" if (left or leaked_procs) else "identical"
    elif refused and refusal_ok:
        verdict = "clean refusal"  # its segments stay for a relaunch: cleaned below
    elif refused:
        verdict = "needless refusal"  # a copy of every role's state survived
    else:
        verdict = "wrong"
    if snapshots:
        subprocess.run([snapshots, "remove", job], stdout=subprocess.DEVNULL)
    return verdict, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--config-dir", required=True)
    ap.add_argument("--timeout", type=float, default=90)
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("matrix")
    m.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    m.add_argument("--phases", nargs="+", default=PHASES)
    sub.add_parser("scenarios")
    sub.add_parser("step0")
    sub.add_parser("live-nodes")
    sub.add_parser("uneven")
    e = sub.add_parser("every")
    e.add_argument("--every", type=int, nargs="+", default=[1, 3, 8])
    e.add_argument("--phases", nargs="+", default=["forward", "allreduce", "sync"])
    sub.add_parser("every-diverged")
    ea = sub.add_parser("every-auto")
    ea.add_argument("--phases", nargs="+", default=["forward", "allreduce", "sync", "replication"])
    c = sub.add_parser("chaos")
    c.add_argument("--trials", type=int, default=12)
    c.add_argument("--seed", type=int, default=int(os.environ.get("FLASHREC_SOAK_SEED", "1")))
    c.add_argument("--snapshots", default="", help="flashrec-snapshots, to clean up after refusals")
    c.add_argument("--only", nargs="+", choices=sorted(set(IN_JOB + chaos_launch.CATEGORIES)),
                   help="draw only these categories (a focused soak; the default draws all)")
    c.add_argument("--launcher", help="flashrec-launch: adds the launcher-level categories")
    c.add_argument("--launch-config", help="train.yaml of the launcher-level trials (launch.program set)")
    c.add_argument("--workdir", default=os.getcwd(), help="where the launcher trials write their event logs")
    c.add_argument("--launch-timeout", type=float, default=120)
    c.add_argument("--results", help="append one chaos_trial JSON record a trial to this file")
    c.add_argument("--job-prefix", default="", help="put before the in-job trials' job names (e.g. h29s-)")
    c.add_argument("--launch-job-name", help="the launcher trials' job name (default: the config's)")
    c.add_argument("--cycle", action="store_true", help="take the categories in turn instead of at random")
    c.add_argument("--every", nargs="+", choices=EVERY, default=EVERY,
                   help="the protection.every values drawn (default: all; 1 alone: the soak before issue 30)")
    c.add_argument("--job-suffix", default="", help="appended to the trials' job names (their /dev/shm "
                   "segments), to run beside another checkout's tests of the same configs")
    tb = sub.add_parser("table", help="the table of --results files of chaos runs")
    tb.add_argument("files", nargs="+")
    s = sub.add_parser("soak")
    s.add_argument("--trials", type=int, default=10)
    s.add_argument("--seed", type=int, default=int(os.environ.get("FLASHREC_SOAK_SEED", "1")))
    a = ap.parse_args()
    if a.what == "table":
        return table_of(a.files)
    r = Runner(a.trainer, a.config_dir, a.timeout)
    if a.what == "matrix":
        matrix(r, a.ranks, a.phases)
    elif a.what == "scenarios":
        scenarios(r)
    elif a.what == "step0":
        step0(r)
    elif a.what == "live-nodes":
        live_nodes(r)
    elif a.what == "uneven":
        uneven(r)
    elif a.what == "every":
        every(r, a.every, a.phases)
    elif a.what == "every-diverged":
        every_diverged(r)
    elif a.what == "every-auto":
        every_auto(r, a.phases)
    elif a.what == "chaos":
        print(f"chaos soak: {a.trials} trials, seed {a.seed}")
        global JOB_PREFIX
        JOB_PREFIX = a.job_prefix
        launch, categories = None, a.only
        if a.launcher:
            if not a.snapshots:
                ap.error("the launcher categories need --snapshots")
            launch = chaos_launch.LaunchChaos(a.launcher, a.launch_config, a.workdir, a.launch_timeout, a.snapshots,
                                                a.launch_job_name)
            categories = categories or IN_JOB + chaos_launch.CATEGORIES
        elif categories and set(categories) & set(chaos_launch.CATEGORIES):
            ap.error("launcher categories need --launcher and --launch-config")
        chaos(r, a.trials, a.seed, a.snapshots, categories, launch, a.cycle, a.every, a.job_suffix, a.results)
    else:
        print(f"soak: {a.trials} trials, seed {a.seed}")
        soak(r, a.trials, a.seed)
        hung = sum(1 for _, _, res in r.results if res["hung"])
        wrong = sum(1 for _, ok, res in r.results if not ok and not res["hung"])
        identical = sum(1 for _, ok, _ in r.results if ok)
        print(f"soak result: trials {len(r.results)} / identical {identical} / hung {hung} / wrong {wrong}")
    return r.summary()


if __name__ == "__main__":
    sys.exit(main())
