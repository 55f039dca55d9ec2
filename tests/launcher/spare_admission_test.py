#!/usr/bin/env python3
"""ft.launch.spare_admission_*: a hot spare whose node's /dev/shm cannot hold the role's snapshot
slots is passed over (issue 29, item 3). The full /dev/shm is a named fake,
FLASHREC_FAKE_SHM_FREE_BYTES=spare:0:0 (hot spare 0 reports no room): the part under test is the
admission decision and where it travels (the recovery reports, make_plan), not statvfs.

  next-spare  2 hot spares: spare 0 is rejected, spare 1 takes the role (recovery replacement hot)
  spawn       1 hot spare: it is rejected, a spawned process takes the role (replacement spawned)
Both: a spare_rejected record naming spare:<id of hot spare 0> and the reason, exit 0, and a
result bitwise identical to a failure-free run. Judged by records and checksums, never timing."""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import frlib  # noqa: E402

FAKE = {"FLASHREC_FAKE_SHM_FREE_BYTES": "spare:0:0"}
FAULT = "role=1:step=12"  # kills dp1's process: a spare must take the role


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["next-spare", "spawn"])
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--events", required=True)
    a = ap.parse_args()
    hot = 2 if a.mode == "next-spare" else 1
    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)

    p = subprocess.run([a.mpirun, "-n", str(2 + hot), a.trainer, "--config", a.config], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    sums = frlib.checksums(p.stdout)
    check(len(sums) == 1, f"the failure-free run printed {len(sums)} final_checksum lines")
    ref = sums[0] if sums else None
    print(f"failure-free run: final_checksum={ref}", flush=True)

    run = frlib.launch(a.launcher, a.config, a.events, faults=[FAULT], timeout=150, env=FAKE)
    sys.stdout.write(run.output)
    check(not run.hung and not run.left_behind, f"fr-run: {run.failures}")
    by = lambda event: [r for r in run.records if r.get("event") == event]
    check(run.exit_code == 0, f"exit code {run.exit_code}, expected 0")
    check(run.checksum is not None and run.checksum == ref,
          f"final checksum {run.checksum} differs from the failure-free run's {ref}")
    rejected = by("spare_rejected")
    # Hot spare 0 is world rank 2 (after the 2 active ranks): its process id is 2.
    check(len(rejected) == 1, f"{len(rejected)} spare_rejected records, expected 1")
    for r in rejected:
        check(r.get("spare") == "spare:2", f"spare_rejected names {r.get('spare')}, expected spare:2")
        check("/dev/shm" in r.get("reason", "") and "can give 0 bytes" in r.get("reason", ""),
              f"spare_rejected reason: {r.get('reason')}")
        check(bool(r.get("node")), "spare_rejected names no node")
    recoveries = by("recovery")
    check(len(recoveries) == 1, f"{len(recoveries)} recovery records, expected 1")
    want = "hot" if a.mode == "next-spare" else "spawned"
    for r in recoveries:
        check(r.get("replacement") == want, f"recovery replacement {r.get('replacement')}, expected {want}")
        check(r.get("failed_roles") == ["dp1.tp0.pp0"], f"recovery failed_roles {r.get('failed_roles')}")
    for p in problems:
        print("FAIL " + p)
    if not problems:
        print(f"PASS admission-{a.mode}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
