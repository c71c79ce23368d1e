"""CPU seconds per call of one backend on one workload, in this process alone (for a loaded machine).

On the shared dev machine wall-clock medians swing several-fold with the other jobs' load; the CPU time a
call consumes (user + sys, `getrusage`) moves far less. Run one process per backend and alternate them:

    for r in 1 2 3; do for b in inductor fuse_all; do
        python bench/cpu_time_per_call.py layernorm_channels_8x64x64x64 $b --steps 300 --threads 1
    done; done

Prints wall, user and sys ms per call and the minor page faults per call (a new output's first touch:
the kernel zeroes freshly mapped pages, counted as sys). `--perf FILE` records the measured calls (not the
compile) with `perf record` (CPU-clock samples of this process only, so other jobs' load does not count);
`perf report -i FILE --sort dso,sym` then says where the CPU time went: libtorch_cpu / oneDNN / MKL (ATen
calls), the generated kernels' libraries, libpython (host).
"""
from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload")
    p.add_argument("backend", help="eager, inductor, fuse_all or any torch.compile backend")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--perf", metavar="FILE", help="perf record the measured calls into FILE")
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import workloads
    import fuse_all  # noqa: F401  (registers the backend)
    torch.set_num_threads(a.threads)
    inst = workloads.build(a.workload, "cpu")
    fn = inst.target if a.backend == "eager" else torch.compile(inst.target, backend=a.backend)
    for _ in range(a.warmup):
        inst.step(fn)
    recorder = _start_perf(a.perf) if a.perf else None
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(a.steps):
        inst.step(fn)
    r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if recorder is not None:
        recorder.send_signal(signal.SIGINT)
        recorder.wait()
    per = lambda v: v / a.steps * 1e3   # noqa: E731
    print(f"{a.workload} {a.backend} threads {a.threads}: wall {per(t1 - t0):.3f} ms, "
          f"user {per(r1.ru_utime - r0.ru_utime):.3f} ms, sys {per(r1.ru_stime - r0.ru_stime):.3f} ms, "
          f"minor faults {(r1.ru_minflt - r0.ru_minflt) / a.steps:.0f} per call, "
          f"load average {os.getloadavg()[0]:.1f}")


def _start_perf(path: str) -> subprocess.Popen:
    recorder = subprocess.Popen(["perf", "record", "-F", "999", "-g", "-p", str(os.getpid()), "-o", path],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)   # perf says nothing once attached: give it time to attach
    if recorder.poll() is not None:
        raise SystemExit(f"perf record failed: {recorder.stderr.read().strip()}")
    return recorder


if __name__ == "__main__":
    main()
