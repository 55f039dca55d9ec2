#!/usr/bin/env python3
"""The start-up replay probe (protection.replay_check: start; docs/snapshots.md, "The start-up
replay probe"), without failures, under plain mpirun (tools/fr-run + fr-mpirun, hard timeout):

  exact     replay-probe-4.yaml (k = 4, deterministic): one replay_probe record, passed, from 0 to 4
            (4 steps), and the final checksum equals the same job's with protection.every: 1 (no probe);
  refused   replay-probe-4-counter.yaml (k = 4, batch drawn from a step counter): no final checksum,
            a replay_probe record with passed false, replay_diverged records of version 4, the
            refusal's message (data_seed, protect) and ending_job records with exit code 78; the job's /dev/shm segments are gone.

  replay_probe.py --trainer EXE --config-dir DIR [exact|refused|all]
"""
import argparse, glob, os, re, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import frlib  # noqa: E402

RANKS = 2


def run(trainer, config, timeout):
    return frlib.run_job(RANKS, [trainer, "--config", config], timeout)


def segments(job_name):
    return glob.glob(f"/dev/shm/flashrec.{job_name}.*")


def with_every_1(config_dir, name, folder):
    text = open(os.path.join(config_dir, name)).read()
    text = re.sub(r"protection: \{every: 4\}", "protection: {every: 1}", text)
    text = text.replace("name: t-probe,", "name: t-probe-k1,")
    path = os.path.join(folder, "every-1-" + name)
    with open(path, "w") as f:
        f.write(text)
    return path


def exact(a, problems):
    config = os.path.join(a.config_dir, "replay-probe-4.yaml")
    with tempfile.TemporaryDirectory(prefix="t-probe-") as folder:
        base = run(a.trainer, with_every_1(a.config_dir, "replay-probe-4.yaml", folder), a.timeout)
    job = run(a.trainer, config, a.timeout)
    if not base.checksum:
        problems.append("exact: the k = 1 run printed no final checksum:\n" + base.output[-2000:])
    if job.checksum != base.checksum:
        problems.append(f"exact: checksum {job.checksum} != {base.checksum} (k = 1)\n" + job.output[-3000:])
    probes = job.events("replay_probe")
    if len(probes) != 1 or not probes[0].get("passed") or probes[0].get("from") != 0 or probes[0].get("to") != 4 \
            or probes[0].get("steps") != 4:
        problems.append(f"exact: replay_probe records {probes}, expected one passed from 0 to 4")
    if job.events("replay_diverged"):
        problems.append(f"exact: replay_diverged records {job.events('replay_diverged')}")
    if base.events("replay_probe"):
        problems.append("exact: the k = 1 run probed replay")
    for name in ("t-probe", "t-probe-k1"):
        if segments(name):
            problems.append(f"exact: segments left behind: {segments(name)}")
    if probes:
        print(f"exact: probe passed, restore {probes[0].get('restore_ms')} ms, {probes[0].get('steps')} steps "
              f"replayed in {probes[0].get('replay_ms')} ms; checksum {job.checksum} == k = 1's; "
              f"{job.seconds:.1f} s (k = 1: {base.seconds:.1f} s)")


def refused(a, problems):
    job = run(a.trainer, os.path.join(a.config_dir, "replay-probe-4-counter.yaml"), a.timeout)
    if job.hung:
        problems.append("refused: the job hung")
    if frlib.checksums(job.output):
        problems.append("refused: the job printed a result: " + str(frlib.checksums(job.output)))
    probes = job.events("replay_probe")
    if len(probes) != 1 or probes[0].get("passed") is not False or probes[0].get("to") != 4:
        problems.append(f"refused: replay_probe records {probes}, expected one not passed at version 4")
    diverged = job.events("replay_diverged")
    if not diverged or any(d.get("step") != 4 or d.get("restored_version") != 0 for d in diverged):
        problems.append(f"refused: replay_diverged records {diverged}, expected version 4 replayed from 0")
    endings = job.events("ending_job")
    # Every role ends with 78, but mpirun may kill a role before its record is printed once the
    # first one has gone: at least one, and all of them 78.
    if not endings or any(e.get("exit_code") != 78 for e in endings):
        problems.append(f"refused: ending_job records {endings}, expected exit code 78")
    for words in ("needs an exact replay", "step.data_seed()", "protect()ed buffers"):
        if words not in job.output:
            problems.append(f"refused: the refusal does not say '{words}'")
    if segments("t-probe-counter"):
        problems.append(f"refused: segments left behind: {segments('t-probe-counter')}")
    if not problems:
        print(f"refused: exit code 78 on {len(endings)} roles, replay_diverged {diverged[0].get('buffer')!r} "
              f"at version 4, no result; {job.seconds:.1f} s")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", required=True)
    p.add_argument("--config-dir", required=True)
    p.add_argument("--timeout", type=int, default=90)
    p.add_argument("what", nargs="?", default="all", choices=["exact", "refused", "all"])
    a = p.parse_args()
    problems = []
    if a.what in ("exact", "all"):
        exact(a, problems)
    if a.what in ("refused", "all"):
        refused(a, problems)
    for line in problems:
        print("FAIL", line)
    print("replay_probe:", "FAIL" if problems else "PASS")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
