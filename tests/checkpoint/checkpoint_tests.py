#!/usr/bin/env python3
"""HDF5 fallback checkpoint tests: the example trainer, judged by its output and by what it
leaves in checkpoint.dir.

  checkpoint_tests.py --trainer EXE --verify CKPT_VERIFY SCENARIO

Scenarios (one ctest each, see CMakeLists.txt):
  layout        every_steps=10, keep=2: step dirs readable by h5ls -r, only the newest 2 remain
  resume        job killed as a whole after a checkpoint, snapshots removed; --resume of another
                job (other job.name, same shape and checkpoint.dir) refuses its checkpoints by
                name and does not start; --resume of the job ends with the failure-free
                final_checksum
  corrupt       a byte flipped inside a dataset of the newest checkpoint: --resume refuses it
                naming file and buffer, falls back to the previous one, same final_checksum
  tier3         dp0, its ring replica holder dp2 and dp1 (the last process on dp0's node) killed
                in the same step: in-job fallback to the HDF5 checkpoint (recovery record
                "tier":3), same final_checksum
  crash_whole   the whole job dies while the first checkpoint is being written: only a staging
                directory is left, nothing that looks complete; --resume refuses to start
  crash_in_job  one rank killed while a checkpoint is being written: that checkpoint is never
                published, its staging directory is cleaned at the next checkpoint, training
                recovers in-job and ends with the failure-free final_checksum
  rewritten     the snapshot slot is rewritten while a checkpoint copies it out: that
                checkpoint is abandoned, never published

Every run goes through tools/fr-run (hard timeout, every process reaped) and tools/fr-mpirun.
Checkpoints go to a fresh directory in /dev/shm (tmpfs: fsync costs nothing, so checkpoints are
fast and the tests test the protocol, not the disk); it is removed at the end. Prints PASS or
FAIL lines and ends with "PASS <scenario>" or exits 1.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
sys.path.insert(0, TOOLS)
import frlib  # noqa: E402
RUN_TIMEOUT = 90


class Failed(Exception):
    pass


class Env:
    def __init__(self, trainer, verify, scenario):
        self.trainer = trainer
        self.verify_exe = verify
        self.scenario = scenario
        tag = uuid.uuid4().hex[:8]
        self.job = f"t-ck-{scenario.replace('_', '-')}-{tag}"
        self.tmp = tempfile.mkdtemp(prefix=f"flashrec-ckpt-test-{scenario}-", dir="/dev/shm")
        self.dir = os.path.join(self.tmp, "ckpt")
        self.configs = 0

    def config(self, every=10, keep=2, steps=40, spares=0, spawn=True, job=None, device_ms=0):
        with open(os.path.join(HERE, "ckpt-4.yaml.in")) as f:
            text = f.read()
        values = {"JOB": job or self.job, "DIR": self.dir, "EVERY": every, "KEEP": keep, "STEPS": steps,
                  "SPARES": spares, "SPAWN": "true" if spawn else "false", "DEVICE_MS": device_ms}
        for k, v in values.items():
            text = text.replace(f"@{k}@", str(v))
        if re.search(r"@[A-Z]+@", text):
            raise Failed(f"unfilled placeholder in the config template: {text}")
        self.configs += 1
        path = os.path.join(self.tmp, f"job{self.configs}.yaml")
        with open(path, "w") as f:
            f.write(text)
        return path

    def run(self, config, ranks, faults=(), resume=False, env=None, label=""):
        argv = [self.trainer, "--config", config]
        for f in faults:
            argv += ["--fault", f]
        if resume:
            argv.append("--resume")
        job = frlib.run_job(ranks, argv, RUN_TIMEOUT, env=env or {})
        out = job.output
        r = {"out": out, "checksum": job.checksum, "rc": job.returncode, "hung": job.hung, "events": job.events(),
             "published": [int(s) for s in re.findall(r"checkpoint: step (\d+) published", out)],
             "seconds": job.seconds}
        print(f"  run {label or os.path.basename(config)} ({ranks} procs{', resume' if resume else ''}"
              f"{', faults ' + ' '.join(faults) if faults else ''}): checksum={r['checksum']} "
              f"published={r['published']} ({r['seconds']:.1f} s)")
        if r["hung"]:
            self.dump(r)
            raise Failed("a run timed out")
        self.remove_snapshots()
        return r

    def remove_snapshots(self, job=None):
        # The node-local snapshots of a job that did not end cleanly (the launcher's job).
        prefix = f"flashrec.{job or self.job}."
        for name in os.listdir("/dev/shm"):
            if name.startswith(prefix):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass

    def inspect(self):
        p = subprocess.run([self.verify_exe, self.dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        complete, staging, bad = [], [], []
        for line in p.stdout.splitlines():
            parts = line.split()
            if parts and parts[0] == "complete":
                (complete if parts[2] == "ok" else bad).append(int(parts[1]))
            elif parts and parts[0] == "staging":
                staging.append(line)
        print("  " + "\n  ".join(p.stdout.splitlines() or ["(empty)"]))
        return {"complete": sorted(complete), "staging": staging, "bad": bad, "text": p.stdout}

    def step_dir(self, step):
        return os.path.join(self.dir, f"step-{step:08d}")

    @staticmethod
    def dump(r):
        print("---- output (last 6000 characters) ----")
        print(r["out"][-6000:])
        print("---- end of output ----")

    def cleanup(self):
        self.remove_snapshots()
        shutil.rmtree(self.tmp, ignore_errors=True)


def expect(cond, what, r=None):
    if cond:
        print(f"  ok: {what}")
        return
    if r is not None:
        Env.dump(r)
    raise Failed(what)


def reference(e, ranks=4, **config):
    """A failure-free run of the same job, without checkpoints in the way of anything."""
    cfg = e.config(job=e.job + "-ref", **config)
    r = e.run(cfg, ranks, label="failure-free reference")
    e.remove_snapshots(e.job + "-ref")
    expect(r["checksum"], "the failure-free run printed final_checksum", r)
    shutil.rmtree(e.dir, ignore_errors=True)  # its checkpoints are not the test's
    return r["checksum"]


def all_ranks(step, phase="forward", action="exit"):
    return [f"role={d}:step={step}:phase={phase}:action={action}" for d in range(4)]


# ---- scenarios -----------------------------------------------------------------------------

def layout(e):
    r = e.run(e.config(every=10, keep=2, steps=80), 4)
    expect(r["checksum"], "the run finished", r)
    expect(len(r["published"]) >= 3, f"at least 3 checkpoints were published (got {r['published']})", r)
    expect(re.search(r"checkpoint: step \d+ published in .*: 4 files, \d+ bytes in [0-9.]+ s \([0-9.]+ MB/s", r["out"]),
           "rank 0 logged step, bytes, seconds and MB/s", r)
    state = e.inspect()
    newest = sorted(r["published"])[-2:]
    expect(state["complete"] == newest, f"only the newest 2 remain: {state['complete']} == {newest}")
    expect(not state["bad"] and not state["staging"], "every step dir verifies; no staging dir left", r)
    for step in newest:
        d = e.step_dir(step)
        with open(os.path.join(d, "manifest.json")) as f:
            m = json.load(f)
        expect(m["step"] == step and m["topology"] == {"dp": 4, "tp": 1, "pp": 1} and len(m["files"]) == 4,
               f"manifest of step {step}: step, topology, 4 files")
        for entry in m["files"]:
            p = subprocess.run(["h5ls", "-r", os.path.join(d, entry["file"])], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            names = re.findall(r"^/(\S+)\s+Dataset", p.stdout, re.M)
            expect(p.returncode == 0 and sorted(names) == sorted(b["name"] for b in entry["buffers"]) and
                   {"params", "master", "adam_m", "adam_v", "adam_t"} <= set(names),
                   f"h5ls -r {entry['file']} of step {step} lists its datasets")


def resume(e):
    want = reference(e, steps=40)
    cfg = e.config(every=10, keep=2, steps=40, spawn=False)
    r1 = e.run(cfg, 4, faults=all_ranks(35), label="killed at step 35")
    expect(r1["checksum"] is None, "the killed job did not finish", r1)
    expect(r1["published"], "it published a checkpoint before it died", r1)
    e.remove_snapshots()  # its node-local snapshots are gone too: only the HDF5 files remain
    state = e.inspect()
    newest = max(state["complete"]) if state["complete"] else None
    expect(newest == max(r1["published"]), f"the newest published checkpoint ({newest}) is on disk")
    # Another job pointed at the same directory (a copied train.yaml): never restored.
    other = e.job + "-other"
    r_other = e.run(e.config(every=10, keep=2, steps=40, spawn=False, job=other), 4, resume=True,
                    label="--resume of another job")
    e.remove_snapshots(other)
    expect(re.search(rf"written by job '{e.job}', this job is '{other}'", r_other["out"]) and
           r_other["checksum"] is None and resumed_step(r_other) is None,
           "another job's --resume refuses every checkpoint, naming both jobs, and does not start", r_other)
    expect(e.inspect()["complete"] == state["complete"], "and leaves the checkpoints as they were")
    r2 = e.run(cfg, 4, resume=True, label="--resume")
    expect(resumed_step(r2) == newest, f"--resume restarted from step {newest}", r2)
    expect(r2["checksum"] == want, f"final_checksum {r2['checksum']} == failure-free {want}", r2)


def corrupt(e):
    cfg = e.config(every=10, keep=3, steps=50)
    r1 = e.run(cfg, 4, label="failure-free, with checkpoints")
    want = r1["checksum"]
    expect(want, "the first run finished", r1)
    state = e.inspect()
    expect(len(state["complete"]) >= 2, f"at least two complete checkpoints ({state['complete']})", r1)
    newest, previous = state["complete"][-1], state["complete"][-2]
    victim = os.path.join(e.step_dir(newest), "rank-dp1.tp0.pp0.h5")
    p = subprocess.run(["h5dump", "-p", "-H", "-d", "/adam_m", victim], stdout=subprocess.PIPE, text=True)
    m = re.search(r"OFFSET (\d+)", p.stdout)
    expect(m, f"h5dump -p -H shows where /adam_m lies in {os.path.basename(victim)}")
    offset = int(m.group(1)) + 5
    with open(victim, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))
    print(f"  flipped a bit of the byte at offset {offset} of {victim} (inside dataset /adam_m)")
    r2 = e.run(cfg, 4, resume=True, label="--resume over a corrupted file")
    expect(re.search(rf"refused step {newest} \(.*\): \S*rank-dp1\.tp0\.pp0\.h5: buffer 'adam_m': checksum mismatch",
                     r2["out"]), "the corrupted checkpoint is refused, naming the file and the buffer", r2)
    expect(re.search(rf"offering older step {previous}\b", r2["out"]), f"the previous step {previous} is offered", r2)
    expect(resumed_step(r2) == previous, f"--resume restarted from step {previous}", r2)
    expect(r2["checksum"] == want, f"final_checksum {r2['checksum']} == failure-free {want}", r2)


def resumed_step(r):
    """The step of the run's typed checkpoint_resumed record, or None."""
    found = frlib.events(r["out"], "checkpoint_resumed")
    return found[0]["step"] if found else None


def tier3(e):
    want = reference(e, steps=30, every=5, keep=2, spares=3, ranks=7)
    cfg = e.config(every=5, keep=2, steps=30, spares=3)
    # dp0's ring successor (its only replica holder, k=1) is dp2: node-aware placement puts the
    # replica on the other node (runtime/src/topology.cpp ring_successors). dp1, node0's other
    # process, dies too: otherwise it would serve dp0's own snapshot from node0's /dev/shm.
    faults = [f"role={r}:step=23:phase=forward:action=kill" for r in (0, 1, 2)]
    r = e.run(cfg, 7, faults=faults, label="dp0, dp1 + dp2 killed at step 23")
    records = [x for x in r["events"] if x.get("event") == "recovery"]
    expect(any(x.get("tier") == 3 for x in records), f"a recovery record with tier 3 ({records})", r)
    m = re.search(r"falling back to the HDF5 checkpoint of step (\d+)", r["out"])
    expect(m and int(m.group(1)) in r["published"], "the fallback used a checkpoint this job published", r)
    expect(r["checksum"] == want, f"final_checksum {r['checksum']} == failure-free {want}", r)
    state = e.inspect()
    expect(not state["bad"], "every step dir verifies")


def crash_whole(e):
    # The first checkpoint (step 10) waits 20 s after writing its rank files; the whole job dies
    # at step 18, in the middle of it (8 steps of at least 20 ms after it was due, so that every
    # rank has written its file by then even on a loaded machine).
    cfg = e.config(every=10, keep=2, steps=30, spawn=False, device_ms=20)
    r = e.run(cfg, 4, faults=all_ranks(18), env={"FLASHREC_TEST_CHECKPOINT_PAUSE": "10:20000"},
              label="all ranks exit at step 18, mid-checkpoint")
    expect(r["checksum"] is None, "the job died", r)
    expect("test pause of 20000 ms in step 10" in r["out"], "the checkpoint of step 10 was in flight", r)
    e.remove_snapshots()
    state = e.inspect()
    expect(state["complete"] == [] and not state["bad"], "no step directory exists (nothing looks complete)")
    expect(len(state["staging"]) == 1 and ".step-00000010.tmp-" in state["staging"][0] and
           "manifest.json" not in state["staging"][0], "only the staging directory of step 10, without a manifest")
    r2 = e.run(cfg, 4, resume=True, label="--resume")
    expect(re.search(r"--resume: no complete checkpoint in ", r2["out"]) and r2["checksum"] is None,
           "--resume refuses to start: no complete checkpoint (the staging directory is ignored)", r2)


def crash_in_job(e):
    want = reference(e, steps=30, every=5, keep=5, spares=1, ranks=5)
    cfg = e.config(every=5, keep=5, steps=30, spares=1, device_ms=20)
    # The first checkpoint (step 5) waits 20 s after writing its rank files; dp1 is killed at
    # step 9 while it waits (4 steps of at least 20 ms after step 5, so that every rank has
    # written its file even on a loaded machine; recovery resumes at step 9, so step 5 is not
    # replayed). In the optimizer phase, when
    # no replication transfer is in flight: a kill during one could crash a survivor inside MPI
    # (a receive landing in an unmapped peer snapshot; not the checkpoint's doing).
    r = e.run(cfg, 5, faults=["role=1:step=9:phase=optimizer:action=kill"],
              env={"FLASHREC_TEST_CHECKPOINT_PAUSE": "5:20000"}, label="dp1 killed at step 9 (optimizer), mid-checkpoint")
    expect("test pause of 20000 ms in step 5" in r["out"], "the checkpoint of step 5 was in flight", r)
    records = [x for x in r["events"] if x.get("event") == "recovery"]
    expect(records and all(x.get("tier") == 1 for x in records), f"in-job recovery, tier 1 ({records})", r)
    expect(5 not in r["published"], "the interrupted checkpoint of step 5 was never published", r)
    expect(re.search(r"removed incomplete checkpoint directory \S*/\.step-00000005\.tmp-", r["out"]),
           "its staging directory was removed at the next checkpoint", r)
    expect(r["seconds"] < 20, "abort() ended the checkpoint's wait at once (the run took less than the pause)", r)
    expect(r["checksum"] == want, f"final_checksum {r['checksum']} == failure-free {want}", r)
    state = e.inspect()
    expect(5 not in state["complete"] and state["complete"] == sorted(r["published"])[-5:],
           f"step dirs {state['complete']}: the published ones, not step 5")
    expect(not state["bad"] and not state["staging"], "every step dir verifies; no staging dir left")


def rewritten(e):
    # Step 10 is the first checkpoint (nothing else in flight); it waits 3 s between copying the
    # snapshot out and checking the slot, during which the loop goes on and rewrites the slot.
    cfg = e.config(every=10, keep=3, steps=40)
    r = e.run(cfg, 4, env={"FLASHREC_TEST_CHECKPOINT_PAUSE": "10:3000:before-check"},
              label="slot of step 10 rewritten while copied out")
    expect(r["checksum"], "the run finished", r)
    expect(re.search(r"step 10 abandoned, not published: dp\d\.tp0\.pp0: the snapshot slot of step 10 was "
                     r"rewritten while it was copied out", r["out"]), "the checkpoint of step 10 was abandoned", r)
    expect(re.search(r"step 20 skipped: the checkpoint of step 10 is still in flight", r["out"]),
           "step 20 was skipped while step 10 was in flight (the loop did not wait)", r)
    expect(10 not in r["published"], "step 10 was never published", r)
    state = e.inspect()
    expect(10 not in state["complete"] and not state["bad"], "no step-00000010; every step dir verifies")
    expect(not state["staging"], "the abandoned checkpoint's staging directory was removed at once")


SCENARIOS = {f.__name__: f for f in (layout, resume, corrupt, tier3, crash_whole, crash_in_job, rewritten)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--verify", required=True)
    ap.add_argument("scenario", choices=sorted(SCENARIOS))
    a = ap.parse_args()
    e = Env(a.trainer, a.verify, a.scenario)
    print(f"{a.scenario}: job {e.job}, checkpoints in {e.dir}")
    try:
        SCENARIOS[a.scenario](e)
    except Failed as f:
        print(f"FAIL {a.scenario}: {f}")
        return 1
    finally:
        e.cleanup()
    print(f"PASS {a.scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
