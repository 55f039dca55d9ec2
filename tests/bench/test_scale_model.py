#!/usr/bin/env python3
"""Unit test of bench/scale_model.py's pure parts: the machine model recovers known constants and
predicts a held-out rank count exactly when the data follow it; the cluster projection has the
properties docs/scale-model.md states (n-independent byte phases, eta falling with n, flashrec's
tier mix between its cheapest and dearest tier); and the whole script runs end to end on a
synthetic scale_phases.py file. Prints PASS or FAIL lines; exit code 1 on any FAIL."""
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
import scale_model as sm  # noqa: E402

failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail else ""))
    failures += 0 if ok else 1


CORES = 2
TRUTH = {"shrink": (0.5, 0.2), "agree": (0.05, 0.02), "exchange": (0.3, 0.06), "rebuild": (1.0, 0.4),
         "restore": (6.0, 2.5), "resumed": (10.0, 3.0)}


def synthetic(n, ph):
    """The model as docs/scale-model.md states it, written out independently of scale_model.py."""
    a, b = TRUTH[ph]
    h = 1.0 if ph in ("restore", "resumed") else math.log2(n)
    return a + b * h * max(1.0, n / CORES)


# 1. the fit recovers a and b, and the held-out point
for ph in TRUTH:
    pts = [(n, synthetic(n, ph)) for n in (4, 8, 16)]
    f = sm.fit_machine(ph, pts, CORES)
    pred = sm.eval_machine(f, ph, 32, CORES)
    check(f"fit {ph} recovers a, b and predicts n=32",
          abs(f["a"] - TRUTH[ph][0]) < 1e-9 and abs(f["b"] - TRUTH[ph][1]) < 1e-9
          and abs(pred - synthetic(32, ph)) < 1e-9, f"a {f['a']:.4g} b {f['b']:.4g} pred {pred:.4g}")

# 2. negative slopes are clipped: a phase never gets cheaper with n
f = sm.fit_machine("agree", [(4, 3.0), (8, 2.0), (16, 1.0)], CORES)
check("falling data give b = 0", f["b"] == 0.0 and abs(f["a"] - 2.0) < 1e-12, str(f))


# 3. cluster projection properties


def params(**kw):
    import argparse
    p = argparse.Namespace(
        failures="meta", meta_mttf_h=[7.9, 1.8], meta_gpus=[1024, 16384], llama3_failures=419, llama3_days=54,
        llama3_gpus=16384, mttf_factor=1.0, tier_weights=(0.573, 0.279, 0.148), step_s=20.0, sync_fraction=0.9,
        state_gib=8.0, overhead=0.0, detect_s=10.0, cluster_latency_us=2.0, cluster_link_gbps=50.0,
        node_mem_gbps=20.0, resumed_factor=1.0, nccl="deadpool", nccl_points=((32, 17.1), (512, 29.8)),
        nccl_delta_s=16.26, nccl_global_s=150.0, tier2_factor=0.755, ckpt_stall_s=30.0, restart_s=48.4,
        restart_ref_n=64, restart_exp=0.365, spare="hot")
    for k, v in kw.items():
        setattr(p, k, v)
    return p


fits = {ph: sm.fit_machine(ph, [(n, synthetic(n, ph)) for n in (4, 8, 16)], CORES) for ph in TRUTH}
m = {"fits": fits, "latency_us": 5.0, "state_mib": 8, "pipeline_efficiency": 1.0, "cluster_gbps": 50.0}
p = params()
check("Meta MTTF passes through 7.9 h at 1,024 and 1.8 h at 16,384",
      abs(sm.mttf_h(1024, p) - 7.9) < 1e-9 and abs(sm.mttf_h(16384, p) - 1.8) < 1e-9)
check("Llama 3 MTTF: 54 days x 24 / 419 at 16,384", abs(sm.mttf_h(16384, params(failures="llama3")) - 54 * 24 / 419) < 1e-9)
t_small, t_big = sm.tier1_phases(1024, m, p), sm.tier1_phases(100000, m, p)
check("restore and resumed do not depend on n", t_small["restore"] == t_big["restore"]
      and t_small["resumed"] == t_big["resumed"])
check("log phases grow with log2 n", t_big["shrink"] > t_small["shrink"]
      and abs((t_big["shrink"] - fits["shrink"]["a"] / 1e3) / (t_small["shrink"] - fits["shrink"]["a"] / 1e3)
              - math.log2(100000) / math.log2(1024)) < 1e-9)
check("restore = state / cluster bandwidth (+ a)",
      abs(t_small["restore"] - (fits["restore"]["a"] / 1e3 + 8 * (1 << 30) / 50e9)) < 1e-12)
etas = [sm.costs(n, m, p)["flashrec"]["eta"] for n in (1024, 16384, 100000)]
check("eta falls with n", etas[0] > etas[1] > etas[2], str(etas))
c = sm.costs(16384, m, p)
f = c["flashrec"]
check("tier mix between tier 1 and tier 3", f["tier1_s"] <= f["E_C_s"] <= f["tier3_s"])
check("all-tier-1 flashrec beats checkpoint-restart", f["eta_tier1_only"] > c["ckpt"]["eta"])
check("no NCCL, no detection: tier-1 downtime is the MPI repair alone (< 5 s at 100K)",
      sm.costs(100000, m, params(nccl="none", detect_s=0.0))["flashrec"]["downtime_tier1_s"] < 5.0)

q = params(sim_steps=20000)
sim = sm.simulate(16384, m, q, "flashrec", 1)
check("simulated flashrec eta within 0.01 of the formula at 16K", abs(sim - f["eta"]) < 0.01,
      f"{sim:.4f} vs {f['eta']:.4f}")
sim_ck = sm.simulate(100000, m, params(sim_steps=20000), "ckpt", 2)
check("simulation: checkpoint-restart at 100K below the formula (failures hit its 709 s restarts)",
      sim_ck < sm.costs(100000, m, p)["ckpt"]["eta"], f"{sim_ck:.4f}")

# 4. end to end on a synthetic scale_phases.py file
rows = []
for series in ("cpu", "device"):
    for n in (4, 8, 16, 32):
        rows.append({"series": series, "ranks": n, "spare": "hot", "state_mib": 8, "trials": 1,
                     "phases": {ph: {"median": synthetic(n, ph), "min": synthetic(n, ph), "max": synthetic(n, ph)}
                                for ph in TRUTH}})
data = {"rows": rows, "machine": {"cores": CORES, "cpu": "synthetic"},
        "latency": [{"ranks": 2, "pingpong_us": 5.0, "barrier_us": 7, "agree_us": 11, "shrink_us": 44, "dup_us": 37}],
        "bandwidth": {"bytes": 1, "memcpy_GBps": 10.0, "mpi_p2p_GBps": 4.0}}
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "phases.json")
    out_json = os.path.join(tmp, "scale.json")
    with open(path, "w") as fh:
        json.dump(data, fh)
    r = subprocess.run([sys.executable, os.path.join(BENCH, "scale_model.py"), "--phases-json", path, "--json", out_json],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ok = r.returncode == 0 and os.path.exists(out_json)
    check("scale_model.py runs end to end", ok, r.stdout[-800:] if not ok else "")
    if ok:
        with open(out_json) as fh:
            res = json.load(fh)
        hc = res["machine"]["device"]["holdout_check"]
        check("end to end: held-out n=32 predicted exactly on model data",
              abs(hc["model_ms"] - hc["measured_ms"]) < 1e-6 * hc["measured_ms"], str(hc))

# 5. the second pass (bench/scale_fair.py, issue 31)
import scale_fair as sf  # noqa: E402

logpts = [(n, 0.7 * math.log2(n)) for n in (2, 4, 8) for _ in range(2)]
r = sf.shape_fits(logpts)
check("shape fits: log2 n data at n = 2, 4, 8: log held out exactly, verdict log",
      r["errors"]["log"] < 1e-12 and r["verdict"] == "log", str(r["errors"]))
r = sf.shape_fits([(2, 1.0), (2, 1.1), (4, 2.0), (4, 2.1)])
check("shape fits: from n = 2 and 4 alone log2 n and n predict alike (log2 4 / log2 2 = 4 / 2)",
      abs(r["errors"]["log"] - r["errors"]["lin"]) < 1e-12 and r["verdict"].startswith("grows"), str(r))
r = sf.shape_fits([(2, 1.0), (2, 1.5), (4, 1.1), (4, 1.4)])
check("shape fits: flat data within their noise: constant", r["verdict"] == "const", str(r))
r = sf.shape_fits([(2, 1.0), (2, 3.0), (4, 1.5), (4, 4.0)])
check("shape fits: a growth smaller than the run-to-run noise is undecided", r["verdict"] == "undecided", str(r))

base = sf.SCENARIOS["base"]
check("NCCL init passes through the published 265 s at 96K GPUs",
      abs(sf.nccl_init_s(96 * 1024, base) - 265.0) < 1e-9, f"{sf.nccl_init_s(96 * 1024, base):.3f}")
small = sf.CONST["nccl_small_s"]
check("NCCL init of a small group is the H100 constant (a warmed hot spare: 23-43 ms; cold 0.60 s)",
      small[1] <= sf.nccl_init_s(8, base) <= small[1] + 0.05 and sf.nccl_init_s(1, base) == 0.0
      and sf.nccl_init_s(8, sf.SCENARIOS["skeptic"]) >= small[2], f"{sf.nccl_init_s(8, base):.3f}")
pts, lat, _ = sf.load_points(sf.DEFAULT_DATA)
check("the CUDA example's repairs and the CPU example's are fitted apart",
      {p["system"] for p in pts} == {sf.CUDA_SYSTEM, sf.CPU_SYSTEM}
      and all(k[2] in (sf.CUDA_SYSTEM, sf.CPU_SYSTEM) for k in sf.fits_report(pts)[0]))
lf = sf.latency_fits(lat)
check("bench_latency on 2-16 ranks with a core each (16-core machine, two runs): agree, shrink and "
      "comm dup grow as log2 n, not n, by more than their run-to-run noise",
      all(lf[op]["verdict"] == "log" for op in ("agree_us", "shrink_us", "dup_us")),
      str({op: (lf[op]["errors"], lf[op]["noise"]) for op in lf}))
check("flashrec's DP group of 405B at 16,384 GPUs is 128 GPUs", sf.groups(16384, sf.MODELS["405B"])["dp"] == 128)
snap_b, repl_b, unique = sf.state_bytes(16384, sf.MODELS["405B"])
check("ZeRO-1 state per GPU: bf16 parameters / (TP PP) + 12 bytes per parameter / (TP PP DP)",
      abs(snap_b - (2 * 405e9 / 128 + 12 * 405e9 / 16384)) < 1 and abs(repl_b - 12 * 405e9 / 16384) < 1
      and unique == 14 * 405e9)
skep = sf.SCENARIOS["skeptic"]
k, over, exposed, t = sf.protection(1024, sf.MODELS["405B"], skep, 20.0, 0.01)
check("protection.every: the smallest k within budget",
      over <= 0.01 and (k == 1 or exposed / ((k - 1) * 20.0) > 0.01), f"k {k} over {over:.4f}")
check("protection hidden when it fits in a step (overlap, measured on the H100)",
      sf.protection(16384, sf.MODELS["405B"], base, 20.0, 0.01)[:2] == (1, 0.0))
check("spares: the share of failures finding no spare falls with more spares and is 1 with none",
      sf.expected_short(3.0, 0) == 1.0 and sf.expected_short(3.0, 2) > sf.expected_short(3.0, 5) > 0
      and sf.expected_short(3.0, 40) < 1e-9)
with tempfile.TemporaryDirectory() as tmp:
    out_json = os.path.join(tmp, "fair.json")
    r = subprocess.run([sys.executable, os.path.join(BENCH, "scale_fair.py"), "--markdown", "--json", out_json],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check("scale_fair.py runs on the data in docs/results", r.returncode == 0, r.stdout[-800:])
    with open(os.path.join(HERE, "..", "..", "docs", "scale-model.md")) as fh:
        doc = fh.read()
    lines = [ln for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("<!--")]
    missing = [ln for ln in lines if ln not in doc]
    check("docs/scale-model.md quotes every table of scale_fair.py --markdown as it reproduces "
          "(fits and held-out errors, per-phase table, NCCL, goodput, anchors)",
          r.returncode == 0 and lines and not missing, "\n".join(missing[:5]))
sys.exit(1 if failures else 0)
