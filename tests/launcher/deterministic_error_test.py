#!/usr/bin/env python3
"""ft.launch.deterministic_error_ends_at_once: a real flashrec-launch run of a trainer that calls
protect() inside its step loop (trainers/late_protect.cpp). The UsageError is deterministic, so the
job must end at once: exit code 78, the rank's ending_job record (exit_code 78, naming the call),
job_end with outcome deterministic_error, one launch only (no warm relaunch, no HDF5 restart), and
nothing that says "recovered". Judged by the exit code and typed records, never by timing.
The launcher runs through frlib.launch (under tools/fr-run: a process left behind fails the test)."""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import frlib  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--events", required=True)
    a = ap.parse_args()
    run = frlib.launch(a.launcher, a.config, a.events, timeout=100)
    out = run.output
    sys.stdout.write(out)
    records = run.records
    by = lambda event: [r for r in records if r.get("event") == event]
    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)

    check(run.exit_code == 78, f"exit code {run.exit_code}, expected 78")
    check(not run.hung and not run.left_behind, f"fr-run: {run.failures}")
    ending = [r for r in by("ending_job") if r.get("exit_code") == 78]
    check(len(ending) >= 1, "no ending_job record with exit_code 78 from a rank")
    check(all("protect: buffer 'late'" in r.get("why", "") for r in ending), "ending_job does not name the call")
    check(len(by("launch")) == 1, f"{len(by('launch'))} launch records: the job was started again")
    check(not by("warm_relaunch") and not by("cold_restart"), "a relaunch or restart was tried")
    ends = by("job_end")
    check(len(ends) == 1, f"{len(ends)} job_end records")
    if ends:
        end = ends[0]
        check(end["outcome"] == "deterministic_error", f"job_end outcome {end['outcome']}")
        check(end["exit_code"] == 78, f"job_end exit_code {end['exit_code']}")
        check("protect: buffer 'late'" in end["message"], "job_end's message does not name the call")
        check(all(not i["recovered_by"] for i in end["incidents"]), "an incident says it was recovered")
    check("(exit code 78)" in out, "the summary does not give exit code 78")
    check("recovered by" not in out and "RECOVERED" not in out, "the output says recovered")
    for p in problems:
        print("FAIL " + p)
    if not problems:
        print("PASS deterministic-error")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
