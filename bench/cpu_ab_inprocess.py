"""CPU ms per call of several compiled variants of one workload in ONE process, taking turns.

On the shared machine a process's CPU time per call swings by +-30% with the load (cpu_time_rounds.py's
rounds); variants compiled in one process and timed in alternating blocks see the same load, so the median
of their per-round ratios resolves differences of a few percent:

    python bench/cpu_ab_inprocess.py mobilenet_v3_small_1x3x128x128 --steps 100 --rounds 15 \\
        inductor fuse_all fuse_all:ctypes fuse_all:weight_layout_cache=0 eager

A variant is `eager`, a backend name, or `fuse_all:` followed by comma-separated `option=0|1` (fuse_all
options) and `ctypes` (C++ kernels launched through ctypes instead of the launcher extension, as before
the extension existed). Ratios are to the first variant.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def compile_variant(spec: str, inst):
    import torch
    if spec == "eager":
        return inst.target
    backend, _, rest = spec.partition(":")
    options, ctypes_launches = {}, False
    for item in filter(None, rest.split(",")):
        if item == "ctypes":
            ctypes_launches = True
            continue
        key, _, value = item.partition("=")
        options[key] = value not in ("0", "false", "False")
    fn = torch.compile(inst.target, backend=backend, options=options or None)
    if not ctypes_launches:
        for _ in range(3):
            inst.step(fn)
        return fn
    from fuse_all_codegen_cpp import launcher
    original = launcher.kernel_launcher
    launcher.kernel_launcher = lambda *a: None     # host programs loaded now bind ctypes launchers
    try:
        for _ in range(3):
            inst.step(fn)
    finally:
        launcher.kernel_launcher = original
    return fn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload")
    p.add_argument("variants", nargs="+")
    p.add_argument("--steps", type=int, default=20, help="calls per block")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import workloads
    import fuse_all  # noqa: F401  (registers the backend)
    torch.set_num_threads(a.threads)
    inst = workloads.build(a.workload, "cpu")
    fns = {spec: compile_variant(spec, inst) for spec in a.variants}
    times: dict[str, list[float]] = {spec: [] for spec in fns}
    for _ in range(a.rounds):
        for spec, fn in fns.items():
            start = time.process_time()
            for _ in range(a.steps):
                inst.step(fn)
            times[spec].append((time.process_time() - start) / a.steps * 1e3)
    first = a.variants[0]
    for spec, values in times.items():
        ratios = [v / f for v, f in zip(values, times[first])]
        print(f"{a.workload} {spec:40s} median {statistics.median(values):8.3f} ms CPU per call, "
              f"median per-round ratio to {first} {statistics.median(ratios):.3f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
