#!/usr/bin/env python3
"""MPI_Allreduce on each mpi.transport, in the same run, alternating (issue 27).

  transport_compare.py --build BUILD [--ranks 2] [--mib 8 64 256] [--rounds 3] [--iterations 5]
                       [--transports tcp shm] [--variant NAME=TRANSPORT[,VAR=VALUE...]]... [--json OUT]

--variant adds a labelled job with extra environment, e.g. Open MPI's own allreduce choice over
shm without tools/coll-rules-shm.conf, or one algorithm forced:
  --variant shm-fixed=shm,OMPI_MCA_coll_tuned_use_dynamic_rules=0
  --variant ring128k=shm,OMPI_MCA_coll_tuned_allreduce_algorithm=5,OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize=131072
(a forced algorithm needs coll_tuned_use_dynamic_rules, which fr-mpirun sets over shm).

For each size: `rounds` x (one job per transport, in turn), each job bench/bench_allreduce on
--ranks processes through tools/fr-mpirun with FLASHREC_TRANSPORT set; the median over the rounds
of each job's median allreduce time, and every transport's speed-up over the first one. Ratios
only within this run: the machine's load moves the absolute figures (`uptime` is printed).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tools"))
import frlib  # noqa: E402

LINE = re.compile(r"^allreduce: (\{.*\})$", re.M)


def run(build, ranks, env, nbytes, iterations, timeout):
    job = frlib.run_job(ranks, [os.path.join(build, "bench", "bench_allreduce"), str(nbytes), str(iterations)],
                        timeout, expect="^allreduce: ", env=env)
    m = LINE.search(job.output)
    if not m:
        sys.exit(f"bench_allreduce with {env} printed no result:\n{job.output[-2000:]}")
    return json.loads(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--mib", type=int, nargs="+", default=[8, 64, 256])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--transports", nargs="+", default=["tcp", "shm"])
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=TRANSPORT[,VAR=VALUE...]")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json")
    a = ap.parse_args()
    print("load: " + subprocess.run(["uptime"], stdout=subprocess.PIPE, text=True).stdout.strip(), flush=True)
    envs = {t: {"FLASHREC_TRANSPORT": t} for t in a.transports}
    for v in a.variant:
        name, _, spec = v.partition("=")
        transport, *pairs = spec.split(",")
        if not name or not transport or any("=" not in p for p in pairs):
            sys.exit(f"--variant {v!r}: expected NAME=TRANSPORT[,VAR=VALUE...]")
        envs[name] = {"FLASHREC_TRANSPORT": transport, **dict(p.split("=", 1) for p in pairs)}
    a.transports = list(envs)
    rows = []
    base = a.transports[0]
    print(f"{'ranks':>5} {'MiB':>5} " + " ".join(f"{t + ' ms':>10} {t + ' GB/s':>10}" for t in a.transports) +
          "  " + " ".join(f"{t}/{base} speed-up" for t in a.transports[1:]), flush=True)
    for mib in a.mib:
        times = {t: [] for t in a.transports}
        for _ in range(a.rounds):
            for t in a.transports:
                times[t].append(run(a.build, a.ranks, envs[t], mib << 20, a.iterations, a.timeout)["median_ms"])
        med = {t: statistics.median(v) for t, v in times.items()}
        row = {"ranks": a.ranks, "mib": mib, "median_ms": med, "runs_ms": times,
               "GBps": {t: (mib << 20) / (med[t] * 1e6) for t in a.transports},
               "speedup_over_" + base: {t: med[base] / med[t] for t in a.transports[1:]}}
        rows.append(row)
        print(f"{a.ranks:>5} {mib:>5} " + " ".join(f"{med[t]:>10.1f} {row['GBps'][t]:>10.2f}" for t in a.transports) +
              "  " + " ".join(f"{row['speedup_over_' + base][t]:>8.2f}x" for t in a.transports[1:]), flush=True)
    print("load: " + subprocess.run(["uptime"], stdout=subprocess.PIPE, text=True).stdout.strip(), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
