#!/usr/bin/env python3
"""NCCL after a real failure: shrink (ncclCommRevoke + ncclCommShrink) vs abort + re-init, in
the same run, alternating, at several job sizes (bench/gpu/nccl_repair.cpp does one trial).

  nccl_repair.py --build BUILD [--ranks 4 8] [--trials 5] [--mib 64] [--when during between]
                 [--modes shrink shrink-abort reinit] [--json OUT]

Every trial is its own MPI job: N ranks build an NCCL communicator, the last one is SIGKILLed
(--when during: in an all-reduce, which NCCL sees fail; between: between collectives, which
only MPI sees), the survivors repair MPI (not timed) and then NCCL the trial's way (timed:
repair_ms; after a revoke, its settling is also shown apart: quiesce_ms), and check an
all-reduce over the survivors. Modes: shrink (revoke, then ncclCommShrink), shrink-abort (no
revoke: ncclCommShrink with NCCL_SHRINK_ABORT), reinit (abort + a new communicator). A shrink
NCCL refuses falls back to abort + re-init: the column "fallbacks" counts them. Prints the medians per (ranks, mode)
and the ratio reinit/shrink per job size. On one GPU the ranks share it (FLASHREC_GPU_SHARED=1,
NCCL over loopback sockets): the figures are then those of NCCL's network path on one host.
"""
import argparse
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import frlib  # noqa: E402

FIELDS = ("notice_ms", "release_ms", "quiesce_ms", "repair_ms", "first_allreduce_ms", "allreduce_ms")


def trial(build, ranks, mode, mib, when, timeout):
    job = frlib.run_job(ranks, [os.path.join(build, "bench", "gpu", "bench_nccl_repair"), mode, str(mib), when],
                        timeout=timeout, expect=["^nccl_repair mode="])
    m = re.search(r"^nccl_repair (mode=.*)$", job.output, re.M)
    if not m or "FAIL" in job.output:
        print(job.output[-3000:], file=sys.stderr)
        return None
    return {k: (float(v) if "." in v else int(v) if v.isdigit() else v)
            for k, v in (kv.split("=") for kv in m.group(1).split())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--ranks", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--when", nargs="+", choices=["during", "between"], default=["during", "between"])
    ap.add_argument("--modes", nargs="+", choices=["shrink", "shrink-abort", "reinit"],
                    default=["shrink", "shrink-abort", "reinit"])
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--json")
    args = ap.parse_args()
    env = {"FLASHREC_GPU_SHARED": os.environ.get("FLASHREC_GPU_SHARED", "1"),
           "NCCL_SOCKET_IFNAME": os.environ.get("NCCL_SOCKET_IFNAME", "lo")}
    os.environ.update(env)
    runs = {}
    for ranks in args.ranks:
        for when in args.when:
            for t in range(args.trials):
                for mode in (args.modes if t % 2 == 0 else args.modes[::-1]):
                    r = trial(args.build, ranks, mode, args.mib, when, args.timeout)
                    print(f"ranks {ranks} {when} trial {t} {mode}: {r}", flush=True)
                    if r:
                        runs.setdefault((ranks, when, mode), []).append(r)
    print()
    print("| ranks (survivors) | killed | mode | trials | fallbacks | notice (ms) | release parent (ms) "
          "| revoke settles (ms) | repair (ms) | first all-reduce (ms) | all-reduce before (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for (ranks, when, mode), rs in sorted(runs.items()):
        med = {f: statistics.median(r[f] for r in rs) for f in FIELDS}
        fallbacks = sum(r["fallback"] for r in rs)
        rows.append({"ranks": ranks, "when": when, "mode": mode, "trials": len(rs), "fallbacks": fallbacks,
                     "nccl": rs[0].get("nccl"), **med, "repair_ms_all": [r["repair_ms"] for r in rs]})
        print(f"| {ranks} ({ranks - 1}) | {when} a collective | {mode} | {len(rs)} | {fallbacks} | {med['notice_ms']:.1f} "
              f"| {med['release_ms']:.1f} | {med['quiesce_ms']:.1f} | {med['repair_ms']:.1f} | {med['first_allreduce_ms']:.1f} "
              f"| {med['allreduce_ms']:.1f} |")
    for ranks in args.ranks:
        for when in args.when:
            by = {r["mode"]: r for r in rows if r["ranks"] == ranks and r["when"] == when}
            for shrink in ("shrink", "shrink-abort"):
                if shrink in by and "reinit" in by:
                    print(f"ranks {ranks}, killed {when} a collective: repair reinit / {shrink} = "
                          f"{by['reinit']['repair_ms'] / by[shrink]['repair_ms']:.2f} "
                          f"({by[shrink]['fallbacks']} of {by[shrink]['trials']} fell back to re-init)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mib": args.mib, "env": env, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
