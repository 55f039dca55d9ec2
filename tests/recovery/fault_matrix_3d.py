#!/usr/bin/env python3
"""Fault-injection runs of the GPT example (examples/gpt) at dp 2 x tp 2 (x pp 2), judged
against a failure-free run of the same job, as fault_matrix.py does for the MLP.

  fault_matrix_3d.py --trainer EXE --config-dir DIR matrix [--shape 3d 2d] [--spares hot spawned]
                     [--phases ...] [--victims dp tp pp far]
  fault_matrix_3d.py --trainer EXE --config-dir DIR ci
  fault_matrix_3d.py --trainer EXE --config-dir DIR scenarios
  fault_matrix_3d.py --trainer EXE --config-dir DIR soak --trials N [--seed S]
  fault_matrix_3d.py --trainer EXE --config-dir DIR every

A victim is named by how it relates to role 0 (dp0.tp0.pp0, which prints the checksum): its DP
peer (dp1.tp0.pp0), its TP peer (dp0.tp1.pp0), its pipeline peer (dp0.tp0.pp1), or a role that
shares no group with it (dp1.tp1.pp1). Phases include the TP and PP exchanges (tp_exchange,
pp_exchange). Every run must end with the failure-free run's final_checksum, emit the expected
recovery records and replay at most one step. Prints one line per run, a table, and
"N passed, M failed".
"""
import argparse
import os
import random
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_matrix import Runner, judge_interval  # noqa: E402

PHASES = ["forward", "tp_exchange", "pp_exchange", "allreduce", "sync", "optimizer", "replication"]
VICTIMS = {"dp": "1,0,0", "tp": "0,1,0", "pp": "0,0,1", "far": "1,1,1"}
STEP = 8


def job(shape, spares):
    """(active ranks, config, extra processes) of a shape and spare kind."""
    ranks = 8 if shape == "3d" else 4
    config = f"gpt-{shape}{'-hot' if spares == 'hot' else ''}.yaml"
    return ranks, config, (2 if spares == "hot" else 0)


def victim_role(shape, victim):
    dp, tp, pp = VICTIMS[victim].split(",")
    if shape == "2d":
        pp = "0"  # no pipeline: the pp peer and the far role lose their pp coordinate
    return f"{dp},{tp},{pp}"


def kill(r, shape, spares, phase, victim, step=STEP):
    ranks, config, extra = job(shape, spares)
    if shape == "2d" and phase == "pp_exchange":
        return
    if shape == "2d" and victim == "pp":
        return
    name = f"{shape} {spares:>7} {phase:<11} died: {victim:>3} ({victim_role(shape, victim)})"
    r.check(name, ranks, config, [f"role={victim_role(shape, victim)}:step={step}:phase={phase}:action=kill"], 1, extra)
    r.table.append((shape, spares, phase, victim, r.results[-1][1]))


def matrix(r, shapes, spares_kinds, phases, victims):
    for shape in shapes:
        for spares in spares_kinds:
            for phase in phases:
                for victim in victims:
                    kill(r, shape, spares, phase, victim)


def scenarios(r):
    ranks, hot, extra = job("3d", "hot")
    # Two roles of different (tp, pp) groups die in the same exchange: two hot spares at once.
    r.check("3d hot: two die at once in tp_exchange, groups (tp0,pp0) and (tp1,pp1)", ranks, hot,
            ["role=1,0,0:step=6:phase=tp_exchange:action=kill", "role=0,1,1:step=6:phase=tp_exchange:action=kill"],
            1, extra)
    r.check("3d hot: two die at once in pp_exchange, groups (tp1,pp0) and (tp0,pp1)", ranks, hot,
            ["role=0,1,0:step=6:phase=pp_exchange:action=kill", "role=1,0,1:step=6:phase=pp_exchange:action=kill"],
            1, extra)
    r.check("3d hot: failures in different steps and groups (tp, pp, then dp)", ranks, hot,
            ["role=0,1,0:step=5:phase=tp_exchange:action=kill", "role=1,0,1:step=12:phase=allreduce:action=kill"],
            2, extra)
    _, spawned, _ = job("3d", "spawned")
    r.check("3d spawned: two die at once in pp_exchange, groups (tp0,pp1) and (tp1,pp0)", ranks, spawned,
            ["role=1,0,1:step=7:phase=pp_exchange:action=kill", "role=0,1,0:step=7:phase=pp_exchange:action=kill"],
            1, 0)
    r.check("3d hot: exit(3) of a pipeline peer in its activation receive", ranks, hot,
            ["role=0,0,1:step=9:phase=pp_exchange:action=exit=3"], 1, extra)
    # Cyclic placement spreads each TP pair over two nodes: the same recoveries, the same bits.
    r.check("3d hot, placement cyclic: TP peer in tp_exchange", ranks, "gpt-3d-hot-cyclic.yaml",
            ["role=0,1,0:step=8:phase=tp_exchange:action=kill"], 1, extra)
    r.check("3d hot, placement cyclic: two die at once in pp_exchange", ranks, "gpt-3d-hot-cyclic.yaml",
            ["role=1,1,0:step=8:phase=pp_exchange:action=kill", "role=0,0,1:step=8:phase=pp_exchange:action=kill"],
            1, extra)
    if r.baselines[(ranks, "gpt-3d-hot-cyclic.yaml")] != r.baselines[(ranks, hot)]:
        r.results.append(("block and cyclic placement end with the same checksum", False, {}))
        print("FAIL block and cyclic placement end with different checksums", flush=True)


def ci(r):
    """A CI-sized subset: every phase once (victims rotate over the dimensions), both spare
    kinds in the TP and PP exchanges, and two failures in different (tp, pp) groups."""
    victims = list(VICTIMS)
    for i, phase in enumerate(PHASES):
        kill(r, "3d", "hot", phase, victims[i % len(victims)])
    kill(r, "3d", "spawned", "tp_exchange", "tp")
    kill(r, "3d", "spawned", "pp_exchange", "pp")
    kill(r, "2d", "hot", "tp_exchange", "tp")
    ranks, hot, extra = job("3d", "hot")
    r.check("3d hot: two die at once in tp_exchange, groups (tp0,pp0) and (tp1,pp1)", ranks, hot,
            ["role=1,0,0:step=6:phase=tp_exchange:action=kill", "role=0,1,1:step=6:phase=tp_exchange:action=kill"],
            1, extra)


def every(r):
    """protection.every = 4 on the 3-D job: kills in the TP exchange at each offset of an interval
    (steps 8..11: version 8 is snapshotted, 9..11 are replayed from it), hot and spawned, and one
    in the PP exchange mid-interval. Each run, and the failure-free run at k = 4, must end with
    the k = 1 job's checksum (the same job but its name and interval); the repair restores the
    interval's version and replays the steps since (judge_interval). The start-up replay probe
    runs too (protection.replay_check defaults to start where every > 1)."""
    ranks, k1_hot, extra = job("3d", "hot")
    want = r.baseline(ranks, k1_hot, extra)
    configs = {"hot": ("gpt-3d-hot-every4.yaml", extra), "spawned": ("gpt-3d-every4.yaml", 0)}
    for kind, (config, more) in configs.items():
        free = r.baseline(ranks, config, more)
        if free != want:
            print(f"FAIL failure-free {config} {free} != {k1_hot} {want}", flush=True)
            r.results.append((f"failure-free k = 4 = k = 1 ({kind})", False, {}))
    victim = victim_role("3d", "tp")
    for kind, (config, more) in configs.items():
        for step in (range(8, 12) if kind == "hot" else (9, 10)):
            r.check(f"3d {kind} every 4: TP peer in tp_exchange, step {step} (offset {step % 4})", ranks, config,
                    [f"role={victim}:step={step}:phase=tp_exchange:action=kill"], 1, more, every=4,
                    judge=judge_interval(4, step))
    r.check("3d hot every 4: pipeline peer in pp_exchange, step 14 (offset 2)", ranks, configs["hot"][0],
            [f"role={victim_role('3d', 'pp')}:step=14:phase=pp_exchange:action=kill"], 1, extra, every=4,
            judge=judge_interval(4, 14))
    print(f"failure-free checksum at k = 1: {want}; at k = 4: " +
          ", ".join(f"{kind} {r.baselines[(ranks, c)]}" for kind, (c, _) in configs.items()))


def soak(r, trials, seed):
    rng = random.Random(seed)
    for t in range(trials):
        shape = rng.choice(["3d", "3d", "2d"])
        spares = rng.choice(["hot", "spawned"])
        ranks, config, extra = job(shape, spares)
        dp, tp, pp = rng.randrange(2), rng.randrange(2), rng.randrange(2) if shape == "3d" else 0
        phases = [p for p in PHASES if shape == "3d" or p != "pp_exchange"]
        phase = rng.choice(phases)
        step = rng.randrange(2, 18)
        r.check(f"soak {t}: {shape} {spares} role={dp},{tp},{pp} step={step} {phase}", ranks, config,
                [f"role={dp},{tp},{pp}:step={step}:phase={phase}:action=kill"], 1, extra)


def print_table(r):
    if not r.table:
        return
    print("\nshape  spares   phase        died  result")
    for shape, spares, phase, victim, ok in r.table:
        print(f"{shape:<6} {spares:<8} {phase:<12} {victim:<5} {'identical' if ok else 'FAIL'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--config-dir", required=True)
    ap.add_argument("--timeout", type=float, default=120)
    sub = ap.add_subparsers(dest="what", required=True)
    m = sub.add_parser("matrix")
    m.add_argument("--shape", nargs="+", default=["3d"], choices=["3d", "2d"])
    m.add_argument("--spares", nargs="+", default=["hot", "spawned"], choices=["hot", "spawned"])
    m.add_argument("--phases", nargs="+", default=PHASES, choices=PHASES)
    m.add_argument("--victims", nargs="+", default=list(VICTIMS), choices=list(VICTIMS))
    sub.add_parser("ci")
    sub.add_parser("scenarios")
    sub.add_parser("every")
    so = sub.add_parser("soak")
    so.add_argument("--trials", type=int, default=10)
    so.add_argument("--seed", type=int, default=int(os.environ.get("FLASHREC_SOAK_SEED", "1")))
    a = ap.parse_args()
    r = Runner(a.trainer, a.config_dir, a.timeout)
    r.table = []
    if a.what == "matrix":
        matrix(r, a.shape, a.spares, a.phases, a.victims)
    elif a.what == "ci":
        ci(r)
    elif a.what == "scenarios":
        scenarios(r)
    elif a.what == "every":
        every(r)
    else:
        print(f"soak: {a.trials} trials, seed {a.seed}")
        soak(r, a.trials, a.seed)
    print_table(r)
    return r.summary()


if __name__ == "__main__":
    sys.exit(main())
