#!/usr/bin/env python3
"""Nothing left behind without the launcher (issue 29, item 5): a job with hot spares, started by
plain tools/fr-mpirun, ends normally (no fault; a role killed and replaced by a spare; every spare
taking a role in turn), and afterwards /dev/shm holds no segment of the job: every process, spares
included, removed what it made.

  nothing_left.py --tools DIR --trainer EXE --snapshots EXE --config YAML
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import frlib  # noqa: E402

CASES = {
    "no fault": [],
    "a role replaced by a hot spare": ["--fault", "role=1:step=3:phase=forward:action=kill"],
    "both hot spares take a role": ["--fault", "role=1:step=3:phase=forward:action=kill",
                                    "--fault", "role=2:step=7:phase=optimizer:action=kill"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tools", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--snapshots", required=True)
    ap.add_argument("--config", required=True)
    a = ap.parse_args()
    with open(a.config) as f:
        text = f.read()
    job = re.search(r"name:\s*([A-Za-z0-9_-]+)", text).group(1)
    nprocs = 4 + int(re.search(r"hot_spares:\s*(\d+)", text).group(1))
    failures, ref = [], None
    for name, args in CASES.items():
        subprocess.run([a.snapshots, "remove", job], stdout=subprocess.DEVNULL)
        result = frlib.run_job(nprocs, [a.trainer, "--config", a.config, *args], 180)
        left = sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"flashrec.{job}."))
        got = result.checksum
        ref = ref or got
        ok = got is not None and got == ref and not left and not result.hung
        print(f"{'ok' if ok else 'FAIL'}: {name}: checksum {got} (first case {ref}), "
              f"{len(left)} segment(s) left{': ' + ', '.join(left) if left else ''}", flush=True)
        if not ok:
            failures.append(name)
            if got is None:
                print(result.output[-3000:])
    subprocess.run([a.snapshots, "remove", job], stdout=subprocess.DEVNULL)
    if failures:
        print(f"FAIL: {', '.join(failures)}")
        return 1
    print("PASS nothing left behind")
    return 0


if __name__ == "__main__":
    sys.exit(main())
