#!/usr/bin/env python3
"""A failure at every point after the last step, under flashrec-launch (defects issue, 3 and 4).

  after_loop.py --launcher EXE --gpt EXE --mlp EXE --workdir DIR

Each run kills (SIGKILL) one role at a fault point after the job's last step and must end with
exit 0, the failure-free run's final_checksum, nothing of the job left in /dev/shm and no
process left (tools/fr-run), and with the outcome that point calls for:

  loop_end    the end-of-loop check (a role dies after the last sync point): repaired in-job
              like a failure in a step (one tier-1 recovery record, no relaunch)
  after_loop  the trainer's code after the loop (its final checksum): a warm relaunch from the
              snapshot segments, which stay until the job has ended
  finish      the runtime's end, before the end-of-job agreement and the role's role_finished
              record: a warm relaunch (the survivors must keep the segments for it)
  finalize    after the launcher acknowledged the role's record, before MPI_Finalize: every role
              passed the agreement, their records all come, the job is finished, nothing is run
              again

Prints one line per run and "N passed, M failed".
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import frlib  # noqa: E402

PHASES = ["loop_end", "after_loop", "finish", "finalize"]
GPT_MODEL = ("{model: {vocab: 64, seq: 16, d_model: 32, heads: 4, layers: 2, mlp: 128}, micro_batches: 2, "
             "batch_per_micro: 2, lr: 0.003, log_every: 10}")
MLP_MODEL = "{model: {input: 16, hidden: 32, output: 4}, batch_per_rank: 8, lr: 0.01, log_every: 10}"


def jobs(gpt, mlp):
    """(name, train.yaml text, victims): a 3-D GPT with a hot spare, a 4-rank MLP with spawning."""
    return [
        ("t-after-gpt3d", f"""job: {{name: t-after-gpt3d, nodes: 4, ranks_per_node: 2, dp: 2, tp: 2, pp: 2, hot_spares: 1,
      steps: 24, seed: 5}}
launch: {{program: {gpt}}}
trainer: {GPT_MODEL}
""", ["1,1,1", "0,0,0"]),
        ("t-after-mlp4", f"""job: {{name: t-after-mlp4, nodes: 2, ranks_per_node: 2, dp: 4, steps: 24, seed: 5}}
launch: {{program: {mlp}}}
trainer: {MLP_MODEL}
""", ["1"]),
    ]


def judge(phase, run, want, job):
    problems = []
    if not run.ok:
        problems.append("; ".join(run.failures) or "fr-run failed")
    records = run.records
    sums = frlib.checksums(run.output)
    if not sums or sums[-1] != want:
        problems.append(f"final_checksum {sums[-1] if sums else None} != {want}")
    relaunches = [r for r in records if r["event"] == "warm_relaunch"]
    in_job = [r for r in records if r["event"] == "recovery" and r.get("tier") == 1]
    ends = [r for r in records if r["event"] == "job_end"]
    if not ends or ends[-1].get("outcome") != "finished":
        problems.append(f"job_end {ends[-1].get('outcome') if ends else None}")
    if phase == "loop_end" and (len(in_job) != 1 or relaunches):
        problems.append(f"{len(in_job)} in-job repairs and {len(relaunches)} relaunches, expected 1 and 0")
    if phase in ("after_loop", "finish") and not any(r.get("outcome") == "resumed" for r in relaunches):
        problems.append("no warm relaunch resumed from the snapshot segments")
    if phase == "finalize" and (relaunches or in_job):
        problems.append("the job had finished (the role's role_finished acknowledged) but was repaired again")
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"flashrec.{job}.")]
    if left:
        problems.append(f"{len(left)} segment(s) of the job left in /dev/shm")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--gpt", required=True)
    ap.add_argument("--mlp", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--phases", nargs="+", default=PHASES, choices=PHASES)
    a = ap.parse_args()
    a.gpt, a.mlp, a.launcher = map(os.path.abspath, (a.gpt, a.mlp, a.launcher))
    os.makedirs(a.workdir, exist_ok=True)
    passed = failed = 0
    for job, text, victims in jobs(a.gpt, a.mlp):
        config = os.path.join(a.workdir, job + ".yaml")
        with open(config, "w") as f:
            f.write(text)
        events = os.path.join(a.workdir, job + ".events.jsonl")
        reference = frlib.launch(a.launcher, config, events, timeout=a.timeout, exit_code=0)
        sums = frlib.checksums(reference.output)
        if not reference.ok or len(sums) != 1:
            print(reference.output[-3000:])
            sys.exit(f"the failure-free run of {job} failed")
        want = sums[0]
        last = 23
        for victim in victims:
            for phase in a.phases:
                fault = f"role={victim}:step={last}:phase={phase}:action=kill"
                run = frlib.launch(a.launcher, config, events, faults=[fault], timeout=a.timeout, exit_code=0)
                problems = judge(phase, run, want, job)
                records = run.records
                relaunches = sum(1 for r in records if r["event"] == "warm_relaunch")
                repairs = sum(1 for r in records if r["event"] == "recovery" and r.get("tier") == 1)
                print(f"{'ok  ' if not problems else 'FAIL'} {job:<14} {fault:<44} in-job {repairs} "
                      f"relaunched {relaunches}" + ("" if not problems else "  <- " + "; ".join(problems)),
                      flush=True)
                if problems:
                    print(run.output[-3000:], flush=True)
                    failed += 1
                else:
                    passed += 1
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
