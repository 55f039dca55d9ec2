#!/usr/bin/env python3
"""ft.launch.platform_*: a hot spare that takes a role runs on "another CPU" (issue 29, item 4).
The CPU identity is a named fake, FLASHREC_FAKE_CPU_FLAGS=replacements:<flags> (only a process
that took a dead role sees it): the part under test is recording the platform with the state and
comparing it at restore, not reading /proc/cpuinfo.

  warn    recovery.require_same_platform unset: a platform_mismatch record (role, cpu_flags, not
          refused), the job goes on and ends bitwise identical to a failure-free run (exit 0)
  refuse  require_same_platform: true: the same record with refused: true, the rank's ending_job
          81, job_end outcome platform_mismatch with exit code 81, one launch only (no relaunch)
Judged by exit codes, typed records and checksums, never by timing."""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import frlib  # noqa: E402

FAKE = {"FLASHREC_FAKE_CPU_FLAGS": "replacements:fpu sse2 fake-avx512-of-another-node"}
FAULT = "role=1:step=12"  # kills dp1's process: the hot spare takes the role


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["warn", "refuse"])
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--events", required=True)
    a = ap.parse_args()
    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)

    ref = None
    if a.mode == "warn":
        p = subprocess.run([a.mpirun, "-n", "3", a.trainer, "--config", a.config], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=120)
        sums = frlib.checksums(p.stdout)
        check(len(sums) == 1, f"the failure-free run printed {len(sums)} final_checksum lines")
        ref = sums[0] if sums else None
        print(f"failure-free run: final_checksum={ref}", flush=True)

    run = frlib.launch(a.launcher, a.config, a.events, faults=[FAULT], timeout=150, env=FAKE)
    sys.stdout.write(run.output)
    check(not run.hung and not run.left_behind, f"fr-run: {run.failures}")
    by = lambda event: [r for r in run.records if r.get("event") == event]
    mismatches = by("platform_mismatch")
    check(len(mismatches) >= 1, "no platform_mismatch record")
    for m in mismatches:
        check(m.get("role") == "dp1.tp0.pp0", f"platform_mismatch names role {m.get('role')}, expected dp1.tp0.pp0")
        check(m.get("restore") == "in_job", f"platform_mismatch restore {m.get('restore')}, expected in_job")
        fields = [d.get("field") for d in m.get("differences", [])]
        check(fields == ["cpu_flags"], f"platform_mismatch differences {fields}, expected exactly cpu_flags")
        check(m.get("refused") is (a.mode == "refuse"), f"platform_mismatch refused {m.get('refused')}")
        check(m.get("flashrec_version"), "platform_mismatch carries no flashrec_version")
    ends = by("job_end")
    check(len(ends) == 1, f"{len(ends)} job_end records")
    if a.mode == "warn":
        check(run.exit_code == 0, f"exit code {run.exit_code}, expected 0")
        check(len(by("recovery")) >= 1, "no recovery record: the hot spare did not take the role in-job")
        check(run.checksum is not None and run.checksum == ref,
              f"final checksum {run.checksum} differs from the failure-free run's {ref}")
    else:
        check(run.exit_code == 81, f"exit code {run.exit_code}, expected 81")
        ending = [r for r in by("ending_job") if r.get("exit_code") == 81]
        check(len(ending) >= 1, "no ending_job record with exit_code 81")
        check(len(by("launch")) == 1, f"{len(by('launch'))} launch records: the job was started again")
        check(not by("warm_relaunch") and not by("cold_restart"), "a relaunch or restart was tried")
        if ends:
            check(ends[0].get("outcome") == "platform_mismatch", f"job_end outcome {ends[0].get('outcome')}")
            check(ends[0].get("exit_code") == 81, f"job_end exit_code {ends[0].get('exit_code')}")
        check(run.checksum is None, "a refused job printed a final checksum")
    for p in problems:
        print("FAIL " + p)
    if not problems:
        print(f"PASS platform-{a.mode}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
