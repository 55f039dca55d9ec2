#!/usr/bin/env python3
"""Scale model: flashrec's recovery per phase from first principles, fitted here, projected to a cluster.

  scale_model.py --phases-json FILE        (bench/scale_phases.py: two series + bench_latency)
                 [--recovery-json FILE]    (bench/recovery_latency.py or run.py's results.json)
                 [--series device] [--spare hot] [--json OUT] [--png OUT] [assumption flags...]

1. Machine model. Each recovery phase measured here is fitted with
       t(n) = a + b * h(n) * s(n)
   h(n): the phase's complexity in the rank count n (log2 n message latencies for the
   tree/recursive-doubling phases, 1 for the byte-moving phases), s(n) = max(1, n / cores): the
   time-sharing of this machine's cores by n processes (MPI polls while it waits, so even the
   device-like series shares the cores during a recovery). The fit on the smaller rank counts
   predicts the largest one (out-of-sample check).
2. Cluster model. s(n) = 1 (one core per rank); b / (one-way latency measured here) = message
   latencies per log2 n level, multiplied by a published per-hop latency; byte phases =
   per-GPU state / bandwidth; plus GPU communicator (NCCL) rebuild and detection from published
   figures. Tier 2 (warm relaunch) and tier 3 (HDF5) as in docs/ARCHITECTURE.md ("Tiers"), weighted by how often
   each is needed (Llama 3's root causes).
3. Goodput eta = MTTF / (MTTF + E[cost per failure]) at 1K / 16K / 100K GPUs for two published
   failure rates, vs checkpoint-restart with Young's interval, beside published anchors; and the
   sensitivity of eta to each assumption.

Every assumption is a flag whose help names its source; docs/scale-model.md explains them.
Pure Python for the model (no numpy); the PNG needs matplotlib (python3-matplotlib).
"""
import argparse
import copy
import json
import math
import os
import statistics
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
PHASES = ["revoke", "shrink", "agree", "exchange", "spawn", "merge", "rebuild", "restore", "resumed"]
# Complexity in n of each phase of runtime/src/recovery.cpp (docs/recovery.md):
#   revoke   MPIX_Comm_revoke: a reliable broadcast, log2 n hops (the local call returns at once;
#            the propagation is paid inside shrink)
#   shrink   ERA agreement on the failed set + a new context id: O(log n) hops
#   agree    ERA agreement (MPIX_Comm_agree): O(log n) hops
#   exchange allgather of one small report per process: log n hops (+ n * ~100 B, negligible)
#   spawn    MPI_Comm_spawn of one process: a per-process cost + collective connect, log n
#   merge    MPI_Intercomm_merge + a second report exchange: log n
#   rebuild  MPI_Comm_split into the DP/TP/PP communicators: allgather + sort, log n
#   restore  the replacement receives its role's state: bytes / bandwidth, independent of n
#   resumed  protection restarted: snapshot segments re-created and faulted in: bytes per rank
COMPLEXITY = {"revoke": "log", "shrink": "log", "agree": "log", "exchange": "log", "spawn": "log",
              "merge": "log", "rebuild": "log", "restore": "bytes", "resumed": "bytes"}
GIB = 1 << 30
MIB = 1 << 20


# --- the machine model ----------------------------------------------------------------------------

def h_of(phase, n):
    return math.log2(n) if COMPLEXITY.get(phase, "log") == "log" else 1.0


def share(n, cores):
    return max(1.0, n / cores) if cores else 1.0


def fit_ab(xs, ys):
    """Least squares t = a + b x with a, b >= 0 (clipped and refitted)."""
    if len(xs) == 1:
        return 0.0, ys[0] / xs[0] if xs[0] else 0.0
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    a = my - b * mx
    if b < 0:
        return my, 0.0
    if a < 0:  # through the origin
        return 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return a, b


def fit_machine(phase, pts, cores, with_share=True):
    xs = [h_of(phase, n) * (share(n, cores) if with_share else 1.0) for n, _ in pts]
    a, b = fit_ab(xs, [t for _, t in pts])
    return {"a": a, "b": b, "complexity": COMPLEXITY.get(phase, "log"), "shared": with_share}


def eval_machine(fit, phase, n, cores):
    return fit["a"] + fit["b"] * h_of(phase, n) * (share(n, cores) if fit["shared"] else 1.0)


def fit_power(pts):
    """The previous model: t = a n^b on log-log, b in [0, 1] (kept for the out-of-sample comparison)."""
    lx = [math.log(n) for n, _ in pts]
    ly = [math.log(max(t, 1e-6)) for _, t in pts]
    if len(pts) == 1:
        return {"a": math.exp(ly[0]), "b": 0.0}
    mx, my = statistics.mean(lx), statistics.mean(ly)
    sxx = sum((x - mx) ** 2 for x in lx)
    b = min(1.0, max(0.0, sum((x - mx) * (y - my) for x, y in zip(lx, ly)) / sxx if sxx else 0.0))
    return {"a": math.exp(my - b * mx), "b": b}


# --- inputs -----------------------------------------------------------------------------------------

def load_rows(path, key):
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict) and key in data.get("benchmarks", {}):  # bench/run.py's results.json
        data = data["benchmarks"][key].get("data") or []
    if isinstance(data, dict) and "rows" in data:
        return data["rows"], data.get("latency", []), data.get("bandwidth"), data.get("machine", {})
    return data, [], None, {}


def series_points(rows, series, spare, state_mib=None):
    """{phase: [(n, median ms)]}, {phase: {n: (min, max)}}, detect points, state MiB."""
    pts, spread, detect, mib = {}, {}, [], None
    for r in rows:
        if r.get("series", "cpu") != series or r.get("spare") != spare or not r.get("phases"):
            continue
        if state_mib is not None and r.get("state_mib", state_mib) != state_mib:
            continue
        mib = r.get("state_mib", mib)
        n = r["ranks"]
        for p, v in r["phases"].items():
            if p in PHASES:
                pts.setdefault(p, []).append((n, v["median"]))
                spread.setdefault(p, {})[n] = (v["min"], v["max"])
        if "detect" in r["phases"]:
            detect.append((n, r["phases"]["detect"]["median"]))
    for p in pts:
        pts[p].sort()
    return pts, spread, sorted(detect), mib


# --- failure process, tiers, cluster costs -------------------------------------------------------

def mttf_h(n, p):
    if p.failures == "llama3":  # a constant per-GPU rate: 419 interruptions in 54 days on 16,384 GPUs
        return p.llama3_days * 24 / p.llama3_failures * p.llama3_gpus / n * p.mttf_factor
    # Meta's research clusters: a power law through 7.9 h at 1,024 and 1.8 h at 16,384 GPUs
    beta = math.log(p.meta_mttf_h[0] / p.meta_mttf_h[1]) / math.log(p.meta_gpus[1] / p.meta_gpus[0])
    return p.meta_mttf_h[0] * (n / p.meta_gpus[0]) ** (-beta) * p.mttf_factor


def restart_s(n, p):
    """Checkpoint-restart relaunch (teardown, new job, communicators, checkpoint load)."""
    return p.restart_s * (n / p.restart_ref_n) ** p.restart_exp


def nccl_rebuild_s(n, p):
    if p.nccl == "none":
        return 0.0
    if p.nccl == "delta":  # only the affected groups, delta-based (FlashRecovery / TrainMover)
        return p.nccl_delta_s
    if p.nccl == "global":  # full re-initialisation of every communicator
        return p.nccl_global_s
    # DeadPool Fig. 11: 17.1 s at 32 -> 29.8 s at 512 GPUs, mostly NCCL rebuild; a log2 n line
    (n0, t0), (n1, t1) = p.nccl_points
    return t0 + (t1 - t0) / math.log2(n1 / n0) * max(0.0, math.log2(n / n0))


def tier1_phases(n, m, p):
    """Seconds per phase of an in-job (tier 1) repair at n ranks on the cluster."""
    out = {"detect": p.detect_s + math.log2(n) * p.cluster_latency_us * 1e-6}
    phases = [ph for ph in PHASES if ph in m["fits"] and (p.spare == "spawned" or ph not in ("spawn", "merge"))]
    for ph in phases:
        f = m["fits"][ph]
        if COMPLEXITY[ph] == "log":
            hops_per_level = f["b"] / (m["latency_us"] / 1e3)  # message latencies per log2 n level
            out[ph] = (f["a"] + hops_per_level * math.log2(n) * p.cluster_latency_us / 1e3) / 1e3
        elif ph == "restore":  # the replacement receives its role's state over the network
            out[ph] = f["a"] / 1e3 + p.state_gib * GIB / (m["cluster_gbps"] * 1e9)
        else:  # resumed: per-byte host cost measured here (one rank per core), scaled to the state
            out[ph] = (f["a"] + f["b"] * p.state_gib * GIB / (m["state_mib"] * MIB)) / 1e3 * p.resumed_factor
    out["nccl_rebuild"] = nccl_rebuild_s(n, p)
    return out


def ckpt_interval_s(delta, mttf, rule):
    """Optimal checkpoint period: Young's sqrt(2 delta M) (= FlashRecovery Eq. 3), or Daly's
    higher-order estimate (J. T. Daly, FGCS 22(3), 2006) for delta < 2M."""
    if rule == "daly" and delta < 2 * mttf:
        x = delta / (2 * mttf)
        return math.sqrt(2 * delta * mttf) * (1 + math.sqrt(x) / 3 + x / 9) - delta
    return math.sqrt(2 * delta * mttf)


def ckpt_eta(n, p, rule):
    mttf = mttf_h(n, p) * 3600
    every = max(1, round(ckpt_interval_s(p.ckpt_stall_s, mttf, rule) / p.step_s))
    c = (mttf / (every * p.step_s + p.ckpt_stall_s) * p.ckpt_stall_s + p.detect_s + restart_s(n, p)
         + p.step_s * ((every - 1) / 2 + 0.5))
    return every, mttf / (mttf + c)


def costs(n, m, p):
    mttf = mttf_h(n, p) * 3600
    ts = p.step_s
    every = max(1, round(ckpt_interval_s(p.ckpt_stall_s, mttf, "young") / ts))
    ck_replay = ts * ((every - 1) / 2 + 0.5)
    fr_replay = ts * (0.5 + p.sync_fraction)
    t1 = tier1_phases(n, m, p)
    c1 = sum(t1.values()) + fr_replay
    c2 = p.detect_s + p.tier2_factor * restart_s(n, p) + p.state_gib * GIB / (p.node_mem_gbps * 1e9) + fr_replay
    c3 = p.detect_s + restart_s(n, p) + ck_replay  # HDF5 in the background at the same interval, no stall
    w = p.tier_weights
    fr_c = w[0] * c1 + w[1] * c2 + w[2] * c3 + p.overhead * mttf
    ck_over = mttf / (every * ts + p.ckpt_stall_s) * p.ckpt_stall_s
    ck_c = ck_over + p.detect_s + restart_s(n, p) + ck_replay
    return {"ranks": n, "mttf_h": mttf / 3600, "tier1_phases_s": t1,
            "flashrec": {"tier1_s": c1, "tier2_s": c2, "tier3_s": c3, "E_C_s": fr_c, "eta": mttf / (mttf + fr_c),
                         "downtime_tier1_s": c1 - fr_replay, "eta_tier1_only": mttf / (mttf + c1),
                         "downtime_s": (c1 - fr_replay, c2 - fr_replay, c3 - ck_replay)},
            "ckpt": {"every_steps": every, "overhead_s": ck_over, "restart_s": restart_s(n, p), "replay_s": ck_replay,
                     "E_C_s": ck_c, "eta": mttf / (mttf + ck_c)}}


# --- Monte Carlo check of the formula ------------------------------------------------------------

def simulate(n, m, p, policy, seed):
    """useful / wall time of a run of p.sim_steps steps with exponential failures. Unlike the
    formula, a failure during a recovery starts that recovery over, and progress is tracked
    exactly: flashrec loses the step in progress (and the previous one before the sync point;
    back to the last HDF5 checkpoint in tier 3); checkpoint-restart loses everything since its
    last completed checkpoint."""
    import random
    rng = random.Random(seed)
    c = costs(n, m, p)
    mttf, ts, total = c["mttf_h"] * 3600, p.step_s, p.sim_steps
    every = c["ckpt"]["every_steps"]
    now = 0.0

    def recover(duration):
        nonlocal now
        while True:
            tf = rng.expovariate(1 / mttf)
            if tf >= duration:
                now += duration
                return
            now += tf

    if policy == "flashrec":
        teff, done = ts * (1 + p.overhead), 0.0
        while True:
            tf = rng.expovariate(1 / mttf)
            need = (total - done) * teff
            if tf >= need:
                return total * ts / (now + need)
            now += tf
            done += tf / teff
            tier = rng.choices((0, 1, 2), weights=p.tier_weights)[0]
            whole = math.floor(done)
            if tier == 2:
                done = float(whole // every * every)
            else:
                done = float(max(0, whole - (1 if done - whole < p.sync_fraction else 0)))
            recover(c["flashrec"]["downtime_s"][tier])
    ckpt, dur = 0, p.detect_s + restart_s(n, p)
    while ckpt < total:
        steps = min(every, total - ckpt)
        seg = steps * ts + (p.ckpt_stall_s if ckpt + steps < total else 0.0)
        tf = rng.expovariate(1 / mttf)
        if tf >= seg:
            now += seg
            ckpt += steps
            continue
        now += tf
        recover(dur)
    return total * ts / now


# --- sensitivity --------------------------------------------------------------------------------------

def sensitivity(n, m, p):
    """(name, low label, eta low, high label, eta high) for one change of each assumption."""
    base = costs(n, m, p)["flashrec"]["eta"]
    swings = []

    def vary(name, attr, lo, hi, fmt=str):
        out = []
        for v in (lo, hi):
            q = copy.copy(p)
            setattr(q, attr, v)
            out.append((fmt(v), costs(n, m, q)["flashrec"]["eta"]))
        swings.append((name, out[0][0], out[0][1], out[1][0], out[1][1]))

    vary("detection (s)", "detect_s", 1.0, 30.0)
    vary("failure rate (MTTF x)", "mttf_factor", 2.0, 0.5, lambda v: f"MTTF x{v:g}")
    vary("NCCL rebuild", "nccl", "delta", "global")
    vary("step time (s)", "step_s", 5.0, 60.0)
    vary("state per GPU (GiB)", "state_gib", 2.0, 32.0)
    vary("tier weights", "tier_weights", (1.0, 0.0, 0.0), (0.4, 0.3, 0.3),
         lambda v: "/".join(f"{x:g}" for x in v))
    vary("tier-2 relaunch (x restart)", "tier2_factor", 0.14, 1.0)
    vary("per-hop latency (us)", "cluster_latency_us", 1.0, 20.0)
    vary("link bandwidth (GB/s)", "cluster_link_gbps", 100.0, 12.5)
    vary("protection overhead", "overhead", 0.0, 0.03)
    vary("resumed (x measured)", "resumed_factor", 0.0, 3.0)
    for i, s in enumerate(swings):  # link bandwidth acts through m["cluster_gbps"]
        if s[0].startswith("link"):
            vals = []
            for v in (100.0, 12.5):
                mm = dict(m)
                mm["cluster_gbps"] = v * m["pipeline_efficiency"]
                vals.append(costs(n, mm, p)["flashrec"]["eta"])
            swings[i] = (s[0], "100", vals[0], "12.5", vals[1])
    swings.sort(key=lambda s: -abs(s[2] - s[4]))
    return base, swings


# --- output ---------------------------------------------------------------------------------------------

def need_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        pass
    if (os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and os.access(SYSTEM_PYTHON, os.X_OK)
            and not os.environ.get("FLASHREC_SCALE_REEXEC")):
        import subprocess
        if subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0:
            os.environ["FLASHREC_SCALE_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
    print("scale_model: no matplotlib: no PNG (apt-get install python3-matplotlib)", file=sys.stderr)
    return False


def render(png, machine, grid, tornado, p, anchors, beyond):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.4))
    ax = axes[0]
    for si, (series, mm) in enumerate(machine.items()):
        tot_meas = {}
        for ph, pts in mm["points"].items():
            for n, t in pts:
                tot_meas[n] = tot_meas.get(n, 0) + t
        ns = sorted(tot_meas)
        grid_n = [2 ** (k / 4) for k in range(4, 4 * 7 + 1)]
        fit_tot = [sum(eval_machine(f, ph, n, mm["cores"]) for ph, f in mm["fits_insample"].items()) for n in grid_n]
        c = ["#1f77b4", "#2ca02c"][si % 2]
        ax.plot(ns, [tot_meas[n] for n in ns], "o", color=c, label=f"{series}: measured (sum of phases)")
        ax.plot(grid_n, fit_tot, "-", color=c, lw=1,
                label=f"{series}: a + b h(n) s(n), fitted on n < {mm['holdout']}" if mm["holdout"] else series)
        if mm["holdout"]:
            pred = sum(mm["holdout_pred"].values())
            ax.plot([mm["holdout"]], [pred], "*", ms=14, color=c, mfc="none",
                    label=f"{series}: predicted {mm['holdout']} ({pred:.0f} ms)")
        extra = beyond.get(series, {})
        if extra:
            ax.plot(list(extra), list(extra.values()), "x", ms=9, color=c,
                    label=f"{series}: measured, beyond --max-ranks (not fitted)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks (on 2 cores)")
    ax.set_ylabel("tier-1 repair, sum of phases (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("this machine: fit on the smaller counts, predict the largest", fontsize=9)

    ax = axes[1]
    for scen, style in (("meta", "-"), ("llama3", "--")):
        rows = grid[scen]
        ns = [r["ranks"] for r in rows]
        ax.plot(ns, [r["flashrec"]["eta"] for r in rows], style, color="#1f77b4", marker="o", ms=3,
                label=f"flashrec, tiers weighted ({scen} failure rate)")
        ax.plot(ns, [r["ckpt"]["eta"] for r in rows], style, color="#d62728", marker="s", ms=3,
                label=f"checkpoint-restart, Young ({scen})")
    for a in anchors:
        if a.get("eta") is not None:
            ax.plot([a["ranks"]], [a["eta"]], "k*", ms=10)
            ax.annotate(a["name"], (a["ranks"], a["eta"]), fontsize=7, xytext=(4, -10), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_xlabel("GPUs (one rank each)")
    ax.set_ylabel("goodput  eta = MTTF / (MTTF + E[C])")
    ax.set_ylim(0.5, 1.005)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(f"cluster projection (step {p.step_s:g} s, {p.state_gib:g} GiB/GPU, NCCL {p.nccl}); "
                 "* = published anchor (ETTR)", fontsize=8)

    ax = axes[2]
    base, sw = tornado
    names = [s[0] for s in sw][::-1]
    for i, s in enumerate(sw[::-1]):
        for label, val, colour in ((s[1], s[2], "#9ecae1"), (s[3], s[4], "#fc9272")):
            ax.barh(i, val - base, left=base, color=colour)
            right = val >= base
            ax.text(val, i, f" {label}" if right else f"{label} ", ha="left" if right else "right",
                    va="center", fontsize=6)
    ax.axvline(base, color="k", lw=0.8)
    ax.margins(x=0.25)  # room for the value labels
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.set_xlabel(f"flashrec goodput at {p.tornado_n:,} GPUs (base {base:.4f})")
    ax.set_title("sensitivity: one assumption changed at a time (blue: first value, red: second)", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phases-json", help="bench/scale_phases.py --json output (both series + bench_latency)")
    ap.add_argument("--recovery-json", help="bench/recovery_latency.py --json (or run.py's results.json): series 'cpu'")
    ap.add_argument("--protection-json", help="accepted for bench/run.py; not used by this model")
    ap.add_argument("--baseline-json", help="accepted for bench/run.py; not used by this model")
    ap.add_argument("--series", default=None, help="series whose fits drive the cluster projection "
                    "(default: 'device' if measured, else 'cpu')")
    ap.add_argument("--spare", choices=["hot", "spawned"], default="hot")
    ap.add_argument("--state-mib", type=int, default=None, help="use the rows of this state size (default: smallest)")
    ap.add_argument("--cores", type=int, default=None, help="cores of the measuring machine (default: this one's)")
    ap.add_argument("--max-ranks", type=int, default=None, help="ignore rows measured at more ranks than this")
    ap.add_argument("--latency-us", type=float, default=None,
                    help="one-way small-message latency here (default: bench_latency at 2 ranks in --phases-json)")
    ap.add_argument("--here-p2p-gbps", type=float, default=None,
                    help="MPI point-to-point bandwidth here (default: bench_bandwidth in --phases-json, else 3.0, "
                         "docs/results.md: 2-4.5 GB/s)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 16384, 100000])
    # failure process
    ap.add_argument("--failures", choices=["meta", "llama3"], default="meta")
    ap.add_argument("--meta-mttf-h", type=float, nargs=2, default=[7.9, 1.8],
                    help="Meta's research clusters (Kokolis et al., HPCA 2025, arXiv 2410.21680): projected MTTF at "
                         "--meta-gpus")
    ap.add_argument("--meta-gpus", type=float, nargs=2, default=[1024, 16384])
    ap.add_argument("--llama3-failures", type=float, default=419, help="Llama 3 (arXiv 2407.21783): unexpected "
                    "interruptions in --llama3-days on --llama3-gpus")
    ap.add_argument("--llama3-days", type=float, default=54)
    ap.add_argument("--llama3-gpus", type=float, default=16384)
    ap.add_argument("--mttf-factor", type=float, default=1.0, help="multiply the MTTF (sensitivity)")
    ap.add_argument("--tier-weights", type=float, nargs=3, default=[0.573, 0.279, 0.148],
                    help="share of failures repaired by tier 1/2/3; from Llama 3's root causes: GPU, HBM3, SRAM, "
                         "GPU system processor, thermal (57.3%%: a process dies on a live node) / network, host, "
                         "NIC, other node hardware (27.9%%: a node is lost) / software bug, dependency, silent "
                         "data corruption (14.8%%: replay cannot fix it)")
    # workload
    ap.add_argument("--step-s", type=float, default=20.0, help="step time, constant under weak scaling (DeadPool §IV)")
    ap.add_argument("--sync-fraction", type=float, default=0.9, help="flashrec replays 0.5 + this many steps")
    ap.add_argument("--state-gib", type=float, default=8.0,
                    help="state a replacement receives per GPU (assumed: a 405B model on 16K GPUs, TP8 x PP16: "
                         "~6.3 GB bf16 parameters + ~0.3 GB optimizer shard)")
    ap.add_argument("--overhead", type=float, default=0.0, help="protection's step slowdown (DeadPool Fig. 6: 0)")
    # cluster constants
    ap.add_argument("--detect-s", type=float, default=10.0,
                    help="detection by heartbeat / timeout (FlashRecovery Table 4: ~10 s; FFTrainer: 6 s)")
    ap.add_argument("--cluster-latency-us", type=float, default=2.0,
                    help="MPI one-way latency per hop on InfiniBand (assumed 2 us: ~1 us NIC-to-NIC + switch hops)")
    ap.add_argument("--cluster-link-gbps", type=float, default=50.0, help="per-GPU link: NDR InfiniBand 400 Gb/s")
    ap.add_argument("--node-mem-gbps", type=float, default=20.0, help="host memory copy for a local restore (assumed)")
    ap.add_argument("--resumed-factor", type=float, default=1.0, help="multiply the per-byte 'resumed' cost")
    ap.add_argument("--nccl", choices=["deadpool", "delta", "global", "none"], default="deadpool",
                    help="GPU communicator rebuild: DeadPool's measured hot swap as a log2 n line (default), "
                         "delta-based (FlashRecovery 16.26 s at 5,472 / TrainMover ~20 s at 1,024), a global "
                         "re-init (NVIDIA/nccl#1156: 2.5 min above some K GPUs), none (MPI only)")
    ap.add_argument("--nccl-points", type=float, nargs=4, default=[32, 17.1, 512, 29.8])
    ap.add_argument("--nccl-delta-s", type=float, default=16.26)
    ap.add_argument("--nccl-global-s", type=float, default=150.0)
    ap.add_argument("--tier2-factor", type=float, default=0.755,
                    help="tier-2 warm relaunch = this x restart(n): restart without its checkpoint load "
                         "(FlashRecovery review Table 4: 1 - 60/245.2)")
    # checkpoint-restart
    ap.add_argument("--ckpt-stall-s", type=float, default=30.0, help="stall per checkpoint (FlashRecovery Table 4)")
    ap.add_argument("--restart-s", type=float, default=48.4, help="restart at --restart-ref-n (FlashRecovery Table 3: "
                    "0.14 + 18 + 9.27 + 21 s at 64 devices)")
    ap.add_argument("--restart-ref-n", type=float, default=64)
    ap.add_argument("--restart-exp", type=float, default=0.365, help="puts Table 4's 245.2 s at 5,472 on the curve")
    ap.add_argument("--tornado-n", type=int, default=16384)
    ap.add_argument("--sim-steps", type=int, default=100000, help="steps of each simulated run (DeadPool §VII-C: 100K)")
    ap.add_argument("--sim-seeds", type=int, default=5, help="simulated runs per point (0: no simulation)")
    ap.add_argument("--json")
    ap.add_argument("--png")
    p = ap.parse_args()
    p.nccl_points = ((p.nccl_points[0], p.nccl_points[1]), (p.nccl_points[2], p.nccl_points[3]))
    p.tier_weights = tuple(p.tier_weights)
    have_plot = bool(p.png) and need_matplotlib()  # may re-run this under /usr/bin/python3: before any output
    if not p.phases_json and not p.recovery_json:
        sys.exit("scale_model: give --phases-json (bench/scale_phases.py) or --recovery-json")

    rows, lat, bw, mach = [], [], None, {}
    if p.phases_json:
        rows, lat, bw, mach = load_rows(p.phases_json, "scale_phases")
    if p.recovery_json:
        rows += load_rows(p.recovery_json, "recovery")[0]
    beyond = {}  # sums of phases above --max-ranks: drawn, not fitted
    if p.max_ranks:
        states = [r["state_mib"] for r in rows if r.get("state_mib") is not None]
        want = p.state_mib if p.state_mib is not None else min(states, default=None)
        for r in rows:
            if r["ranks"] > p.max_ranks and r.get("spare") == p.spare and r.get("state_mib") == want:
                beyond.setdefault(r.get("series", "cpu"), {})[r["ranks"]] = sum(
                    v["median"] for k, v in r["phases"].items() if k in PHASES)
        rows = [r for r in rows if r["ranks"] <= p.max_ranks]
    if p.cores is None:
        p.cores = mach.get("cores") or len(os.sched_getaffinity(0))
    lat2 = next((x for x in lat if x["ranks"] == 2), None)
    latency_us = p.latency_us or (lat2["pingpong_us"] if lat2 else 6.5)
    p2p = p.here_p2p_gbps or (bw or {}).get("mpi_p2p_GBps") or 3.0
    sizes = sorted({r.get("state_mib") for r in rows if r.get("state_mib") is not None}) or [None]
    state_mib = p.state_mib if p.state_mib is not None else sizes[0]
    have = {r.get("series", "cpu") for r in rows}
    p.series = p.series or ("device" if "device" in have else "cpu")

    print(f"scale model: phases measured on {mach.get('cpu', 'this machine')}, {p.cores} cores; "
          f"{p.spare} spare; state {state_mib} MiB per rank")
    print(f"constants measured here: one-way latency {latency_us:.2f} us (bench_latency, 2 ranks, loopback TCP); "
          f"MPI p2p {p2p:.2f} GB/s" + (f", memcpy {bw['memcpy_GBps']:.2f} GB/s" if bw else ""))
    if lat:
        print("bench_latency (us, median): " + "; ".join(
            f"n={int(x['ranks'])}: ping {x['pingpong_us']:.1f}, barrier {x['barrier_us']:.1f}, agree {x['agree_us']:.1f}, "
            f"shrink {x['shrink_us']:.1f}, dup {x['dup_us']:.1f}" for x in sorted(lat, key=lambda x: x["ranks"])))
        # agree / shrink on a healthy communicator: the same model, out of sample at the largest n
        big = int(max(x["ranks"] for x in lat))
        for key in ("agree_us", "shrink_us", "barrier_us"):
            small = [(x["ranks"], x[key]) for x in lat if x["ranks"] < big]
            if len(small) >= 2:
                f = fit_machine("agree", small, p.cores)
                pred = eval_machine(f, "agree", big, p.cores)
                meas = next(x[key] for x in lat if x["ranks"] == big)
                print(f"  {key[:-3]:8s} a + b log2(n) s(n): a {f['a']:.1f} us, b {f['b']:.2f} us "
                      f"(= {f['b'] / latency_us:.1f} latencies per level); predicted n={big}: {pred:.0f} us, "
                      f"measured {meas:.0f} us ({(pred - meas) / meas:+.0%})")

    machine = {}
    for series in sorted(have):
        pts, spread, detect, mib = series_points(rows, series, p.spare, state_mib)
        if not pts:
            continue
        ns = sorted({n for v in pts.values() for n, _ in v})
        holdout = ns[-1] if len(ns) >= 3 else None
        fits, fits_in, pred, power_pred, noshare_pred = {}, {}, {}, {}, {}
        for ph, v in pts.items():
            fits[ph] = fit_machine(ph, v, p.cores)  # all points: drives the projection
            train = [x for x in v if x[0] != holdout]
            fits_in[ph] = fit_machine(ph, train, p.cores) if holdout else fits[ph]
            if holdout and train:
                pred[ph] = eval_machine(fits_in[ph], ph, holdout, p.cores)
                pw = fit_power(train)
                power_pred[ph] = pw["a"] * holdout ** pw["b"]
                noshare_pred[ph] = eval_machine(fit_machine(ph, train, p.cores, False), ph, holdout, p.cores)
        machine[series] = {"points": pts, "spread": spread, "detect": detect, "fits": fits, "fits_insample": fits_in,
                           "holdout": holdout, "holdout_pred": pred, "power_pred": power_pred,
                           "noshare_pred": noshare_pred, "cores": p.cores, "state_mib": mib, "ranks": ns}
        print(f"\nseries '{series}' ({p.spare}), ranks {ns}: measured medians (ms) and the machine model "
              f"t = a + b h(n) s(n), s(n) = max(1, n/{p.cores})")
        print("| phase | complexity h(n) | " + " | ".join(f"n={n}" for n in ns) +
              " | a (ms) | b (ms) | " + (f"n={holdout} predicted from the rest: model / power fit / no s(n) |"
                                         if holdout else ""))
        print("|---|---|" + "---|" * len(ns) + "---|---|" + ("---|" if holdout else ""))
        tot_meas, tot = {}, {"m": 0, "p": 0, "n": 0}
        for ph in PHASES:
            if ph not in pts:
                continue
            d = dict(pts[ph])
            cells = []
            for n in ns:
                tot_meas[n] = tot_meas.get(n, 0) + d.get(n, 0)
                lo, hi = spread[ph].get(n, (0, 0))
                cells.append(f"{d[n]:.1f} ({lo:.1f}-{hi:.1f})" if n in d else "-")
            f = fits[ph]
            extra = ""
            if holdout and ph in pred:
                tot["m"] += pred[ph]
                tot["p"] += power_pred[ph]
                tot["n"] += noshare_pred[ph]
                extra = f" {pred[ph]:.1f} / {power_pred[ph]:.1f} / {noshare_pred[ph]:.1f} |"
            hname = "log2 n" if COMPLEXITY[ph] == "log" else "1 (bytes)"
            print(f"| {ph} | {hname} | " + " | ".join(cells) + f" | {f['a']:.3g} | {f['b']:.3g} |" + extra)
        if holdout:
            meas = tot_meas[holdout]
            print(f"| **sum** | | " + " | ".join(f"{tot_meas[n]:.1f}" for n in ns) + " | | | "
                  f"{tot['m']:.1f} / {tot['p']:.1f} / {tot['n']:.1f} |")
            machine[series]["holdout_check"] = {"measured_ms": meas, "model_ms": tot["m"], "power_ms": tot["p"],
                                                "noshare_ms": tot["n"]}
            print(f"out of sample: sum of phases at n={holdout} measured {meas:.1f} ms; machine model "
                  f"{tot['m']:.1f} ms ({(tot['m'] - meas) / meas:+.0%}); old power fit {tot['p']:.1f} ms "
                  f"({(tot['p'] - meas) / meas:+.0%}); model without s(n) {tot['n']:.1f} ms "
                  f"({(tot['n'] - meas) / meas:+.0%})")
        if detect:
            print("measured detect (a killed process on a live node; not used at scale): "
                  + ", ".join(f"n={n}: {v:.1f} ms" for n, v in detect))

    if p.series not in machine:
        sys.exit(f"scale_model: no '{p.series}' series with '{p.spare}' rows")
    mm = machine[p.series]
    if mm["state_mib"] is None:  # recovery_latency.py rows do not carry their state size
        mm["state_mib"] = p.state_mib or 64
        print(f"(rows without state_mib: assumed {mm['state_mib']} MiB per rank, recovery_latency.py's default; "
              "--state-mib sets it)")
    # Pipeline efficiency of restore here (bytes per second of the phase's per-byte term, one rank per
    # core, vs MPI p2p), transferred to the cluster link.
    rf = mm["fits"].get("restore", {"a": 0, "b": 0})
    restore_gbps_here = (mm["state_mib"] * MIB / (rf["b"] / 1e3) / 1e9) if rf["b"] else p2p
    eff = min(1.0, restore_gbps_here / p2p)
    m = {"fits": mm["fits"], "latency_us": latency_us, "state_mib": mm["state_mib"],
         "pipeline_efficiency": eff, "cluster_gbps": p.cluster_link_gbps * eff}
    print(f"\nconstants for the projection (series '{p.series}'): restore moves {restore_gbps_here:.2f} GB/s per rank "
          f"here = {eff:.0%} of MPI p2p; on the cluster {p.cluster_link_gbps:g} GB/s x {eff:.0%} = "
          f"{m['cluster_gbps']:.1f} GB/s; log phases: message latencies per log2 n level = b / {latency_us:.2f} us:")
    print("  " + ", ".join(f"{ph} {mm['fits'][ph]['b'] * 1e3 / latency_us:.1f}" for ph in PHASES
                           if ph in mm["fits"] and COMPLEXITY[ph] == "log"))
    rs = mm["fits"].get("resumed")
    if rs and rs["b"] > 0:
        print(f"  resumed: {rs['a']:.1f} ms + {rs['b']:.1f} ms per {mm['state_mib']} MiB per rank "
              f"(= {mm['state_mib'] * MIB / (rs['b'] / 1e3) / 1e9:.2f} GB/s of snapshot segments re-created)")

    log_here = {n: sum(mm["fits"][ph]["b"] * math.log2(n) for ph in mm["fits"] if COMPLEXITY[ph] == "log")
                for n in p.ranks}
    print("  (pessimistic bound: the log phases at this machine's own per-level cost b, one rank per core, "
          "instead of b / latency x the cluster's latency: " +
          ", ".join(f"{n:,}: {v:.1f} ms" for n, v in log_here.items()) + ")")
    spawn_pts = series_points(rows, p.series, "spawned", state_mib)[0]
    m_spawn = None
    if "spawn" in spawn_pts:
        m_spawn = dict(m)
        m_spawn["fits"] = {ph: fit_machine(ph, v, p.cores) for ph, v in spawn_pts.items()}

    grid = {}
    for scen in ("meta", "llama3"):
        q = copy.copy(p)
        q.failures = scen
        grid[scen] = [costs(n, m, q) for n in sorted(set(p.ranks + [512, 1024, 2048, 4096, 4800, 8192, 9600,
                                                                      16384, 32768, 65536, 100000]))]
    print(f"\ntier-1 repair on the cluster, seconds per phase ({p.spare} spare; detect {p.detect_s:g} s, "
          f"{p.cluster_latency_us:g} us per hop, {p.state_gib:g} GiB/GPU, NCCL '{p.nccl}'):")
    names = list(costs(p.ranks[0], m, p)["tier1_phases_s"])
    print("| GPUs | " + " | ".join(names) + " | total |")
    print("|---|" + "---|" * (len(names) + 1))
    for n in p.ranks:
        t1 = costs(n, m, p)["tier1_phases_s"]
        print(f"| {n:,} | " + " | ".join(f"{t1[k]:.3g}" for k in names) + f" | {sum(t1.values()):.1f} |")
    if m_spawn:
        q = copy.copy(p)
        q.spare = "spawned"
        print("spawned replacement instead of a hot spare (spawn + merge phases; fits of the spawned rows): " + ", ".join(
            f"{n:,}: {sum(tier1_phases(n, m_spawn, q).values()):.2f} s (spawn "
            f"{tier1_phases(n, m_spawn, q)['spawn'] * 1e3:.0f} ms)" for n in p.ranks))

    print(f"\ngoodput (eta = MTTF / (MTTF + E[C])); step {p.step_s:g} s; tiers {p.tier_weights}; "
          "checkpoint-restart with Young's interval:")
    print("| failures | GPUs | MTTF | flashrec tier 1 / 2 / 3 (s per failure) | flashrec eta | flashrec eta, all tier 1 | "
          "ckpt K* | ckpt restart | ckpt E[C] | ckpt eta | ckpt eta, Daly K | simulated: flashrec / ckpt |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = {}
    for scen in ("meta", "llama3"):
        q = copy.copy(p)
        q.failures = scen
        for n in p.ranks:
            r = costs(n, m, q)
            results.setdefault(scen, []).append(r)
            f, c = r["flashrec"], r["ckpt"]
            dk, de = ckpt_eta(n, q, "daly")
            c["daly_every_steps"], c["daly_eta"] = dk, de
            sim = ""
            if p.sim_seeds > 0:
                fs = statistics.mean(simulate(n, m, q, "flashrec", k) for k in range(p.sim_seeds))
                cs = statistics.mean(simulate(n, m, q, "ckpt", 1000 + k) for k in range(p.sim_seeds))
                r["sim"] = {"flashrec_eta": fs, "ckpt_eta": cs, "runs": p.sim_seeds, "steps": p.sim_steps}
                sim = f"{fs:.4f} / {cs:.4f}"
            print(f"| {scen} | {n:,} | {r['mttf_h']:.2f} h | {f['tier1_s']:.0f} / {f['tier2_s']:.0f} / {f['tier3_s']:.0f} | "
                  f"{f['eta']:.4f} | {f['eta_tier1_only']:.4f} | {c['every_steps']} | {c['restart_s']:.0f} s | "
                  f"{c['E_C_s']:.0f} s | {c['eta']:.4f} | {de:.4f} ({dk}) | {sim} |")

    anchors = [
        {"name": "ByteRobust", "ranks": 9600, "eta": 0.97, "what": "97 % ETTR, 3-month job (arXiv 2509.16293)"},
        {"name": "TrainMover", "ranks": 1024, "downtime_s": 20, "what": "~20 s downtime (arXiv 2412.12636)"},
        {"name": "DeadPool", "ranks": 512, "downtime_s": 40, "what": "< 40 s hot swap (seed paper, Fig. 11)"},
        {"name": "FlashRecovery", "ranks": 4800, "downtime_s": 147.5, "what": "147.5 s total (seed paper, Table III)"},
        {"name": "Llama 3", "ranks": 16384, "eta": 0.90, "what": "> 90 % effective training time (arXiv 2407.21783)"},
    ]
    print("\nanchors (published) beside the model at the same scale (meta failure rate):")
    print("| system | GPUs | published | model: flashrec tier-1 downtime | model: flashrec eta | model: ckpt eta | "
          "eta implied by the published downtime |")
    print("|---|---|---|---|---|---|---|")
    q = copy.copy(p)
    q.failures = "meta"
    for a in anchors:
        r = costs(a["ranks"], m, q)
        implied = ""
        if "downtime_s" in a:
            mt = r["mttf_h"] * 3600
            implied = f"{mt / (mt + a['downtime_s'] + p.step_s * (0.5 + p.sync_fraction)):.4f}"
            a["eta"] = None
        print(f"| {a['name']} | {a['ranks']:,} | {a['what']} | {r['flashrec']['downtime_tier1_s']:.1f} s | "
              f"{r['flashrec']['eta']:.4f} | {r['ckpt']['eta']:.4f} | {implied} |")

    for n_extra in (100000,):
        if n_extra != p.tornado_n:
            b2, sw2 = sensitivity(n_extra, m, p)
            print(f"\nsensitivity at {n_extra:,} GPUs (base {b2:.4f}): " + "; ".join(
                f"{s[0]} {s[1]}: {s[2]:.4f} / {s[3]}: {s[4]:.4f}" for s in sw2))
    tornado = sensitivity(p.tornado_n, m, p)
    print(f"\nsensitivity of flashrec's eta at {p.tornado_n:,} GPUs ({p.failures} failure rate; base "
          f"{tornado[0]:.4f}), one assumption at a time, largest swing first:")
    print("| assumption | value | eta | value | eta |")
    print("|---|---|---|---|---|")
    for s in tornado[1]:
        print(f"| {s[0]} | {s[1]} | {s[2]:.4f} | {s[3]} | {s[4]:.4f} |")

    if p.json:
        with open(p.json, "w") as fj:
            json.dump({"assumptions": {k: v for k, v in vars(p).items() if k not in ("json", "png")},
                       "constants": {"latency_us": latency_us, "p2p_gbps": p2p, "restore_gbps_here": restore_gbps_here,
                                     "pipeline_efficiency": eff, "cluster_gbps": m["cluster_gbps"]},
                       "machine": machine, "results": results, "anchors": anchors,
                       "sensitivity": {"ranks": p.tornado_n, "base": tornado[0], "swings": tornado[1]}},
                      fj, indent=1, default=str)
    if have_plot:
        render(p.png, machine, grid, tornado, p, anchors, beyond)
        print(f"plot: {p.png}")


if __name__ == "__main__":
    main()
