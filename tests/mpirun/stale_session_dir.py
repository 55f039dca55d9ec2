#!/usr/bin/env python3
"""A killed mpirun leaves its session directory ${TMPDIR:-/tmp}/ompi.<pid> behind, and a later
mpirun that is given the same pid refused to start (PMIx "listener thread failed to start",
exit 213): CI hit this twice in one suite run. This test plants such a directory, copied from a
real killed mpirun, at the exact pid tools/fr-mpirun will get (via /proc/sys/kernel/ns_last_pid),
and checks that the job runs.

  stale_session_dir.py FR_MPIRUN
Prints a PASS or FAIL line; SKIP (ctest: Skipped) where ns_last_pid cannot be written or the pid
cannot be had.
"""
import os, shutil, signal, subprocess, sys, tempfile, time

fr_mpirun = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="fr-stale-session.")
env = dict(os.environ, TMPDIR=tmp)


def session_dirs():
    return {d for d in os.listdir(tmp) if d.startswith("ompi.")}


def descendants(root):
    children = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    found, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def spawn_at(pid_wanted, argv):
    """Starts argv with pid pid_wanted (the next fork after writing ns_last_pid gets it)."""
    with open("/proc/sys/kernel/ns_last_pid", "w") as f:
        f.write(str(pid_wanted - 1))
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


try:
    if not os.access("/proc/sys/kernel/ns_last_pid", os.W_OK):
        print("SKIP: /proc/sys/kernel/ns_last_pid is not writable (needs root)")
        sys.exit(0)

    # 1. A real stale directory: SIGKILL an mpirun and its rank once the rank runs.
    victim = subprocess.Popen([fr_mpirun, "-n", "1", "sleep", "30"], env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def rank_started():
        for pid in descendants(victim.pid):
            try:
                if open(f"/proc/{pid}/comm").read().strip() == "sleep":
                    return True
            except OSError:
                pass
        return False
    deadline = time.monotonic() + 30
    while not rank_started() and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in [victim.pid] + descendants(victim.pid):  # mpirun and its rank, as a node crash would
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    victim.wait()
    left = session_dirs()
    if left != {f"ompi.{victim.pid}"}:
        print(f"FAIL setup: expected a session directory ompi.{victim.pid} left behind, found {sorted(left)}")
        sys.exit(1)
    stale = os.path.join(tmp, f"ompi.{victim.pid}")

    # 2. Copy it to a pid nobody uses, and start fr-mpirun at exactly that pid.
    for target in range(20000, 30000, 97):
        if not os.path.exists(f"/proc/{target}") and not os.path.exists(f"/proc/{target - 1}"):
            break
    planted = os.path.join(tmp, f"ompi.{target}")
    for attempt in range(5):
        shutil.copytree(stale, planted, dirs_exist_ok=True)
        job = spawn_at(target, [fr_mpirun, "-n", "2", "sh", "-c", "sleep 0.5; echo rank-ran"])
        if job.pid == target:
            break
        job.communicate(timeout=60)  # another process took the pid first; try again
    else:
        print(f"SKIP: could not start fr-mpirun at pid {target} in 5 tries (a busy machine)")
        sys.exit(0)
    out = job.communicate(timeout=60)[0].decode(errors="replace")
    print(out, end="")
    if job.returncode == 0 and out.count("rank-ran") == 2:
        print(f"PASS fr-mpirun at pid {target} ran its 2 ranks despite a stale ompi.{target} "
              f"left by a killed mpirun")
    else:
        print(f"FAIL fr-mpirun at pid {target} with a stale ompi.{target}: exit code {job.returncode}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
