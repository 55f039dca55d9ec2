#!/usr/bin/env python3
"""The ULFM conformance set across the test cluster's nodes, direct launch beside mpirun (issue 47
item 6): one row per transport x death kind x operation, each mode's outcome and detection ms.

  conformance_table.py DIR [--by-kind]

--by-kind: one row per transport x kind, the operations folded: how many passed, the outcomes,
and the detection ms over all of them (min-max).

DIR holds the --json files of tests/ulfm/conformance.py that the two cluster tests leave there
when FLASHREC_CONFORMANCE_JSON_DIR=DIR is set:
  slurm.conformance_across_nodes (mpirun): mpirun-1.json (1 rank a node), mpirun-2.json (2 a node)
  slurm.conformance_direct (srun):         direct-1.json, direct-2.json
Prints a Markdown table per placement, then the number of cases and failures of each mode.
"""
import json
import os
import sys


def load(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {(c["transport"], c["kind"], c["op"]): c for c in json.load(f)}


def cell(c):
    if not c:
        return "not run", "-"
    return ("" if c["passed"] else "**FAIL** ") + c["outcome"], c["detection_ms"]


def folded(cases):
    """passed/total, outcomes and the detection range of some cases of one mode."""
    if not cases:
        return "not run", "-"
    passed = sum(c["passed"] for c in cases)
    # "repaired (PROC_FAILED)" and "repaired (PROC_FAILED/REVOKED)" are one outcome here
    outcomes = "; ".join(sorted({c["outcome"].split(" (")[0] if c["passed"] else c["outcome"] for c in cases}))
    ms = []
    for c in cases:
        if c["detection_ms"] != "-":
            ms += [float(x) for x in c["detection_ms"].split("-")]
    span = f"{min(ms):.0f}-{max(ms):.0f}" if ms else "-"
    return f"{passed}/{len(cases)} {outcomes}", span


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    by_kind = "--by-kind" in sys.argv
    d = args[0] if args else "."
    for placement, title in (("1", "3 processes, one a node"), ("2", "4 processes, two a node")):
        mpirun, srun = load(os.path.join(d, f"mpirun-{placement}.json")), load(os.path.join(d, f"direct-{placement}.json"))
        keys = sorted(set(mpirun) | set(srun), key=lambda k: (k[0], k[1], k[2]))
        if not keys:
            continue
        print(f"\n{title}\n")
        if by_kind:
            print("| transport | kind | ops | mpirun | detect ms | srun (direct) | detect ms |")
            print("| --- | --- | --- | --- | ---: | --- | ---: |")
            for transport, kind in sorted({(k[0], k[1]) for k in keys}):
                ops = sorted({k[2] for k in keys if k[:2] == (transport, kind)})
                mo, md = folded([c for k, c in mpirun.items() if k[:2] == (transport, kind)])
                so, sd = folded([c for k, c in srun.items() if k[:2] == (transport, kind)])
                print(f"| {transport} | {kind} | {','.join(ops)} | {mo} | {md} | {so} | {sd} |")
            for name, cases in (("mpirun", mpirun), ("srun", srun)):
                print(f"\n{name}: {len(cases)} cases, {sum(not c['passed'] for c in cases.values())} failed", end="")
            print()
            continue
        print("| transport | kind | op | mpirun | detect ms | srun (direct) | detect ms |")
        print("| --- | --- | --- | --- | ---: | --- | ---: |")
        for k in keys:
            mo, md = cell(mpirun.get(k))
            so, sd = cell(srun.get(k))
            print(f"| {k[0]} | {k[1]} | {k[2]} | {mo} | {md} | {so} | {sd} |")
        for name, cases in (("mpirun", mpirun), ("srun", srun)):
            failed = sum(not c["passed"] for c in cases.values())
            print(f"\n{name}: {len(cases)} cases, {failed} failed", end="")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
