#!/usr/bin/env python3
"""Warm relaunch (tier 2) straight through tools/fr-mpirun, judged against a failure-free run.

  relaunch_tests.py --tools DIR --trainer EXE --snapshots EXE --config YAML <case>

Cases (issue 15):
  after-repair    an in-job repair moves role dp2 onto the hot spare's node, then the whole job is
                  SIGKILLed; the relaunch (FLASHREC_RELAUNCH=1, dp2 back on its first node, where
                  only the dead original's stale segments are) must resume from the newest
                  version complete for every role, with the failure-free checksum
  corrupt-newest  the whole job is SIGKILLed, one byte of the copy of dp1 the relaunch would read
                  is flipped (its own snapshot, or a peer's when only that holds the version);
                  the relaunch must reject that copy, say so, and resume from the older slot or
                  another copy with the failure-free checksum

The killed job runs in its own session with a unique FLASHREC_TEST_TAG, and everything carrying
the tag is SIGKILLed (as tools/fr-run does). Prints PASS or FAIL lines.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import frlib  # noqa: E402

FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print(f"FAIL: {msg}", flush=True)
    return cond


def job_name(config):
    with open(config) as f:
        return re.search(r"name:\s*([A-Za-z0-9_-]+)", f.read()).group(1)


def checksum(text):
    sums = frlib.checksums(text)
    return sums[0] if len(sums) == 1 else None


def run(a, args, env=None, timeout=180):
    job = frlib.run_job(5, [a.trainer, "--config", a.config, *args], timeout, env=env or {})
    return job.returncode, job.output


def run_and_kill_at(a, args, step, timeout=120):
    """Runs the job until its leader logs `step` or later, then kills all of it at once, like a
    node losing power: nothing gets to clean up."""
    reached, text = frlib.run_and_kill_at_step(5, [a.trainer, "--config", a.config, *args], step, timeout)
    check(reached is not None, f"the job never reached step {step}:\n{text[-2000:]}")
    print(f"killed the whole job at step {reached}", flush=True)
    return text


def snapshots(a, job):
    p = subprocess.run([a.snapshots, "verify", job], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.stdout


def flip_needed_copy(a, job, role):
    """Flips one byte in the middle of the slot that holds the copy of `role` the relaunch will
    read: the version it needs is the newest version every role has a copy of, its own or a
    peer's ("node<n>.<owner>@<holder>": a holder may have committed a version its owner died
    writing). The role's own store is read first when it has that version: its newest slot, or
    the other one when the role committed one step more (ping-pong keeps the two newest). When
    only a peer's copy has it, that copy's slot is flipped instead. Returns the flipped version."""
    listing = snapshots(a, job)
    stores = {}  # key -> (owner role, newest version, slot)
    for key, owner, version, slot in re.findall(
            r"^ok\s+(node\d+\.(dp\d+\.tp\d+\.pp\d+)(?:@\S+)?)\s+version (\d+) \(epoch \d+, slot (\d)\)", listing, re.M):
        stores[key] = (owner, int(version), int(slot))
    newest = {}
    for owner, version, _ in stores.values():
        newest[owner] = max(newest.get(owner, 0), version)
    if not check(role in newest, f"no verified copy of {role} after the kill:\n{listing}"):
        return None
    needed = min(newest.values())
    mine = sorted((("@" in key), key) for key, (owner, version, _) in stores.items()
                  if owner == role and version - needed in (0, 1))  # own store first
    if not check(bool(mine), f"no copy of {role} holds version {needed}, which the relaunch needs:\n{listing}"):
        return None
    key = mine[0][1]
    _, version, slot = stores[key]
    if version != needed:
        version, slot = needed, 1 - slot
    path = f"/dev/shm/flashrec.{job}.{key}.{slot}"
    with open(path, "r+b") as f:
        size = f.seek(0, 2)
        f.seek(size // 2)
        b = f.read(1)
        f.seek(size // 2)
        f.write(bytes([b[0] ^ 0x10]))
    after = snapshots(a, job)
    m2 = re.search(rf"^ok\s+{re.escape(key)}\s+version (\d+)", after, re.M)
    check(m2 is None or int(m2.group(1)) != version,
          f"flipping a byte of {path} went unnoticed by verification:\n{after}")
    print(f"flipped one byte of {path} (version {version}); verify now says: "
          f"{(m2.group(0) if m2 else 'no complete version')}", flush=True)
    return version


def relaunch(a, ref):
    rc, text = run(a, [], env={"FLASHREC_RELAUNCH": "1"})
    got = checksum(text)
    if not check(got == ref, f"relaunch checksum {got}, failure-free {ref}"):
        print(text[-4000:], flush=True)
    m = re.search(r"warm relaunch: restored version (\d+)", text)
    print(f"relaunch: {m.group(0) if m else 'no restore line'}; exit code {rc}", flush=True)
    every = protection_every(a.config)
    if m and every > 1:  # only multiples of protection.every are snapshotted; the steps since replay
        check(int(m.group(1)) % every == 0, f"restored version {m.group(1)} is not a multiple of {every}")
    return text


def protection_every(config):
    """protection.every as a number; 1 for auto too (its k changes while the job runs: the version
    restored is a multiple of the k in use then, which the ranks' protection_interval records say)."""
    with open(config) as f:
        m = re.search(r"(?<![\w])every:\s*(\d+)", f.read())  # not log_every
    return int(m.group(1)) if m else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["after-repair", "corrupt-newest"])
    ap.add_argument("--tools", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--snapshots", required=True)
    ap.add_argument("--config", required=True)
    a = ap.parse_args()
    job = job_name(a.config)
    subprocess.run([a.snapshots, "remove", job], stdout=subprocess.DEVNULL)
    rc, text = run(a, [])
    ref = checksum(text)
    if not check(ref is not None, "the failure-free run printed no final_checksum"):
        print(text[-3000:])
        return 1
    print(f"failure-free: final_checksum={ref}", flush=True)
    if a.case == "after-repair":
        text = run_and_kill_at(a, ["--fault", "role=2:step=300:phase=forward:action=kill"], 700)
        check(bool(frlib.events(text, "fault_injected")), "the in-job fault did not fire before the kill")
        check('"event":"recovery"' in text, "no in-job recovery before the kill")
        print(snapshots(a, job), flush=True)
        relaunch(a, ref)
    else:
        run_and_kill_at(a, [], 700)
        if flip_needed_copy(a, job, "dp1.tp0.pp0") is not None:
            text = relaunch(a, ref)
            check("failed verification" in text, "the relaunch did not say that it rejected the corrupt copy")
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"flashrec.{job}.")]
    check(not left, f"segments left after the relaunch ended: {left}")
    subprocess.run([a.snapshots, "remove", job], stdout=subprocess.DEVNULL)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print(f"PASS {a.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
