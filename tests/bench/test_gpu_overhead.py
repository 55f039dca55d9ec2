#!/usr/bin/env python3
"""Test of bench/gpu/gpu_overhead.py's parts that need no GPU: the serial bound and shares
(derive), the table of --from-json, the exit without a device (77, nothing run), and the sweep's
job handling (config, environment, job_stats, checksums, JSON, a failed run leaving its row out)
on real MPI jobs of the CPU example trainer standing in for the CUDA one, with hand-written
copy figures (this checks the harness, not a measurement).

  test_gpu_overhead.py MLP_TRAINER

Prints PASS or FAIL lines; exit code 1 on any FAIL."""
import json
import os
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "gpu", "gpu_overhead.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import gpu_overhead as go  # noqa: E402

failures = 0


def check(name, ok, detail=""):
    global failures
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail else ""))
    failures += 0 if ok else 1


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return p.returncode, p.stdout


def executable(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def fake_build(root, copy_script, trainer):
    """A build directory whose bench_cuda_copy is `copy_script` and whose CUDA trainer is `trainer`."""
    os.makedirs(os.path.join(root, "bench", "gpu"))
    os.makedirs(os.path.join(root, "examples", "mlp_cuda"))
    executable(os.path.join(root, "bench", "gpu", "bench_cuda_copy"), copy_script)
    os.symlink(trainer, os.path.join(root, "examples", "mlp_cuda", "mlp_cuda_trainer"))
    return root


COPY_FIGURES = """#!/bin/sh
echo "device=stand-in (hand-written figures) cc=0.0 memory_GiB=0.0"
echo "cuda_d2h_pinned_GBps=50.00 cuda_d2h_pageable_GBps=10.00 cuda_h2d_pinned_GBps=45.00 cuda_d2h_chunked_GBps=30.00 bytes=$1 chunk_bytes=$2"
"""
NO_DEVICE = """#!/bin/sh
echo "bench_cuda_copy: no CUDA device (nothing measured)" >&2
exit 77
"""


def main():
    trainer = os.path.abspath(sys.argv[1])

    # 1. The bound: 1e9 bytes at 50 GB/s is 20 ms; over a 10 ms step that is (10 + 20) / 10.
    r = {"step_ms_off": 10.0, "state_bytes_per_rank": 1e9, "cuda_d2h_pinned_GBps": 50.0,
         "snapshot_GBps": 25.0, "snapshot_d2h_GBps": 40.0}
    go.derive(r)
    check("serial bound", abs(r["serial_ratio_bound"] - 3.0) < 1e-12 and abs(r["d2h_floor_ms"] - 20.0) < 1e-9,
          f"{r['serial_ratio_bound']}, floor {r['d2h_floor_ms']} ms")
    check("shares of cudaMemcpy pinned", r["snapshot_share_of_d2h_pinned"] == 0.5 and r["d2h_share_of_d2h_pinned"] == 0.8)
    check("environment of a shared GPU", go.job_env(2).get("FLASHREC_GPU_SHARED") == "1"
          and go.job_env(2).get("NCCL_SOCKET_IFNAME") == "lo" and "FLASHREC_GPU_SHARED" not in go.job_env(1))

    with tempfile.TemporaryDirectory() as tmp:
        # 2. --from-json prints the table of a stored run (bound recomputed), runs nothing.
        row = {"ranks": 2, "device_state_mib": 64, "device_ms": 20, "state_bytes_per_rank": 1e9,
               "shm_bytes_per_rank": 4e9, "step_ms_off": 10.0, "step_ms_on": 12.5, "ratio": 1.25,
               "exposed_wait_ms": 1.5, "snapshot_ms": 30.0, "protection_cpu_ms": 20.0,
               "snapshot_d2h_GBps": 40.0, "snapshot_GBps": 25.0, "replication_GBps": 3.0,
               "same_checksum": True, "checksums": ["0123456789abcdef"], "bytes": 64 << 20,
               "cuda_d2h_pinned_GBps": 50.0, "cuda_d2h_pageable_GBps": 10.0, "cuda_h2d_pinned_GBps": 45.0,
               "cuda_d2h_chunked_GBps": 30.0}
        stored = os.path.join(tmp, "stored.json")
        with open(stored, "w") as f:
            json.dump({"meta": {"device": ["device=stand-in"], "pairs": 2, "steps": 30, "chunk_bytes": 262144},
                       "rows": [row]}, f)
        rc, out = run("--from-json", stored)
        # A row from before protection.device_hash: the host hash, no kernel figure.
        want = ("| 2 | 64 | 20 | host | 10.00 | 12.50 | 1.250 | 3.000 | 1.50 | 30.0 | 40.00 (80 %) | 25.00 (50 %) "
                "| 3.00 | 50.00 / 10.00 / 30.00 | - | yes |")
        check("--from-json table", rc == 0 and want in out, out[-600:])
        # A GPU-hash row: its kernel figure and the issue-32 target (>= 80 % of cudaMemcpy pinned).
        with open(stored, "w") as f:
            json.dump({"meta": {"device": ["device=stand-in"], "pairs": 2, "steps": 30, "chunk_bytes": 262144},
                       "rows": [dict(row, hash="gpu", snapshot_GBps=45.0, cuda_block_hash_GBps=900.0)]}, f)
        rc, out = run("--from-json", stored)
        check("--from-json: a gpu row and its target", rc == 0 and "| 20 | gpu | 10.00 |" in out and "| 900.0 | yes |" in out
              and "snapshot copy+hash at 90 % of cudaMemcpy D2H pinned (meets >= 80 %)" in out, out[-600:])

        # 3. Without a device: exit 77 before any job.
        nodev = fake_build(os.path.join(tmp, "nodev"), NO_DEVICE, "/bin/false")
        rc, out = run("--build", nodev, "--pairs", "1", "--steps", "3")
        check("no device: exit 77, nothing run", rc == 77 and "nothing measured" in out and "ranks 1" not in out,
              f"rc {rc}: {out[-300:]}")

        # 4. The sweep on real jobs (the CPU trainer standing in): both rank counts, same checksum
        # off and on, the JSON has every row, and --from-json reads it back.
        build = fake_build(os.path.join(tmp, "cpu"), COPY_FIGURES, trainer)
        out_json = os.path.join(tmp, "sweep.json")
        rc, out = run("--build", build, "--ranks", "1", "2", "--state-mib", "1", "--device-ms", "0",
                      "--hash", "gpu", "--pairs", "1", "--steps", "4", "--json", out_json)
        ok = rc == 0 and os.path.exists(out_json)
        rows = json.load(open(out_json))["rows"] if ok else []
        check("sweep: one row per rank count", ok and [r["ranks"] for r in rows] == [1, 2], f"rc {rc}: {out[-1500:]}")
        check("sweep: protection changes no result", rows and all(r["same_checksum"] for r in rows))
        # protection.device_hash on host state: nothing is hashed on a GPU, the config is accepted.
        check("sweep: the gpu hash asked for, host state hashed on the host",
              rows and all(r["hash"] == "gpu" and r["hashed_at_source_per_byte"] == 0 for r in rows))
        check("sweep: job_stats read", rows and all(r["step_ms_off"] > 0 and r["step_ms_on"] > 0
                                                     and r["snapshot_ms"] > 0 for r in rows))
        check("sweep: replication only with 2 ranks", rows and rows[0]["replication_GBps"] == 0
              and rows[1]["replication_GBps"] > 0)
        rc, again = run("--from-json", out_json)
        check("sweep: --from-json reads it back", rc == 0 and again.count("\n| ") >= 3, again[-400:])

        # 5. A failed run leaves its row out, the others go on, and the exit is non-zero.
        broken = fake_build(os.path.join(tmp, "broken"), COPY_FIGURES, "/bin/false")
        rc, out = run("--build", broken, "--ranks", "1", "--state-mib", "1", "--device-ms", "0",
                      "--pairs", "1", "--steps", "3")
        check("failed run: row left out, non-zero exit", rc != 0 and "row left out" in out
              and "rows with a failed run" in out, f"rc {rc}: {out[-400:]}")

    print("FAILURES: %d" % failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
