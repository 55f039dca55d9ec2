#!/usr/bin/env python3
"""HDF5 fallback checkpoint benchmark (bench/checkpoint/README.md). Prints one table.

  ckpt_bench.py --write-bench EXE --trainer EXE --dir DIR [options]

1. Write throughput (ckpt_write_bench, --ranks processes at once, --mib-per-rank each): per rank
   and aggregate MB/s of a plain dd-style write (write(2) + fsync) of the same bytes, of the HDF5
   rank file alone (CheckpointWriter::write_rank_file), and of the whole background checkpoint
   (runtime::Checkpointer: snapshot copy-out, rank file, gather, manifest, agree, publish), all
   measured in the same run, the three methods rotating within each repetition. The first
   repetition is a warm-up and not counted; figures are medians over the others.
2. Step time of the example trainer with a large model (--model), checkpoint every --every steps
   vs never. Within each checkpointing run: the mean step time over all steps vs over the steps
   during which no checkpoint was in flight (interleaved in time, so they share the machine's
   load of the moment; this is the figure to read on a shared machine). Between runs: runs
   alternate (never, every, every, never, ...) --pairs times; each run's mean step
   time is taken from the times its per-step "step N loss" lines were printed (each line stamped
   by a wrapper around the trainer) over steps [--every/2, --steps), a window that holds the
   checkpoints; the ratio is computed per pair, the median reported.
3. Restore of the same state: from HDF5 (Checkpointer::restore, page cache dropped first / warm)
   vs from memory (own snapshot in shm + memcpy; a peer's copy over MPI), from ckpt_write_bench;
   and the "restore" phase of real recoveries of the trainer: tier 1 (one role killed, state from
   snapshots and ring replicas) vs tier 3 (a role and its replica holder killed, everyone from
   the HDF5 checkpoint).

Every run goes through tools/fr-run (timeout, reaping) and tools/fr-mpirun.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..", "..", "tools")
sys.path.insert(0, TOOLS)
import frlib  # noqa: E402


def mpirun(n, argv, timeout, env=None, timestamps=False):
    cmd = [os.path.join(TOOLS, "fr-run"), "--timeout", str(timeout), "--",
           os.path.join(TOOLS, "fr-mpirun"), "-n", str(n)] + argv
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                         env=dict(os.environ, **(env or {})))
    lines = []
    for line in p.stdout:
        lines.append((time.monotonic(), line.rstrip("\n")))
    p.wait()
    out = "\n".join(l for _, l in lines)
    if "fr-run: ok" not in out and "final_checksum=" not in out and "DONE" not in out:
        print(out[-4000:])
        sys.exit(f"run failed: {' '.join(argv)}")
    return (lines if timestamps else out), p.returncode


def mbps(nbytes, seconds):
    return nbytes / 1e6 / seconds if seconds > 0 else float("inf")


# ---- 1 + 3a: ckpt_write_bench -------------------------------------------------------------

def write_bench(a):
    os.makedirs(a.dir, exist_ok=True)
    out, _ = mpirun(a.ranks, [a.write_bench, "--dir", a.dir, "--mib-per-rank", str(a.mib_per_rank),
                              "--reps", str(a.reps + 1)], timeout=1800)
    results = {}  # what -> list per occurrence of {rank or 'all': (bytes, s)}
    current = {}
    for m in re.finditer(r"^RESULT (\S+) (\S+) (\d+) ([0-9.]+)$", out, re.M):
        what, rank, nbytes, s = m.group(1), m.group(2), int(m.group(3)), float(m.group(4))
        current.setdefault(what, {})[rank] = (nbytes, s)
        if rank == "all":
            results.setdefault(what, []).append(current.pop(what))
    for line in out.splitlines():
        if "checkpoint: step" in line and "published" in line:
            print("   ", line[line.index("checkpoint:"):])
    rows = {}
    # Paired: each repetition's aggregate vs dd's in the same repetition (adjacent in time, so
    # they share the storage's mood of the moment); repetition 0 is the warm-up.
    for what in ("rankfile", "checkpoint"):
        pairs = [mbps(*o["all"]) / mbps(*d["all"]) for o, d in zip(results.get(what, [])[1:], results.get("dd", [])[1:])]
        if pairs:
            rows.setdefault("paired", {})[what] = {"median": statistics.median(pairs), "all": pairs}
    for what, occurrences in results.items():
        counted = occurrences[1:] if len(occurrences) > 1 and what in ("dd", "rankfile", "checkpoint") else occurrences
        ranks = sorted(k for k in counted[0] if k != "all")
        per_rank = [statistics.median(mbps(*o[r]) for o in counted) for r in ranks]
        agg = statistics.median(mbps(*o["all"]) for o in counted)
        agg_s = statistics.median(o["all"][1] for o in counted)
        rows[what] = {"rank_min": min(per_rank), "rank_med": statistics.median(per_rank), "rank_max": max(per_rank),
                      "agg": agg, "agg_s": agg_s, "n": len(counted), "bytes": counted[0]["all"][0]}
    return rows


# ---- 2: step-time ratio -------------------------------------------------------------------

def trainer_config(a, path, name, every, steps, extra=""):
    i, h, o = a.model.split(",")
    ckpt = os.path.join(a.dir, name + "-ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    with open(path, "w") as f:
        f.write(f"job: {{name: {name}, nodes: {a.train_ranks}, ranks_per_node: 1, dp: {a.train_ranks}, "
                f"steps: {steps}, seed: 3}}\n"
                f"trainer: {{model: {{input: {i}, hidden: {h}, output: {o}}}, batch_per_rank: {a.batch}, "
                f"lr: 0.001, log_every: 1}}\n"
                f"checkpoint: {{dir: {ckpt}, every_steps: {every}, keep: 2}}\n" + extra)
    return ckpt


# Each rank's stdout goes through this, which stamps every line with the wall-clock time it was
# printed at (fr-run hands the output over only at the end, so arrival times say nothing).
STAMP = ['bash', '-c', 'stdbuf -oL "$@" 2>&1 | while IFS= read -r line; do printf "@%s %s\\n" "$EPOCHREALTIME" "$line"; done',
         'stamp']


def within_run_ratio(lines, first, last):
    """Mean step time over [first, last] / mean step time of the steps during which no checkpoint
    was in flight, in the same run: both sets share the machine's load of the moment, so drifting
    load (other jobs) cancels out. A checkpoint of step v is in flight from the line of step v-1
    (its sync point is in step v) to its "published" line."""
    t, busy = {}, []
    for _, line in lines:
        m = re.match(r"^@([0-9.]+) step (\d+) loss", line)
        if m:
            t[int(m.group(2))] = float(m.group(1))
            continue
        m = re.match(r"^@([0-9.]+) .*checkpoint: step (\d+) published", line)
        if m:
            busy.append((int(m.group(2)), float(m.group(1))))
    intervals = [(t[v - 1], end) for v, end in busy if v - 1 in t]
    all_steps, clean = [], []
    for n in range(first + 1, last + 1):
        if n not in t or n - 1 not in t:
            continue
        a, b = t[n - 1], t[n]
        all_steps.append(b - a)
        if not any(a < e and s < b for s, e in intervals):
            clean.append(b - a)
    if not clean:
        return float("nan"), 0, 0
    return (statistics.mean(all_steps) / statistics.mean(clean), len(all_steps) - len(clean), len(all_steps))


def mean_step_s(lines, first, last):
    t = {}
    for _, line in lines:
        m = re.match(r"^@([0-9.]+) step (\d+) loss", line)
        if m:
            t[int(m.group(2))] = float(m.group(1))
    if first not in t or last not in t:
        sys.exit(f"missing step lines {first}/{last}")
    return (t[last] - t[first]) / (last - first)


def step_ratio(a):
    pairs = []
    published = []
    work = []  # background seconds per checkpoint on the slowest rank (copy-out + file)
    within = []  # per "every" run: mean step / mean step without a checkpoint in flight
    first = max(1, a.every // 2)
    for p in range(a.pairs):
        order = [0, a.every] if p % 2 == 0 else [a.every, 0]
        got = {}
        for every in order:
            name = f"bench-ckpt-steps-{os.getpid()}"
            cfg = os.path.join(a.dir, name + ".yaml")
            ckpt = trainer_config(a, cfg, name, every, a.steps)
            lines, _ = mpirun(a.train_ranks, STAMP + [a.trainer, "--config", cfg], timeout=1800, timestamps=True)
            got[every] = mean_step_s(lines, first, a.steps - 1)
            if every:
                ratio, affected, total = within_run_ratio(lines, first, a.steps - 1)
                within.append(ratio)
                print(f"      within the run: {affected} of {total} steps overlapped a checkpoint; mean step / "
                      f"mean of the other steps = {ratio:.3f}")
                pub = [l for _, l in lines if re.search(r"checkpoint: step \d+ published", l)]
                published.append(len(pub))
                for l in pub:
                    m = re.search(r"copy-out ([0-9.]+) s, file ([0-9.]+) s", l)
                    if m:
                        work.append(float(m.group(1)) + float(m.group(2)))
            shutil.rmtree(ckpt, ignore_errors=True)
            print(f"    pair {p + 1}: checkpoint every {every or 'never'}: mean step {got[every] * 1e3:.1f} ms")
        pairs.append((got[0], got[a.every]))
    ratios = [w / n for n, w in pairs]
    return {"never_ms": statistics.median(n for n, _ in pairs) * 1e3,
            "every_ms": statistics.median(w for _, w in pairs) * 1e3,
            "ratio": statistics.median(ratios), "ratios": ratios, "published": published,
            "work_s": statistics.median(work) if work else float("nan"),
            "within": statistics.median(within), "withins": within}


# ---- 3b: restore phase of real recoveries -------------------------------------------------

def recovery_restore(a):
    runs = {1: [], 3: []}
    i, h, o = a.model.split(",")
    plans = ((1, ["role=1:step=13:phase=optimizer:action=kill"]),
             (3, ["role=0:step=13:phase=optimizer:action=kill", "role=2:step=13:phase=optimizer:action=kill"]))
    for tier, faults in [p for _ in range(a.recovery_runs) for p in plans]:
        name = f"bench-ckpt-tier{tier}-{os.getpid()}"
        cfg = os.path.join(a.dir, name + ".yaml")
        ckpt = os.path.join(a.dir, name + "-ckpt")
        shutil.rmtree(ckpt, ignore_errors=True)
        with open(cfg, "w") as f:
            f.write(f"job: {{name: {name}, nodes: 2, ranks_per_node: 2, dp: 4, hot_spares: 2, steps: 16, seed: 3}}\n"
                    f"trainer: {{model: {{input: {i}, hidden: {h}, output: {o}}}, batch_per_rank: 2, lr: 0.001, "
                    f"log_every: 5}}\n"
                    f"checkpoint: {{dir: {ckpt}, every_steps: 5, keep: 2}}\n"
                    f"recovery: {{phase_deadline_ms: 120000}}\n")
        argv = [a.trainer, "--config", cfg]
        for fault in faults:
            argv += ["--fault", fault]
        text, _ = mpirun(6, argv, timeout=1800)
        rec = next((r for r in frlib.events(text, "recovery") if r.get("tier") == tier), None)
        if rec is None:
            print(text[-3000:])
            sys.exit(f"no tier-{tier} recovery record")
        runs[tier].append(rec)
        shutil.rmtree(ckpt, ignore_errors=True)
        print(f"    tier {tier}: restore {rec['phases_ms'].get('restore')} ms, rebuild "
              f"{rec['phases_ms'].get('rebuild')} ms, total {rec['total_ms']} ms, "
              f"{rec['bytes_restored_per_replacement']} bytes per role")
    out = {}
    for tier, recs in runs.items():
        out[tier] = {"restore": statistics.median(r["phases_ms"].get("restore", 0) for r in recs),
                     "rebuild": statistics.median(r["phases_ms"].get("rebuild", 0) for r in recs),
                     "total": statistics.median(r["total_ms"] for r in recs),
                     "bytes": recs[0]["bytes_restored_per_replacement"], "n": len(recs)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write-bench", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--dir", required=True, help="where files are written (the storage being measured)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--mib-per-rank", type=float, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model", default="256,2048,256", help="trainer model input,hidden,output")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--train-ranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--recovery-runs", type=int, default=3)
    ap.add_argument("--skip", action="append", default=[], choices=["write", "steps", "recovery"])
    ap.add_argument("--json", help="also write the figures and the table here (bench/run.py uses it)")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    print(f"storage: {a.dir} ({os.statvfs(a.dir).f_bsize} B blocks); {os.cpu_count()} CPUs; "
          f"load {os.getloadavg()[0]:.1f}")

    w = s = r = None
    if "write" not in a.skip:
        print(f"1. write throughput: {a.ranks} ranks x {a.mib_per_rank} MiB, {a.reps} repetitions (+1 warm-up)")
        w = write_bench(a)
    if "steps" not in a.skip:
        print(f"2. step time: model {a.model}, {a.train_ranks} ranks, {a.steps} steps, checkpoint every {a.every} vs never")
        s = step_ratio(a)
    if "recovery" not in a.skip:
        print(f"3. restore phase of real recoveries: model {a.model}, 4 ranks + 2 hot spares")
        r = recovery_restore(a)

    table = []

    def out(line=""):  # printed, and kept for --json
        table.append(line)
        print(line)

    out()
    out("| measurement | per rank MB/s (min / median / max) | aggregate | vs dd |")
    out("| --- | --- | --- | --- |")
    if w:
        dd = w["dd"]["agg"]
        labels = {"dd": "plain write + fsync (dd-style)", "rankfile": "HDF5 rank file (write_rank_file)",
                  "checkpoint": "whole checkpoint (Checkpointer, background protocol)"}
        for key in ("dd", "rankfile", "checkpoint"):
            x = w[key]
            paired = w.get("paired", {}).get(key)
            vs = (f"median of per-repetition ratios {paired['median'] * 100:.0f} % "
                  f"({', '.join(f'{p * 100:.0f}' for p in paired['all'])}); " if paired else "")
            out(f"| write: {labels[key]}, {x['bytes'] / 1e6:.0f} MB | {x['rank_min']:.0f} / {x['rank_med']:.0f} / "
                  f"{x['rank_max']:.0f} | {x['agg']:.0f} MB/s ({x['agg_s']:.3f} s) | "
                  f"{vs}medians {x['agg'] / dd * 100:.0f} % aggregate, "
                  f"{x['rank_med'] / w['dd']['rank_med'] * 100:.0f} % per rank |")
        labels = {"hdf5-cold": "restore from HDF5, page cache dropped", "hdf5-warm": "restore from HDF5, page cache warm",
                  "shm": "restore from own shm snapshot (memcpy)", "replica": "restore from a peer's copy over MPI"}
        for key in ("hdf5-cold", "hdf5-warm", "shm", "replica"):
            if key in w:
                x = w[key]
                out(f"| {labels[key]} | {x['rank_min']:.0f} / {x['rank_med']:.0f} / {x['rank_max']:.0f} | "
                      f"{x['agg']:.0f} MB/s ({x['agg_s']:.3f} s) | |")
    if s:
        out(f"| step time within each checkpointing run: all steps vs steps with no checkpoint in flight | "
              f"median ratio {s['within']:.3f} (runs: {', '.join(f'{x:.3f}' for x in s['withins'])}) | | "
              f"target <= 1.02 |")
        out(f"| step time, checkpoint every {a.every} vs never | never {s['never_ms']:.1f} ms, every {a.every} "
              f"{s['every_ms']:.1f} ms | ratio {s['ratio']:.3f} (pairs: "
              f"{', '.join(f'{x:.3f}' for x in s['ratios'])}) | target <= 1.02; checkpoints published per run "
              f"{s['published']}; background work per checkpoint {s['work_s']:.3f} s = "
              f"{s['work_s'] / (a.every * s['never_ms'] / 1e3) * 100:.1f} % of the {a.every}-step interval |")
    if r:
        for tier in (1, 3):
            x = r[tier]
            what = "from snapshots + ring replicas" if tier == 1 else "from the HDF5 checkpoint"
            out(f"| recovery tier {tier} ({what}), {x['bytes'] / 1e6:.1f} MB per role, median of {x['n']} | "
                  f"restore phase {x['restore']:.1f} ms | rebuild phase {x['rebuild']:.1f} ms"
                  f"{' (includes verifying every file of the checkpoint)' if tier == 3 else ''}, "
                  f"total {x['total']:.1f} ms | |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"write": w, "steps": s, "recovery": {str(k): v for k, v in (r or {}).items()},
                       "settings": vars(a), "table": "\n".join(table).strip() + "\n"}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
