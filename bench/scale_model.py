#!/usr/bin/env python3
"""Scale model: flashrec in-job recovery vs checkpoint-restart at 1K-100K ranks.

  scale_model.py --recovery-json FILE [--spare hot|spawned] [--protection-json FILE]
                 [--baseline-json FILE] [--ranks 1000 ...] [--json OUT] [--png OUT] [...]

Takes the per-phase recovery costs measured by bench/recovery_latency.py (--json, or the
combined results.json of bench/run.py) at several rank counts (4/8/16), fits how each phase
grows with the rank count n, adds a failure process and the papers' cost models, and predicts
per failure: recovery time, replay, expected disruption E[C], and the training efficiency
eta = MTTF / (MTTF + E[C]) (DeadPool §IV), analytically and by Monte Carlo simulation of a
whole training run. Every assumption is a flag with its default printed; docs/scale-model.md
explains them and where each default comes from.

Pure Python for the model (no numpy); the PNG needs matplotlib (python3-matplotlib).
"""
import argparse
import json
import math
import os
import random
import statistics
import sys

SYSTEM_PYTHON = "/usr/bin/python3"
# Phases of the recovery record that make up "crash -> back in the step loop" (first_step is
# the step after it, counted as replay here; detect is replaced by --detect-s, see the doc).
PHASES = ["revoke", "shrink", "agree", "exchange", "spawn", "merge", "rebuild", "restore", "resumed"]


# --- fitting ------------------------------------------------------------------------------------

def fit_power(points):
    """t(n) = a * n^b by least squares on (log n, log t); b clipped to [0, 1]."""
    pts = [(math.log(n), math.log(max(t, 1e-6))) for n, t in points]
    if len(pts) == 1:
        return {"form": "power", "a": math.exp(pts[0][1]), "b": 0.0}
    mx = statistics.mean(x for x, _ in pts)
    my = statistics.mean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
    b = min(1.0, max(0.0, b))
    a = math.exp(statistics.mean(y - b * x for x, y in pts))
    return {"form": "power", "a": a, "b": b}


def fit_log(points):
    """t(n) = a + b * log2(n) by least squares; b >= 0, t >= 0."""
    pts = [(math.log2(n), t) for n, t in points]
    if len(pts) == 1:
        return {"form": "log", "a": pts[0][1], "b": 0.0}
    mx = statistics.mean(x for x, _ in pts)
    my = statistics.mean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = max(0.0, sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0)
    return {"form": "log", "a": my - b * mx, "b": b}


def evaluate(fit, n):
    if fit["form"] == "power":
        return fit["a"] * n ** fit["b"]
    return max(0.0, fit["a"] + fit["b"] * math.log2(n))


def describe(fit, unit="ms"):
    if fit["form"] == "power":
        return f"{fit['a']:.3g} {unit} * n^{fit['b']:.2f}"
    return f"{fit['a']:.3g} + {fit['b']:.3g} * log2(n) {unit}"


# --- inputs -------------------------------------------------------------------------------------

def load_json(path, key):
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict) and key in data:  # bench/run.py's results.json
        data = data[key]
    if isinstance(data, dict) and "rows" in data:
        data = data["rows"]
    return data


def measured_phases(rows, spare):
    """{phase: [(ranks, median ms)]} for one spare kind, plus the measured detect for reference."""
    out, detect = {}, []
    for r in rows:
        if r.get("spare") != spare or not r.get("phases"):
            continue
        n = r["ranks"]
        for p in PHASES:
            v = r["phases"].get(p)
            if v is not None:
                out.setdefault(p, []).append((n, v["median"]))
        if "detect" in r["phases"]:
            detect.append((n, r["phases"]["detect"]["median"]))
    return out, detect


# --- the cost models ----------------------------------------------------------------------------

def young_interval(delta, mttf):
    """Young's optimal checkpoint period sqrt(2 * delta * M) = FlashRecovery Eq. 3
    (t* = sqrt(2 d k0 / m) with d/m = M)."""
    return math.sqrt(2 * delta * mttf)


def restart_time(n, p):
    """Checkpoint-restart relaunch (teardown, new job, communicators, checkpoint load), seconds."""
    return p.restart_s * (n / p.restart_ref_n) ** p.restart_exp


def flashrec_recovery_s(n, fits, p):
    return sum(evaluate(f, n) for f in fits.values()) / 1e3 * p.recovery_factor + p.extra_recovery_s


def analytic(n, fits, p, every=None):
    mttf = p.mtbf_h * 3600 / n
    ts = p.step_s
    # flashrec: overhead = the protection's slowdown over one MTTF; replay = the partial step plus
    # one completed step when the failure comes before the sync point (see the doc).
    rec = flashrec_recovery_s(n, fits, p)
    fr_replay = ts * p.fr_replay_steps
    fr_over = mttf * p.overhead
    fr_c = fr_over + p.detect_s + rec + fr_replay
    # checkpoint-restart with periodic checkpoints of stall k0 every K steps.
    if every is None:
        tau = young_interval(p.ckpt_stall_s, mttf)
        every = max(1, round(tau / ts))
    ck_over = (mttf / (every * ts + p.ckpt_stall_s)) * p.ckpt_stall_s
    ck_replay = ts * ((every - 1) / 2 + 0.5)
    ck_restart = restart_time(n, p)
    ck_c = ck_over + p.ckpt_detect_s + ck_restart + ck_replay
    return {
        "ranks": n, "mttf_s": mttf,
        "flashrec": {"overhead_s": fr_over, "detect_s": p.detect_s, "recovery_s": rec, "replay_s": fr_replay,
                     "E_C_s": fr_c, "eta": mttf / (mttf + fr_c)},
        "ckpt": {"every_steps": every, "overhead_s": ck_over, "detect_s": p.ckpt_detect_s, "restart_s": ck_restart,
                 "replay_s": ck_replay, "E_C_s": ck_c, "eta": mttf / (mttf + ck_c)},
    }


# --- Monte Carlo -------------------------------------------------------------------------------

def simulate(n, fits, p, every, policy, seed):
    """Wall time of a run of p.sim_steps steps under exponential failures (rate n / MTBF), a
    failure during a recovery starting that recovery over. Returns useful / wall."""
    rng = random.Random(seed)
    mttf = p.mtbf_h * 3600 / n
    ts = p.step_s
    total = p.sim_steps
    now = 0.0

    def recover(duration):
        nonlocal now
        while True:
            tf = rng.expovariate(1 / mttf)
            if tf >= duration:
                now += duration
                return
            now += tf  # failed again while recovering: start over

    if policy == "flashrec":
        teff = ts * (1 + p.overhead)
        done = 0.0
        dur = p.detect_s + flashrec_recovery_s(n, fits, p)
        while True:
            tf = rng.expovariate(1 / mttf)
            need = (total - done) * teff
            if tf >= need:
                now += need
                break
            now += tf
            done += tf / teff
            whole = math.floor(done)
            phi = done - whole
            # before the sync point of the current step, the newest snapshot is one step older
            done = max(0.0, whole - (1 if phi < p.sync_fraction else 0))
            recover(dur)
        return total * ts / now, now
    # checkpoint-restart
    ckpt = 0  # steps safely checkpointed
    dur = p.ckpt_detect_s + restart_time(n, p)
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
    return total * ts / now, now


# --- output ---------------------------------------------------------------------------------------

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


def render(png, results, fits, raw_fits, norm, measured, p, spare):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    ns = [r["ranks"] for r in results]
    ax = axes[0]
    ax.plot(ns, [r["flashrec"]["eta"] for r in results], "o-", color="#1f77b4", label="flashrec (analytic)")
    ax.plot(ns, [r["ckpt"]["eta"] for r in results], "s-", color="#d62728", label="checkpoint-restart, Young K* (analytic)")
    if results and "ckpt_k100" in results[0]:
        ax.plot(ns, [r["ckpt_k100"]["eta"] for r in results], "s--", color="#ff9896",
                label=f"checkpoint-restart, K={p.fixed_every} (analytic)")
    if results and "sim" in results[0]:
        ax.plot(ns, [r["sim"]["flashrec_eta"] for r in results], "x", ms=10, color="#1f77b4", label="flashrec (simulated)")
        ax.plot(ns, [r["sim"]["ckpt_eta"] for r in results], "x", ms=10, color="#d62728", label="checkpoint-restart (simulated)")
    if results and "flashrec_raw" in results[0]:
        ax.plot(ns, [r["flashrec_raw"]["eta"] for r in results], ":", color="#1f77b4",
                label="flashrec, phases fitted on raw (oversubscribed) times")
    ax.set_xscale("log")
    ax.set_xlabel("ranks (GPUs)")
    ax.set_ylabel("training efficiency  eta = MTTF / (MTTF + E[C])")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(f"efficiency vs scale (MTBF {p.mtbf_h:.0f} h per rank, step {p.step_s:g} s)", fontsize=9)

    ax = axes[1]
    pick = [r for r in results if r["ranks"] in (1000, 10000, 100000)] or results[-3:]
    labels, parts = [], {"overhead": [], "detect": [], "recovery / restart": [], "replay": []}
    for r in pick:
        for key, name in (("flashrec", "flashrec"), ("ckpt", "ckpt-restart")):
            c = r[key]
            labels.append(f"{name}\n{r['ranks']:,}")
            parts["overhead"].append(c["overhead_s"] / 60)
            parts["detect"].append(c["detect_s"] / 60)
            parts["recovery / restart"].append(c.get("recovery_s", c.get("restart_s", 0)) / 60)
            parts["replay"].append(c["replay_s"] / 60)
    bottom = [0.0] * len(labels)
    colours = {"overhead": "#9467bd", "detect": "#d62728", "recovery / restart": "#ff7f0e", "replay": "#2ca02c"}
    for name, vals in parts.items():
        ax.bar(range(len(labels)), vals, bottom=bottom, color=colours[name], label=name)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, b in enumerate(bottom):
        ax.text(i, b, f"{b:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("expected disruption per failure E[C] (minutes)")
    ax.legend(fontsize=7)
    ax.set_title("per-failure cost breakdown (DeadPool §IV terms)", fontsize=9)

    ax = axes[2]
    grid = [4 * 2 ** (i / 4) for i in range(0, 4 * 15)]
    grid = [g for g in grid if g <= 1.2e5]
    for i, (phase, f) in enumerate(sorted(fits.items(), key=lambda kv: -evaluate(kv[1], 1e4))):
        c = plt.cm.tab10(i % 10)
        ax.plot(grid, [evaluate(f, n) for n in grid], "-", color=c, lw=1.2, label=f"{phase}: {describe(f)}")
        ax.plot(grid, [evaluate(raw_fits[phase], n) for n in grid], ":", color=c, lw=0.9)
        pts = measured.get(phase, [])
        ax.plot([n for n, _ in pts], [max(v, 1e-4) for _, v in pts], "o", mfc="none", color=c, ms=4)
        pts = norm.get(phase, [])
        ax.plot([n for n, _ in pts], [max(v, 1e-4) for _, v in pts], "o", color=c, ms=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("ranks")
    ax.set_ylabel("phase time (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=6, loc="upper left")
    ax.set_title(f"{spare}-spare phases: open = measured, filled = core-scaled;\n"
                 "power fits: solid = core-scaled (used), dotted = raw", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recovery-json", required=True, help="bench/recovery_latency.py --json output, or run.py's results.json")
    ap.add_argument("--spare", choices=["hot", "spawned"], default="hot")
    ap.add_argument("--protection-json", help="bench/protection_overhead.py --json output (sets --overhead)")
    ap.add_argument("--baseline-json", help="bench/checkpoint_restart_baseline.py --json output (printed for reference)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1000, 2000, 5000, 10000, 20000, 50000, 100000])
    # failure process
    ap.add_argument("--mtbf-h", type=float, default=30000.0,
                    help="MTBF of one rank (GPU) in hours; default: one interruption per 18 min at 100K GPUs "
                         "(FT-HSDP via DeadPool §IV/§V-C) = 100000 * 0.3 h")
    # workload
    ap.add_argument("--step-s", type=float, default=20.0, help="step time, constant under weak scaling (DeadPool §IV: ~20 s)")
    ap.add_argument("--detect-s", type=float, default=10.0,
                    help="failure detection for flashrec (active heartbeat detection, FlashRecovery: ~10 s)")
    ap.add_argument("--ckpt-detect-s", type=float, default=None, help="detection for checkpoint-restart (default = --detect-s)")
    ap.add_argument("--fr-replay-steps", type=float, default=None,
                    help="expected steps recomputed per failure by flashrec (default: 0.5 + sync-fraction)")
    ap.add_argument("--sync-fraction", type=float, default=0.9,
                    help="fraction of a step before its sync point, when a failure costs one completed step more")
    ap.add_argument("--overhead", type=float, default=0.0,
                    help="per-step slowdown from protection, as a fraction (default 0: DeadPool Fig. 6 measures none "
                         "on GPU nodes, FFTrainer < 3%%)")
    ap.add_argument("--use-measured-overhead", action="store_true",
                    help="take --overhead from --protection-json (on/off step ratio - 1 at its largest state) instead")
    ap.add_argument("--recovery-factor", type=float, default=1.0, help="multiply the fitted recovery phases")
    ap.add_argument("--extra-recovery-s", type=float, default=0.0,
                    help="added to every flashrec recovery, e.g. GPU communicator (NCCL) rebuild, which the MPI-only "
                         "measurement does not contain (DeadPool Fig. 11: 17-30 s, mostly NCCL rebuild)")
    ap.add_argument("--cores", type=int, default=None,
                    help="cores of the machine the phases were measured on (default: this machine's); the measured "
                         "times at n > cores ranks are scaled by cores/n before fitting (every rank on its own core, as "
                         "at scale); 0 = fit the raw times")
    # checkpoint-restart
    ap.add_argument("--ckpt-stall-s", type=float, default=30.0,
                    help="training stall per persistent checkpoint k0 (FlashRecovery review Table 4: 30 s)")
    ap.add_argument("--restart-s", type=float, default=48.4,
                    help="restart time at --restart-ref-n ranks (FlashRecovery review Table 3 baseline: "
                         "cleanup 0.14 + create 18 + comm 9.27 + load 21 s at 64 devices)")
    ap.add_argument("--restart-ref-n", type=float, default=64)
    ap.add_argument("--restart-exp", type=float, default=0.365,
                    help="restart time grows as n^exp; 0.365 puts Table 4's 245.2 s at 5,472 devices on the curve")
    ap.add_argument("--fixed-every", type=int, default=100, help="also model this fixed checkpoint interval (FT-HSDP: 100 steps)")
    # simulation
    ap.add_argument("--sim-steps", type=int, default=100000, help="steps of the simulated run (DeadPool §VII-C: 100K)")
    ap.add_argument("--sim-seeds", type=int, default=5)
    ap.add_argument("--json")
    ap.add_argument("--png")
    p = ap.parse_args()
    if p.ckpt_detect_s is None:
        p.ckpt_detect_s = p.detect_s
    if p.fr_replay_steps is None:
        p.fr_replay_steps = 0.5 + p.sync_fraction
    have_plot = bool(p.png) and need_matplotlib()  # may re-run this under /usr/bin/python3: before any output

    rows = load_json(p.recovery_json, "recovery_latency")
    measured, detect = measured_phases(rows, p.spare)
    if not measured:
        sys.exit(f"scale_model: {p.recovery_json} has no '{p.spare}' rows with phases")
    rank_counts = sorted({n for pts in measured.values() for n, _ in pts})
    if p.cores is None:
        p.cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 0)
    # Ranks beyond the cores share them: CPU-bound phases then grow with n/cores on the test
    # machine only. The primary fit removes that (every rank on its own core, as at scale).
    norm = {ph: [(n, v * min(1.0, p.cores / n) if p.cores else v) for n, v in pts] for ph, pts in measured.items()}
    fits = {ph: fit_power(pts) for ph, pts in norm.items()}
    raw_fits = {ph: fit_power(pts) for ph, pts in measured.items()}
    alt_fits = {ph: fit_log(pts) for ph, pts in norm.items()}

    overhead_note = "given" if p.overhead else "assumed"
    if p.protection_json:
        prot = load_json(p.protection_json, "protection_overhead")
        if prot:
            worst = max(prot, key=lambda r: (r["sharded_state_mib"], r["ranks"]))
            measured_note = (f"measured here: step on/off = {worst['ratio']:.3f} at {worst['ranks']} ranks, "
                             f"{worst['sharded_state_mib']} MiB/rank")
            if p.use_measured_overhead:
                p.overhead, overhead_note = max(0.0, worst["ratio"] - 1), measured_note
            else:
                overhead_note += "; " + measured_note + ", not applied (--use-measured-overhead)"

    print(f"scale model: flashrec ({p.spare} spare) vs checkpoint-restart; phases measured at ranks {rank_counts}")
    print("assumptions (flags; see docs/scale-model.md):")
    print(f"  failures: exponential, MTBF {p.mtbf_h:g} h per rank -> MTTF_sys = MTBF / n "
          f"({p.mtbf_h * 60 / 1e5:.1f} min at 100K ranks)")
    print(f"  step time {p.step_s:g} s at every scale (weak scaling); detection {p.detect_s:g} s (flashrec), "
          f"{p.ckpt_detect_s:g} s (checkpoint-restart)")
    print(f"  flashrec: recovery = sum of fitted phases x {p.recovery_factor:g} + {p.extra_recovery_s:g} s; "
          f"phases measured on {p.cores or 'n/a'} cores, "
          f"{'scaled by cores/n where n > cores' if p.cores else 'raw'} before the fit; replay {p.fr_replay_steps:g} steps; "
          f"protection overhead {p.overhead:.3%} ({overhead_note})")
    print(f"  checkpoint-restart: stall k0 {p.ckpt_stall_s:g} s per checkpoint, interval K* = Young "
          f"sqrt(2 k0 MTTF) / step (= FlashRecovery Eq. 3), also K = {p.fixed_every}; replay (K-1)/2 + 0.5 steps; "
          f"restart {p.restart_s:g} s x (n / {p.restart_ref_n:g})^{p.restart_exp:g}")
    print("phase fits (ms; n = ranks): power a*n^b on the core-scaled times [log2 alternative] {power on raw times}:")
    for ph in PHASES:
        if ph in fits:
            pts = ", ".join(f"{n}: {v:.2f}" for n, v in measured[ph])
            print(f"  {ph:9s} {describe(fits[ph]):24s} [{describe(alt_fits[ph]):26s}] {{{describe(raw_fits[ph])}}}  "
                  f"measured {pts}")
    if detect:
        print("  (measured detect, a killed process on a live node, not used: "
              + ", ".join(f"{n}: {v:.2f} ms" for n, v in detect) + ")")
    if p.baseline_json:
        base = load_json(p.baseline_json, "checkpoint_restart_baseline")
        for r in base if isinstance(base, list) else []:
            if r.get("total_s"):
                print(f"  (measured here, {r['ranks']} ranks, {r['method']}: time to resume progress {r['total_s']:.2f} s, "
                      f"phases " + ", ".join(f"{k} {v:.2f} s" for k, v in r["phases_s"].items()) + ")")

    results = []
    for n in p.ranks:
        r = analytic(n, fits, p)
        r["ckpt_k100"] = analytic(n, fits, p, every=p.fixed_every)["ckpt"]
        r["flashrec_alt"] = analytic(n, alt_fits, p)["flashrec"]
        r["flashrec_raw"] = analytic(n, raw_fits, p)["flashrec"]
        if p.sim_seeds > 0:
            fe = [simulate(n, fits, p, None, "flashrec", s)[0] for s in range(p.sim_seeds)]
            ce = [simulate(n, fits, p, r["ckpt"]["every_steps"], "ckpt", 1000 + s)[0] for s in range(p.sim_seeds)]
            r["sim"] = {"flashrec_eta": statistics.mean(fe), "ckpt_eta": statistics.mean(ce),
                        "runs": p.sim_seeds, "steps": p.sim_steps,
                        "failures_expected": p.sim_steps * p.step_s / r["mttf_s"]}
        results.append(r)

    print()
    print("| ranks | MTTF_sys | flashrec repair [raw fit] | flashrec E[C] | flashrec eta (sim) [raw fit] | ckpt K* | "
          "ckpt restart | ckpt E[C] | ckpt eta (sim) | ckpt eta, K=%d |" % p.fixed_every)
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        f, c, fr = r["flashrec"], r["ckpt"], r["flashrec_raw"]
        sim = r.get("sim", {})
        print(f"| {r['ranks']:,} | {r['mttf_s'] / 3600:.2f} h | {f['recovery_s']:.2f} s [{fr['recovery_s']:.0f} s] | "
              f"{f['E_C_s']:.1f} s | {f['eta']:.4f} ({sim.get('flashrec_eta', float('nan')):.4f}) [{fr['eta']:.4f}] | "
              f"{c['every_steps']} | {c['restart_s']:.0f} s | {c['E_C_s']:.0f} s | "
              f"{c['eta']:.4f} ({sim.get('ckpt_eta', float('nan')):.4f}) | {r['ckpt_k100']['eta']:.4f} |")
    ten = next((r for r in results if r["ranks"] == 10000), None)
    if ten:
        f, c = ten["flashrec"], ten["ckpt"]
        print(f"\nat 10,000 ranks (primary fits): MTTF {ten['mttf_s'] / 60:.0f} min; flashrec recovers in {f['detect_s'] + f['recovery_s']:.1f} s "
              f"(detect {f['detect_s']:g} s + repair {f['recovery_s']:.2f} s) and replays {f['replay_s']:.0f} s: eta {f['eta']:.3f}; "
              f"checkpoint-restart (K* = {c['every_steps']} steps) restarts in {c['restart_s']:.0f} s and replays "
              f"{c['replay_s']:.0f} s, plus {c['overhead_s']:.0f} s of checkpoint stalls per failure: eta {c['eta']:.3f}")
    if p.json:
        with open(p.json, "w") as fjson:
            json.dump({"assumptions": {k: v for k, v in vars(p).items() if k not in ("json", "png")},
                       "measured": measured, "core_scaled": norm, "fits": fits, "log2_fits": alt_fits,
                       "raw_fits": raw_fits, "results": results}, fjson, indent=1)
    if have_plot:
        render(p.png, results, fits, raw_fits, norm, measured, p, p.spare)
        print(f"plot: {p.png}")


if __name__ == "__main__":
    main()
