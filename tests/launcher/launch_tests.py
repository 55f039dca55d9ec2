#!/usr/bin/env python3
"""End-to-end tests of flashrec-launch (run each under tools/fr-run, which adds the timeout and
fails the test if any process is left behind).

  launch_tests.py <scenario> --launcher L --mpirun M --trainer T --config C --np N [--workdir D]

Scenarios:
  hang              a SIGSTOPped rank is declared hung, killed and replaced; same checksum as
                    the failure-free run
  warm-relaunch     mpirun is SIGKILLed part-way; the launcher relaunches (tier 2) from the
                    node-local snapshots; same checksum, at most 1 step replayed
  hostile           garbage, oversize frames, a wrong token, protocol violations and idle
                    connections hit the control plane of a real launch; the job is unaffected;
                    the metrics endpoint answers
  spares-exhausted  a rank dies with no spare left and no checkpoint: exit 77, reported clearly
  mpirun-lingers    mpirun is SIGSTOPped while the job runs: once every rank said BYE the launcher
                    ends it within its grace period; the job counts as finished
  flood             a connection flood (idle, garbage, oversize, wrong token) for 8 s while the job
                    runs and a rank is killed: same checksum, no healthy rank lost
  state-lost-mpirun-lingers  the same under a FAKE mpirun that stays alive after its ranks: the
                    launcher ends it as soon as every process sent its last record or is gone
  state-on-live-nodes  dp0 and dp2 (each other's ring holders) die in one step: in-job recovery
                    ends 76, the launcher warm-relaunches from the dead processes' node-local
                    segments before HDF5; same checksum
  hdf5-restart      the same with HDF5 checkpoints (the rank is killed once one is published): the
                    launcher restarts with --resume (tier 3); same checksum

Every scenario also checks that the job's /dev/shm segments are gone afterwards. Prints PASS on
success, FAIL lines otherwise.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import frlib  # noqa: E402
from frlib import checksums  # noqa: E402

FAILURES = []


def fail(msg):
    FAILURES.append(msg)
    print(f"FAIL: {msg}", flush=True)


def check(cond, msg):
    if not cond:
        fail(msg)
    return cond


def job_name(config):
    with open(config) as f:
        m = re.search(r"name:\s*([A-Za-z0-9_-]+)", f.read())
    return m.group(1)


def shm_segments(job):
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"flashrec.{job}."))
    except FileNotFoundError:
        return []


def reference_checksum(a, timeout=180):
    """The failure-free run, straight through mpirun (no launcher, no faults)."""
    p = subprocess.run([a.mpirun, "-n", str(a.np), a.trainer, "--config", a.config],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    sums = checksums(p.stdout)
    if len(sums) != 1:
        print(p.stdout[-3000:])
        fail(f"reference run printed {len(sums)} final_checksum lines")
        return None
    print(f"reference (direct mpirun): final_checksum={sums[0]}", flush=True)
    return sums[0]


def launch(a, events_path, extra=(), watcher=None, timeout=200):
    """Runs flashrec-launch (frlib.launch: under fr-run, every process reaped); `watcher(run)` is
    called every few ms while it runs, with the event log so far in run.records()."""
    print("running:", a.launcher, a.config, "--events", events_path, *extra, flush=True)
    run = frlib.launch(a.launcher, a.config, events_path, extra=extra, timeout=timeout, watcher=watcher)
    sys.stdout.write(run.output)
    check(not run.hung, f"flashrec-launch did not end within {timeout} s")
    check(not run.left_behind, "flashrec-launch left processes behind")
    print(f"flashrec-launch exit code {run.exit_code}", flush=True)
    return run.exit_code, run.output


def common_end(a, job, rc, text, ev, expect_rc=0, ref=None):
    if expect_rc is not None:
        check(rc == expect_rc, f"flashrec-launch exit code {rc}, expected {expect_rc}")
    if ref is not None:
        sums = checksums(text)
        check(len(sums) == 1, f"expected exactly one final_checksum line, got {len(sums)}")
        check(sums == [ref], f"final checksum {sums} differs from the failure-free run's {ref}")
    ends = [e for e in ev if e["event"] == "job_end"]
    check(len(ends) == 1, "the event log has no job_end record")
    exits = [e for e in ev if e["event"] == "mpirun_exited"]
    if expect_rc == 0 and exits:
        # Finished is judged from the roles' role_finished records alone (docs/launcher.md).
        check(exits[-1].get("roles_finished") is True, f"the last attempt was not judged finished: {exits[-1]}")
        last = max(e.get("attempt", 0) for e in ev if e["event"] == "launch")
        check(any(e["event"] == "role_finished" for e in ev), "no role_finished record in the event log")
        check(exits[-1].get("attempt") == last, "the finished attempt is not the last one launched")
    # Every repair that completed carries its time, and job_end counts it.
    repairs = [e for e in ev if e["event"] in ("warm_relaunch", "cold_restart") and e.get("outcome") == "resumed"]
    for r in repairs:
        check("total_ms" in r, f"{r['event']} {r.get('relaunch', r.get('restart'))} resumed without total_ms")
    if ends and repairs:
        counted = ends[0].get("time_lost_ms", {}).get("relaunch", 0)
        spent = sum(r.get("total_ms", 0) for r in repairs)
        check(abs(counted - spent) < 0.01 * len(repairs) + 1e-6,
              f"job_end counts {counted} ms of relaunches, the records {spent} ms")
    left = shm_segments(job)
    check(not left, f"/dev/shm segments of job {job} left after the launcher ended: {left}")
    cleanup = [e for e in ev if e["event"] == "shm_cleanup"]
    check(bool(cleanup), "no shm_cleanup record")
    return ends[0] if ends else {}


# ---------------------------------------------------------------------------------------------

def scenario_hang(a):
    job = job_name(a.config)
    ref = reference_checksum(a)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    rc, text = launch(a, ev_path, ["--fault", "role=1:step=10:phase=forward:action=stop"])
    ev = frlib.read_events(ev_path)
    common_end(a, job, rc, text, ev, 0, ref)
    hangs = [e for e in ev if e["event"] == "failure" and e.get("observed") == "hang_no_heartbeat"
             and e.get("role") == "dp1.tp0.pp0"]
    if check(len(hangs) == 1, f"expected one hang_no_heartbeat failure for dp1.tp0.pp0, got {len(hangs)}"):
        h = hangs[0]
        check(h["classification"] == "process_hang" and h["action"] == "kill_and_replace",
              f"hang classified as {h['classification']}/{h['action']}")
        print(f"detection: {h.get('detection_latency_ms')} ms since the last heartbeat, "
              f"{h.get('since_injection_ms')} ms since the SIGSTOP", flush=True)
    kills = [e for e in ev if e["event"] == "hang_kill" and e.get("result") == "killed"]
    check(any(k["role"] == "dp1.tp0.pp0" for k in kills), "the hung rank was not killed")
    rec = [e for e in ev if e["event"] == "recovery" and "dp1.tp0.pp0" in e.get("failed_roles", [])]
    check(len(rec) >= 1, "no in-job recovery record for dp1.tp0.pp0")
    if rec:
        print(f"recovery: tier {rec[0].get('tier')}, {rec[0].get('replacement')}, "
              f"{rec[0].get('total_ms')} ms, {rec[0].get('steps_replayed')} step(s) replayed", flush=True)
    cleared = [e for e in ev if e["event"] == "stall_cleared"]
    if cleared:
        print(f"note: {len(cleared)} stall declaration(s) cleared on confirmation", flush=True)
    extra = [e for e in ev if e["event"] == "hang_kill" and e["role"] != "dp1.tp0.pp0"]
    check(not extra, f"healthy ranks were killed as hung: {[e['role'] for e in extra]}")


def scenario_warm_relaunch(a):
    job = job_name(a.config)
    ref = reference_checksum(a)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    state = {"killed": None, "pid": None}

    def watcher(run):
        if state["killed"]:
            return
        step, pid = -1, None
        for e in run.records():
            if e["event"] == "launch":
                pid = e["pid"]
            elif e["event"] == "step":
                step = max(step, e["step"])
        if pid and step >= 100:
            os.kill(pid, signal.SIGKILL)
            state["killed"] = time.time()
            state["pid"] = pid
            print(f"test: SIGKILLed mpirun (pid {pid}) at step {step}", flush=True)

    rc, text = launch(a, ev_path, watcher=watcher)
    ev = frlib.read_events(ev_path)
    check(state["killed"] is not None, "the test never got to kill mpirun (job too short?)")
    common_end(a, job, rc, text, ev, 0, ref)
    rel = [e for e in ev if e["event"] == "warm_relaunch"]
    if check(len(rel) == 1, f"expected one warm_relaunch record, got {len(rel)}"):
        r = rel[0]
        check(r.get("outcome") == "resumed", f"warm relaunch outcome {r.get('outcome')}")
        check(r.get("steps_replayed", 99) <= 1, f"{r.get('steps_replayed')} steps replayed (at most 1 allowed)")
        for phase in ("detect", "teardown", "launch", "restore"):
            check(phase in r.get("phases_ms", {}), f"warm_relaunch has no {phase} phase")
        if state["killed"] and "resumed_unix_ms" in r:
            print(f"kill -> every rank back in the step loop: "
                  f"{r['resumed_unix_ms'] - state['killed'] * 1000:.0f} ms (by the test's clock)", flush=True)
        print(f"warm relaunch: total {r.get('total_ms')} ms, phases {r.get('phases_ms')}, "
              f"restored version {r.get('restored_version')}, {r.get('steps_replayed')} step(s) replayed",
              flush=True)
    launches = [e for e in ev if e["event"] == "launch"]
    check(len(launches) == 2 and launches[1].get("relaunch") is True,
          "the second launch did not carry FLASHREC_RELAUNCH")
    td = [e for e in ev if e["event"] == "teardown" and e.get("attempt") == 1]
    check(bool(td) and td[0].get("complete"), "the old job was not completely torn down")


def scenario_warm_relaunch_platform(a):
    """The warm relaunch above, its new processes on "another CPU" (the named fake
    FLASHREC_FAKE_CPU_FLAGS=relaunched:<flags>, issue 29 item 4): every role warns with a
    platform_mismatch record (restore relaunch, cpu_flags only, not refused), and the result is
    still bitwise the failure-free run's."""
    os.environ["FLASHREC_FAKE_CPU_FLAGS"] = "relaunched:fpu sse2 fake-flags-of-the-relaunch-node"
    scenario_warm_relaunch(a)
    ev = frlib.read_events(os.path.join(a.workdir, f"{job_name(a.config)}.events.jsonl"))
    m = [e for e in ev if e["event"] == "platform_mismatch"]
    roles = sorted(e.get("role") for e in m)
    check(roles == [f"dp{d}.tp0.pp0" for d in range(4)], f"platform_mismatch from roles {roles}, expected each role once")
    for e in m:
        check(e.get("restore") == "relaunch", f"platform_mismatch restore {e.get('restore')}, expected relaunch")
        check([d.get("field") for d in e.get("differences", [])] == ["cpu_flags"],
              f"platform_mismatch differences {e.get('differences')}")
        check(e.get("refused") is False, "platform_mismatch refused without require_same_platform")


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def hello(token, role=b"dp0.tp0.pp0", version=2, pid=4242):
    """A HELLO as docs/control-plane.md lays it out, without an MPI process (empty namespace, rank 0)."""
    host = b"attacker"
    return frame(bytes([1, version]) + token + struct.pack("<ii", 0, pid) + bytes([len(role)]) + role +
                 bytes([len(host)]) + host + bytes([0]) + struct.pack("<I", 0))


def attack(endpoint, rng):
    host, port = endpoint.rsplit(":", 1)
    port = int(port)
    sent = {}

    def send(name, data, close=True):
        try:
            s = socket.create_connection((host, port), timeout=2)
            s.sendall(data)
            if close:
                time.sleep(0.01)
                s.close()
                return None
            return s
        except OSError as e:
            print(f"attack {name}: {e}")
            return None
        finally:
            sent[name] = sent.get(name, 0) + 1

    for _ in range(20):
        send("garbage", bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4096))))
    send("oversize", struct.pack("<I", 0xFFFFFFFF) + b"x" * 64)
    send("oversize-before-hello", frame(b"\x01" + b"y" * 2000))
    send("zero-length", struct.pack("<I", 0))
    send("unknown-type", frame(b"\x09abc"))
    send("wrong-token", hello(bytes(rng.getrandbits(8) for _ in range(16))))
    send("bad-version", hello(b"\x00" * 16, version=7))
    send("heartbeat-first", frame(b"\x02" + struct.pack("<qB", 5, 1)))
    send("truncated-hello", hello(b"\x00" * 16)[:20])
    idle = [send("idle", b"", close=False) for _ in range(20)]
    for s in idle:
        if s:
            s.close()
    return sent


def scenario_hostile(a):
    job = job_name(a.config)
    ref = reference_checksum(a)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    rng = random.Random(1234)
    state = {"attacked": 0, "metrics": None, "during_run": False}

    def watcher(run):
        ev = run.records()
        endpoint = next((e["control"] for e in ev if e["event"] == "layout"), None)
        metrics = next((e["metrics"] for e in ev if e["event"] == "layout"), None)
        running = any(e["event"] == "job_running" for e in ev)
        if endpoint and state["attacked"] == 0:
            attack(endpoint, rng)  # before the ranks connect
            state["attacked"] = 1
        if endpoint and running and state["attacked"] == 1:
            attack(endpoint, rng)  # while they train
            state["attacked"] = 2
            state["during_run"] = not any(e["event"] == "job_end" for e in ev)
            if metrics:
                try:
                    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=2) as r:
                        state["metrics"] = r.read().decode()
                except OSError as e:
                    state["metrics"] = f"error: {e}"

    rc, text = launch(a, ev_path, watcher=watcher)
    ev = frlib.read_events(ev_path)
    common_end(a, job, rc, text, ev, 0, ref)
    check(state["attacked"] == 2, "the control plane was not attacked twice")
    drops = {}
    for e in ev:
        if e["event"] == "connection_dropped":
            drops[e["reason"]] = drops.get(e["reason"], 0) + 1
    print(f"connections dropped by reason: {drops}", flush=True)
    for reason in ("bad_token", "oversize_frame", "protocol_violation", "unsupported_version"):
        check(drops.get(reason, 0) >= 1, f"no connection dropped for {reason}")
    check(sum(drops.values()) >= 40, f"only {sum(drops.values())} hostile connections were dropped")
    failures = [e for e in ev if e["event"] == "failure"]
    check(not failures, f"hostile input was taken for a rank failure: {failures}")
    m = state["metrics"] or ""
    check("flashrec_steps_completed" in m and "flashrec_up" in m, f"metrics endpoint answered: {m[:200]!r}")
    if "flashrec_control_plane_drops_total" in m:
        print("metrics endpoint: ok (" + str(len(m.splitlines())) + " lines)", flush=True)


def scenario_mpirun_lingers(a):
    """Issue 15 (10): mpirun is SIGSTOPped while the job runs, so it can never exit by itself.
    Once every rank said BYE, the launcher must end it within its stated grace (10 s) and
    report the job finished."""
    job = job_name(a.config)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    state = {"stopped": None}

    def watcher(run):
        if state["stopped"]:
            return
        ev = run.records()
        pid = next((e["pid"] for e in ev if e["event"] == "launch"), None)
        if pid and any(e["event"] == "job_running" for e in ev):
            os.kill(pid, signal.SIGSTOP)
            state["stopped"] = pid
            print(f"test: SIGSTOPped mpirun (pid {pid}) while the job runs", flush=True)

    rc, text = launch(a, ev_path, watcher=watcher, timeout=150)
    ev = frlib.read_events(ev_path)
    check(state["stopped"] is not None, "the test never got to stop mpirun")
    end = common_end(a, job, rc, text, ev, 0, None)
    check(end.get("outcome") == "finished", f"job_end outcome {end.get('outcome')}")
    lingered = [e for e in ev if e["event"] == "mpirun_lingered"]
    if check(len(lingered) == 1, f"expected one mpirun_lingered record, got {len(lingered)}"):
        print(f"mpirun ended by the launcher {lingered[0].get('since_last_rank_ms')} ms after the last rank left "
              f"(grace {lingered[0].get('grace_ms')} ms)", flush=True)


def flood(endpoint, rng, seconds, workers=16):
    """Many concurrent connections for `seconds`: idle ones held open, garbage, oversize frames
    and wrong-token HELLOs, as fast as the workers can go (issue 15, case 4)."""
    import threading
    host, port = endpoint.rsplit(":", 1)
    port = int(port)
    stop = time.monotonic() + seconds
    counts = {"opened": 0, "refused": 0}
    lock = threading.Lock()

    def worker(seed):
        r = random.Random(seed)
        held = []
        while time.monotonic() < stop:
            try:
                s = socket.create_connection((host, port), timeout=1)
            except OSError:
                with lock:
                    counts["refused"] += 1
                time.sleep(0.01)
                continue
            with lock:
                counts["opened"] += 1
            kind = r.randrange(4)
            try:
                if kind == 0:
                    held.append(s)  # idle: never sends HELLO
                    if len(held) > 64:
                        held.pop(0).close()
                    continue
                if kind == 1:
                    s.sendall(bytes(r.getrandbits(8) for _ in range(r.randint(1, 2048))))
                elif kind == 2:
                    s.sendall(struct.pack("<I", 0xFFFFFFF0) + b"z" * 256)
                else:
                    s.sendall(hello(bytes(r.getrandbits(8) for _ in range(16)), role=b"dp1.tp0.pp0"))
            except OSError:
                pass
            s.close()
        for s in held:
            s.close()

    threads = [threading.Thread(target=worker, args=(rng.random(),)) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return counts


def scenario_flood(a):
    """Issue 15 (4): a connection flood with garbage during a real job, with a rank killed in
    the middle of it (its replacement must register through the flood). Same checksum, exit 0,
    no healthy rank lost to the flood."""
    job = job_name(a.config)
    ref = reference_checksum(a)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    rng = random.Random(4321)
    state = {"flooded": None}

    def watcher(run):
        if state["flooded"] is not None:
            return
        ev = run.records()
        endpoint = next((e["control"] for e in ev if e["event"] == "layout"), None)
        if endpoint and any(e["event"] == "job_running" for e in ev):
            state["flooded"] = flood(endpoint, rng, 8.0)
            print(f"test: flood done: {state['flooded']}", flush=True)

    rc, text = launch(a, ev_path, ["--fault", "role=2:step=150:phase=forward:action=kill"], watcher=watcher)
    ev = frlib.read_events(ev_path)
    common_end(a, job, rc, text, ev, 0, ref)
    check(state["flooded"] is not None and state["flooded"]["opened"] > 200,
          f"the flood did not happen at scale: {state['flooded']}")
    failures = [e for e in ev if e["event"] == "failure"]
    lost = [e for e in failures if e.get("role") != "dp2.tp0.pp0"]
    check(not lost, f"the flood cost healthy ranks: {[(e.get('role'), e.get('observed')) for e in lost]}")
    check(len([e for e in failures if e.get("role") == "dp2.tp0.pp0"]) == 1,
          f"the killed rank was not reported once: {[(e.get('role'), e.get('observed')) for e in failures]}")
    drops = {}
    for e in ev:
        if e["event"] == "connection_dropped":
            drops[e["reason"]] = drops.get(e["reason"], 0) + 1
    print(f"connections dropped by reason (logged ones): {drops}", flush=True)


def scenario_state_on_live_nodes(a):
    """Issue 15 (2): dp0 and dp2 hold each other's ring copies (node-aware, 2 nodes) and die in
    the same step with dp1, node0's other process: no live process on node0 can serve dp0's own
    snapshot in-job (dp2's is served by dp3), so in-job recovery finds the state lost (76); but
    the snapshot is intact in node0's /dev/shm. The launcher tries a warm relaunch before HDF5
    (there is none here): same checksum, exit 0."""
    job = job_name(a.config)
    ref = reference_checksum(a)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    rc, text = launch(a, ev_path, ["--fault", "role=0:step=150:phase=forward:action=kill",
                                   "--fault", "role=1:step=150:phase=forward:action=kill",
                                   "--fault", "role=2:step=150:phase=forward:action=kill"])
    ev = frlib.read_events(ev_path)
    common_end(a, job, rc, text, ev, 0, ref)
    check(any(e["event"] == "warm_relaunch_before_hdf5" for e in ev), "no warm_relaunch_before_hdf5 record")
    rel = [e for e in ev if e["event"] == "warm_relaunch"]
    if check(len(rel) == 1, f"expected one warm_relaunch record, got {len(rel)}"):
        print(f"warm relaunch: restored version {rel[0].get('restored_version')}, "
              f"{rel[0].get('steps_replayed')} step(s) replayed, outcome {rel[0].get('outcome')}", flush=True)


def scenario_state_lost_mpirun_lingers(a):
    """Issue 46 (1): the state-on-live-nodes job (the ranks end the attempt with 76 for a warm
    relaunch), under a FAKE mpirun: a stand-in that runs the real one and then stays alive, as
    PRRTE's mpirun sometimes does after all its ranks ended at once. Every process sent its
    ending_job record or is gone, so the launcher must end the stand-in at once (rule
    every_process_accounted_for), not after the 10 s grace; the relaunch runs the real mpirun."""
    job = job_name(a.config)
    ref = reference_checksum(a)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    stand_in = os.path.join(a.workdir, "lingering-mpirun")
    # Only the first attempt (the one with the faults) lingers: the launcher also runs the
    # wrapper to read its flags, and the relaunch must run the real mpirun.
    with open(stand_in, "w") as f:
        f.write(f"#!/bin/sh\n# FAKE mpirun for launch_tests.py state-lost-mpirun-lingers: the attempt with the faults "
                f"outlives its ranks.\ncase \" $* \" in\n  *\" --fault \"*) '{a.mpirun}' \"$@\"; exec sleep 300 ;;\n"
                f"  *) exec '{a.mpirun}' \"$@\" ;;\nesac\n")
    os.chmod(stand_in, 0o755)
    print("running:", a.launcher, a.config, "with FLASHREC_MPIRUN =", stand_in, flush=True)
    run = frlib.launch(a.launcher, a.config, ev_path, timeout=200, env={"FLASHREC_MPIRUN": stand_in},
                       faults=["role=0:step=150:phase=forward:action=kill", "role=1:step=150:phase=forward:action=kill",
                               "role=2:step=150:phase=forward:action=kill"])
    sys.stdout.write(run.output)
    check(not run.hung, "flashrec-launch did not end within 200 s")
    check(not run.left_behind, "flashrec-launch left processes behind")
    ev = frlib.read_events(ev_path)
    common_end(a, job, run.exit_code, run.output, ev, 0, ref)
    lingered = [e for e in ev if e["event"] == "mpirun_lingered"]
    if check(len(lingered) == 1, f"expected one mpirun_lingered record (the first attempt's), got {lingered}"):
        check(lingered[0].get("attempt") == 1 and lingered[0].get("rule") == "every_process_accounted_for" and
              lingered[0].get("grace_ms") == 0, f"the lingering mpirun was not ended at once: {lingered[0]}")
    rel = [e for e in ev if e["event"] == "warm_relaunch"]
    if check(len(rel) == 1, f"expected one warm_relaunch record, got {len(rel)}"):
        print(f"warm relaunch: {json.dumps(rel[0])}", flush=True)


def scenario_spares_exhausted(a):
    job = job_name(a.config)
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    rc, text = launch(a, ev_path, ["--fault", "role=2:step=20:action=kill"])
    ev = frlib.read_events(ev_path)
    end = common_end(a, job, rc, text, ev, 77, None)
    check(end.get("outcome") == "spares_exhausted", f"job_end outcome {end.get('outcome')}")
    check(re.search(r"spares exhausted", text) is not None, "no clear 'spares exhausted' message")
    deaths = [e for e in ev if e["event"] == "failure" and e.get("classification") == "spares_exhausted"]
    check(len(deaths) == 1, "the job's death was not classified spares_exhausted")
    cleanup = [e for e in ev if e["event"] == "shm_cleanup"]
    if cleanup:
        check(cleanup[0].get("segments_removed", 0) > 0,
              "the dead job left no segments to clean (expected the survivors' snapshots)")
        print(f"shm_cleanup removed {cleanup[0].get('segments_removed')} segment(s)", flush=True)


def scenario_hdf5_restart(a):
    job = job_name(a.config)
    with open(a.config) as f:
        ckpt = re.search(r'dir:\s*"([^"]+)"', f.read()).group(1)
    shutil.rmtree(ckpt, ignore_errors=True)
    ref = reference_checksum(a)
    shutil.rmtree(ckpt, ignore_errors=True)  # the launcher's run must use its own checkpoints
    ev_path = os.path.join(a.workdir, f"{job}.events.jsonl")
    state = {"killed": None}

    def watcher(run):
        # Once a checkpoint is published, SIGKILL the process of role dp2 (no spare: exit 77).
        if state["killed"]:
            return
        ev = run.records()
        pid = next((e["pid"] for e in reversed(ev) if e["event"] == "rank_registered"
                    and e["role"] == "dp2.tp0.pp0"), None)
        if pid and any(e["event"] == "checkpoint" for e in ev):
            os.kill(pid, signal.SIGKILL)
            state["killed"] = pid
            state["after_the_end"] = any(e["event"] == "role_finished" for e in ev)
            print(f"test: a checkpoint is published; SIGKILLed dp2.tp0.pp0 (pid {pid})", flush=True)

    rc, text = launch(a, ev_path, watcher=watcher)
    ev = frlib.read_events(ev_path)
    check(state["killed"] is not None, "the test never got to kill a rank (no checkpoint published?)")
    check(not state.get("after_the_end"), "the first checkpoint was published after the job's last step: "
          "the kill found a finished job (make the job's steps longer)")
    common_end(a, job, rc, text, ev, 0, ref)
    deaths = [e for e in ev if e["event"] == "failure" and e.get("classification") == "spares_exhausted"]
    check(len(deaths) == 1, "the job's death was not classified spares_exhausted")
    restarts = [e for e in ev if e["event"] == "cold_restart"]
    if check(len(restarts) == 1, f"expected one cold_restart record, got {len(restarts)}"):
        r = restarts[0]
        check(r.get("outcome") == "resumed", f"cold restart outcome {r.get('outcome')}")
        print(f"HDF5 restart from step {r.get('checkpoint_step')}: total {r.get('total_ms')} ms, "
              f"{r.get('steps_replayed')} step(s) replayed", flush=True)
    launches = [e for e in ev if e["event"] == "launch"]
    check(len(launches) == 2 and launches[1].get("resume") is True, "the restart did not pass --resume")
    shutil.rmtree(ckpt, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=["hang", "warm-relaunch", "warm-relaunch-platform", "hostile", "spares-exhausted", "hdf5-restart",
                                         "mpirun-lingers", "flood", "state-on-live-nodes",
                                         "state-lost-mpirun-lingers"])
    ap.add_argument("--launcher", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--trainer", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--np", type=int, required=True)
    ap.add_argument("--workdir", default=os.getcwd())
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    {"hang": scenario_hang, "warm-relaunch": scenario_warm_relaunch,
     "warm-relaunch-platform": scenario_warm_relaunch_platform, "hostile": scenario_hostile,
     "spares-exhausted": scenario_spares_exhausted, "hdf5-restart": scenario_hdf5_restart,
     "mpirun-lingers": scenario_mpirun_lingers,
     "state-lost-mpirun-lingers": scenario_state_lost_mpirun_lingers, "flood": scenario_flood,
     "state-on-live-nodes": scenario_state_on_live_nodes}[a.scenario](a)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", flush=True)
        return 1
    print(f"PASS {a.scenario}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
