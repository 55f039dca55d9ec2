#!/usr/bin/env python3
"""The disruption matrix of the stored state (issue 29, item 2; in the spirit of FTI's erase and
corrupt tests): every tier that holds a copy of a role's state x every way to damage it x two
moments, each judged against a failure-free run.

  disruption_matrix.py --tools DIR --trainer EXE --snapshots EXE --config YAML [--all | --cells C,...]

tiers (the copies of role dp1 the relaunch would read):
  own       dp1's own snapshot slot that holds the version the relaunch needs
  replica   dp1's ring replica slot that holds it (dp1's own store removed, so the replica is read)
  hdf5      dp1's rank file of the newest HDF5 checkpoint (every /dev/shm segment removed: tier 3)
  manifest  that checkpoint's manifest.json (likewise)
disruptions:
  remove, truncate (to half), flip-header (one byte of the step field / the HDF5 superblock /
  the manifest's first byte), flip-payload (one byte in the middle), flip-hash (one byte of
  buffer 0's stored checksum / of a checksum in the HDF5 file / in the manifest), stale (the same
  file from an earlier kill of the same job), wrong-job (the same file of another job, other seed)
moments:
  before    damaged after the whole job was killed, before the warm relaunch starts
  during    the relaunch runs with FLASHREC_TEST_STOP_IN_RESTORE=1: every role stops itself once
            its plan is final and its sources verified; the test waits until all are stopped,
            damages the copy, and continues them (deterministic: no timing involved)

Outcome of a cell: `identical` (the relaunch resumed, from another copy or version, with the
failure-free checksum), `refused (exit N: why)` (a clean end with a typed ending_job record),
either of them followed by `-> relaunch: ...` when the first relaunch asked to be relaunched
(exit 75, what the launcher does), or a defect: WRONG (another checksum), HUNG, CRASH (no
ending_job record, e.g. an uncaught exception), LEAK (segments left after a job that ended well).
Prints the table and PASS when no cell shows a defect.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import tempfile
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import frlib  # noqa: E402

TIERS = ["own", "replica", "hdf5", "manifest"]
DISRUPTIONS = ["remove", "truncate", "flip-header", "flip-payload", "flip-hash", "stale", "wrong-job"]
MOMENTS = ["before", "during"]
# The short subset CI runs (every tier, every moment, the disruptions most likely to differ).
CI_CELLS = ["own:flip-payload:before", "own:remove:during", "replica:flip-hash:during",
            "replica:wrong-job:before", "hdf5:flip-payload:before", "manifest:truncate:during",
            "hdf5:stale:before"]
ROLE = "dp1.tp0.pp0"
NPROCS = 5
WORK = None  # scratch directory for saved copies


def shm_files(job):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"flashrec.{job}."))


def clear_shm(job):
    for n in shm_files(job):
        try:
            os.unlink(os.path.join("/dev/shm", n))
        except FileNotFoundError:
            pass


def save_state(job, ckpt_dir, into):
    """Copies the job's segments and its checkpoint directory into `into`."""
    shutil.rmtree(into, ignore_errors=True)
    os.makedirs(os.path.join(into, "shm"))
    for n in shm_files(job):
        shutil.copyfile(os.path.join("/dev/shm", n), os.path.join(into, "shm", n))
    if os.path.isdir(ckpt_dir):
        shutil.copytree(ckpt_dir, os.path.join(into, "ckpt"))


def restore_state(job, ckpt_dir, frm):
    clear_shm(job)
    for n in os.listdir(os.path.join(frm, "shm")):
        shutil.copyfile(os.path.join(frm, "shm", n), os.path.join("/dev/shm", n))
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    if os.path.isdir(os.path.join(frm, "ckpt")):
        shutil.copytree(os.path.join(frm, "ckpt"), ckpt_dir)


def config_fields(config):
    with open(config) as f:
        text = f.read()
    job = re.search(r"name:\s*([A-Za-z0-9_-]+)", text).group(1)
    ckpt = re.search(r"dir:\s*(\S+?)[,}\s]", text).group(1)
    return text, job, ckpt


def other_config(a, text, job, ckpt):
    """The same job under another name, seed and checkpoint directory: the wrong job's files."""
    other = text.replace(f"name: {job}", f"name: {job}-other").replace(f"dir: {ckpt}", f"dir: {ckpt}-other")
    other = re.sub(r"seed:\s*\d+", "seed: 1234", other)
    path = os.path.join(WORK, "other.yaml")
    with open(path, "w") as f:
        f.write(other)
    return path


def run_and_kill_at(a, config, step, job, ckpt, checkpoints, timeout=180):
    """Runs the job until its leader logs `step` or later and what the cells copy from is there
    (`checkpoints` published HDF5 checkpoints, ROLE's own and replica segments: the HDF5 writer
    runs behind the steps on a loaded machine), then kills all of it at once."""
    def ready():
        segments = shm_files(job)
        published = len(newest_checkpoint(ckpt)) if os.path.isdir(ckpt) else 0
        return published >= checkpoints and \
            any(re.fullmatch(rf"flashrec\.{re.escape(job)}\.node\d+\.{re.escape(ROLE)}\.\d", n) for n in segments) and \
            any(re.fullmatch(rf"flashrec\.{re.escape(job)}\.node\d+\.{re.escape(ROLE)}@\S+\.\d", n) for n in segments)
    reached, out = frlib.run_and_kill_at_step(NPROCS, [a.trainer, "--config", config], step, timeout, ready)
    if reached is None:
        sys.exit(f"FAIL: the job never reached step {step} with {checkpoints} HDF5 checkpoint(s) in {ckpt} and {ROLE}'s "
                 f"segments in /dev/shm (there: {newest_checkpoint(ckpt) if os.path.isdir(ckpt) else 'no directory'}, "
                 f"{sorted(shm_files(job))}):\n{out[-3000:]}")
    return reached


def verify_listing(a, job):
    return subprocess.run([a.snapshots, "verify", job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True).stdout


def needed_slots(a, job):
    """(version the relaunch needs, {store key: slot holding it}, listing): the version is the
    newest every role has a copy of (own or replica); a store "holds" it in its newest slot, or
    in the other one when it committed one step more (ping-pong keeps the two newest)."""
    listing = verify_listing(a, job)
    stores = {}
    for key, owner, version, slot in re.findall(
            r"^ok\s+(node\d+\.(dp\d+\.tp\d+\.pp\d+)(?:@\S+)?)\s+version (\d+) \(epoch \d+, slot (\d)\)", listing, re.M):
        stores[key] = (owner, int(version), int(slot))
    newest = {}
    for owner, version, _ in stores.values():
        newest[owner] = max(newest.get(owner, 0), version)
    needed = min(newest.values())
    slots = {}
    for key, (owner, version, slot) in stores.items():
        if version - needed in (0, 1):
            slots[key] = slot if version == needed else 1 - slot
    return needed, slots, listing


def owner_of(key):
    return re.match(r"node\d+\.(dp\d+\.tp\d+\.pp\d+)", key).group(1)


def newest_checkpoint(ckpt):
    steps = sorted(d for d in os.listdir(ckpt) if re.fullmatch(r"step-\d+", d))
    return steps


def flip(path, offset):
    with open(path, "r+b") as f:
        size = f.seek(0, 2)
        offset = min(offset, size - 1)
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x10]))


def find_in_file(path, needle, default):
    with open(path, "rb") as f:
        data = f.read()
    i = data.find(needle)
    return i if i >= 0 else default


class Target:
    """The file a cell damages, and where its stale and wrong-job versions come from."""

    def __init__(self, tier, path, stale, wrong, hash_offset, header_offset):
        self.tier, self.path, self.stale, self.wrong = tier, path, stale, wrong
        self.hash_offset, self.header_offset = hash_offset, header_offset


def target_of(a, tier, job, ckpt):
    if tier in ("own", "replica"):
        needed, slots, listing = needed_slots(a, job)
        # The role whose copy of this tier the relaunch reads: an own store that holds the version
        # (the relaunch reads it first), or a replica that holds it (its owner's own store removed).
        own = sorted(k for k in slots if "@" not in k)
        held = sorted(k for k in slots if "@" in k)
        chosen = own if tier == "own" else held
        if not chosen:
            return None, f"no {tier} copy holds version {needed}:\n{listing}"
        key = next((k for k in chosen if owner_of(k) == ROLE), chosen[0])
        if tier == "replica":
            role = owner_of(key)
            for n in shm_files(job):
                if re.fullmatch(rf"flashrec\.{re.escape(job)}\.node\d+\.{re.escape(role)}\.\d", n):
                    os.unlink(os.path.join("/dev/shm", n))
        name = f"flashrec.{job}.{key}.{slots[key]}"
        path = os.path.join("/dev/shm", name)
        return Target(tier, path, os.path.join(WORK, "stale", "shm", name),
                      os.path.join(WORK, "other", "shm", name.replace(f"flashrec.{job}.", f"flashrec.{job}-other.")),
                      192 + 80, 72), f"{name} (version {needed})"
    # HDF5: no copy in memory at all, so the relaunch falls to tier 3.
    clear_shm(job)
    steps = newest_checkpoint(ckpt)
    if not steps:
        return None, f"no HDF5 checkpoint in {ckpt}"
    newest = steps[-1]
    rel = os.path.join(newest, f"rank-{ROLE}.h5" if tier == "hdf5" else "manifest.json")
    path = os.path.join(ckpt, rel)
    stale_rel = os.path.join(steps[-2], os.path.basename(rel)) if len(steps) > 1 else rel
    if tier == "hdf5":
        header = 8  # the superblock
        # one of the stored checksums: the manifest lists them, the file holds them as attributes
        with open(os.path.join(ckpt, newest, "manifest.json")) as f:
            m = re.search(r'"checksum"\s*:\s*"([0-9a-f]{16})"', f.read())
        hashes = find_in_file(path, m.group(1).encode(), 0) if m else 0
    else:
        header = 0
        hashes = find_in_file(path, b'"checksum"', 0) + 14
    # stale: the same file of the checkpoint before (the same job, an older step); wrong job: the
    # same file of the other job's newest checkpoint
    other_ckpt = os.path.join(WORK, "other", "ckpt")
    other_steps = newest_checkpoint(other_ckpt) if os.path.isdir(other_ckpt) else []
    wrong = os.path.join(other_ckpt, other_steps[-1] if other_steps else newest, os.path.basename(rel))
    return Target(tier, path, os.path.join(WORK, "main", "ckpt", stale_rel), wrong, hashes, header), rel


def disrupt(t, how):
    if how == "remove":
        os.unlink(t.path)
    elif how == "truncate":
        os.truncate(t.path, os.path.getsize(t.path) // 2)
    elif how == "flip-header":
        flip(t.path, t.header_offset)
    elif how == "flip-payload":
        flip(t.path, os.path.getsize(t.path) // 2 + 64)
    elif how == "flip-hash":
        flip(t.path, t.hash_offset)
    elif how in ("stale", "wrong-job"):
        src = t.stale if how == "stale" else t.wrong
        if not os.path.exists(src):
            return f"no {how} source {src} (saved: {sorted(os.listdir(os.path.dirname(os.path.dirname(src))))})"
        # Into the same inode (what a reader that has the segment mapped sees), at its size.
        with open(src, "rb") as f:
            data = f.read()
        with open(t.path, "r+b") as f:
            f.truncate(len(data))
            f.write(data)
    return None


def summary_of(job_result):
    """identical / WRONG / HUNG / CRASH / refused (exit N: why)."""
    if job_result["hung"]:
        return "HUNG"
    got = frlib.checksums(job_result["output"])
    if got:
        return "identical" if got == [job_result["ref"]] else f"WRONG ({got} vs {job_result['ref']})"
    ending = frlib.events(job_result["output"], "ending_job")
    if not ending:
        tail = job_result["output"][-600:].replace("\n", " | ")
        return f"CRASH (no ending_job record: {tail})"
    e = ending[0]
    why = re.sub(r"\s+", " ", str(e.get("why", e.get("reason", ""))))[:160]
    return f"refused (exit {e.get('exit_code')}: {why})"


def relaunch(a, config, ref, stop_hook=None, timeout=150):
    """One warm relaunch; with stop_hook(): every role stops before it restores, stop_hook runs,
    then they continue."""
    tag = uuid.uuid4().hex
    env = {**os.environ, "FLASHREC_RELAUNCH": "1", "H29D_TAG": tag}
    if stop_hook:
        env["FLASHREC_TEST_STOP_IN_RESTORE"] = "1"
    cmd = frlib.command(NPROCS, [a.trainer, "--config", config], timeout)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    note = None
    if stop_hook:
        exe = os.path.basename(a.trainer)[:15]

        def stopped_ranks():
            ranks = [pid for pid in frlib.pids_with_env("H29D_TAG", tag) if comm(pid) == exe]
            return [pid for pid in ranks if frlib.state_of(pid) == "T"]
        deadline = time.monotonic() + timeout
        while True:
            if len(stopped_ranks()) >= NPROCS - 1:  # every role (the hot spare restores nothing)
                note = stop_hook()
                break
            if p.poll() is not None or time.monotonic() > deadline:
                note = "the relaunch never stopped in its restore (ended before it)"
                break
            time.sleep(0.05)
        # From here on no rank stays stopped: the ones the hook waited for, and any that stop
        # later, continue (a rank left stopped would hang the relaunch, not the product).
        done = threading.Event()

        def continue_stopped():
            while not done.is_set():
                for pid in stopped_ranks():
                    os.kill(pid, signal.SIGCONT)
                done.wait(0.05)
        waker = threading.Thread(target=continue_stopped, daemon=True)
        waker.start()
    out, _ = p.communicate()
    if stop_hook:
        done.set()
        waker.join()
    return {"output": out, "hung": "timed out after" in out, "ref": ref}, note


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def run_cell(a, config, job, ckpt, ref, tier, how, moment):
    restore_state(job, ckpt, os.path.join(WORK, "main"))
    target, what = target_of(a, tier, job, ckpt)
    if target is None:
        return f"SETUP ({what})", what
    problem = None
    if moment == "before":
        problem = disrupt(target, how)
        result, note = relaunch(a, config, ref)
    else:
        box = {}
        result, note = relaunch(a, config, ref, stop_hook=lambda: box.setdefault("p", disrupt(target, how)))
        problem = box.get("p")
    if problem:
        return f"SETUP ({problem})", what
    outcome = summary_of(result)
    if any(w in outcome for w in ("HUNG", "CRASH")):  # what the processes said, and fr-run's listing of them
        print(f"---- output of the relaunch ({tier} {how} {moment}), last 8000 characters ----\n"
              f"{result['output'][-8000:]}\n---- end of output ----", flush=True)
    if note:
        outcome += f" [{note}]"
    if outcome.startswith("refused (exit 75"):  # what the launcher does: relaunch (once more here)
        again, _ = relaunch(a, config, ref)
        outcome += " -> relaunch: " + summary_of(again)
        result = again
    if frlib.checksums(result["output"]):
        left = shm_files(job)
        if left:
            outcome += f" LEAK ({len(left)} segments left)"
    return outcome, what


def is_defect(outcome):
    last = outcome.split(" -> relaunch: ")[-1]
    return any(w in outcome for w in ("WRONG", "HUNG", "CRASH", "LEAK", "SETUP")) or \
        not (last.startswith("identical") or last.startswith("refused"))


def main():
    global WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--snapshots", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--all", action="store_true", help="every cell (default: the CI subset)")
    ap.add_argument("--cells", help="tier:disruption:moment,... instead")
    ap.add_argument("--kill-at", type=int, default=300)
    ap.add_argument("--stale-at", type=int, default=120)
    a = ap.parse_args()
    text, job, ckpt = config_fields(a.config)
    # A directory of this run's own: another checkout's suite may run the same matrix meanwhile.
    WORK = tempfile.mkdtemp(prefix=f"{job}-matrix-")
    if a.cells:
        cells = [tuple(c.split(":")) for c in a.cells.split(",")]
    elif a.all:
        cells = [(t, d, m) for t in TIERS for d in DISRUPTIONS for m in MOMENTS]
    else:
        cells = [tuple(c.split(":")) for c in CI_CELLS]
    other = other_config(a, text, job, ckpt)
    _, other_job, other_ckpt = config_fields(other)
    try:
        for j, c in ((job, ckpt), (other_job, other_ckpt)):
            clear_shm(j)
            shutil.rmtree(c, ignore_errors=True)
        base = frlib.run_job(NPROCS, [a.trainer, "--config", a.config], 300)
        ref = base.checksum
        if ref is None:
            print(base.output[-3000:])
            print("FAIL: the failure-free run printed no final_checksum")
            return 1
        print(f"failure-free: final_checksum={ref}", flush=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        # The wrong job's files, the same job's stale ones, then the state every cell starts from.
        run_and_kill_at(a, other, a.kill_at, other_job, other_ckpt, 1)
        save_state(other_job, other_ckpt, os.path.join(WORK, "other"))
        clear_shm(other_job)
        shutil.rmtree(other_ckpt, ignore_errors=True)
        run_and_kill_at(a, a.config, a.stale_at, job, ckpt, 0)
        save_state(job, ckpt, os.path.join(WORK, "stale"))
        clear_shm(job)
        shutil.rmtree(ckpt, ignore_errors=True)
        reached = run_and_kill_at(a, a.config, a.kill_at, job, ckpt, 2)
        save_state(job, ckpt, os.path.join(WORK, "main"))
        print(f"killed the whole job at step {reached}; checkpoints: {newest_checkpoint(ckpt)}", flush=True)
        rows, defects = [], 0
        for tier, how, moment in cells:
            start = time.monotonic()
            outcome, what = run_cell(a, a.config, job, ckpt, ref, tier, how, moment)
            bad = is_defect(outcome)
            defects += bad
            rows.append((tier, how, moment, outcome, what))
            print(f"{'DEFECT' if bad else 'ok':6} {tier:8} {how:12} {moment:6} {outcome}   "
                  f"[{what}; {time.monotonic() - start:.0f} s]", flush=True)
        print("\n| tier | disruption | moment | outcome |\n| --- | --- | --- | --- |")
        for tier, how, moment, outcome, _ in rows:
            print(f"| {tier} | {how} | {moment} | {outcome} |")
    finally:
        for j, c in ((job, ckpt), (other_job, other_ckpt)):
            clear_shm(j)
            shutil.rmtree(c, ignore_errors=True)
        shutil.rmtree(WORK, ignore_errors=True)
    if defects:
        print(f"FAIL: {defects} cell(s) with a defect")
        return 1
    print(f"PASS disruption matrix ({len(rows)} cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
