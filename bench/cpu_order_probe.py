"""Does a backend run slower right after another backend's calls than right after its own? (issue 17)

Compiles eager, Inductor and fuse_all on one workload in this process, then times blocks of calls in the
order F F E F I F per round (F fuse_all, E eager, I Inductor) and reports fuse_all's blocks grouped by the
block before them: wall median per call and process CPU ms per call, with the load average. A state that
one backend leaves behind for the next (thread pools, allocator, caches) shows as "after E/I" above
"after F"; on a shared machine compare the CPU columns and repeat.

    python bench/cpu_order_probe.py resnet50_1x3x64x64 --rounds 12 --steps 8 --threads 2
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

ORDER = ["F", "F", "E", "F", "I", "F"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--steps", type=int, default=10, help="calls per block")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import workloads
    import fuse_all  # noqa: F401  (registers the backend)
    torch.set_num_threads(a.threads)
    inst = workloads.build(a.workload, "cpu")
    fns = {"E": inst.target, "I": torch.compile(inst.target, backend="inductor"),
           "F": torch.compile(inst.target, backend="fuse_all")}
    for fn in fns.values():
        for _ in range(3):
            inst.step(fn)

    def block(fn) -> tuple[float, float]:
        start_cpu, times = time.process_time(), []
        for _ in range(a.steps):
            start = time.perf_counter()
            inst.step(fn)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3, (time.process_time() - start_cpu) / a.steps * 1e3

    found: dict[tuple[str, str | None], list[tuple[float, float]]] = {}
    for _ in range(a.rounds):
        previous = None
        for key in ORDER:
            found.setdefault((key, previous), []).append(block(fns[key]))
            previous = key
    for (key, previous), values in sorted(found.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        print(f"{a.workload} {key} after {previous}: wall median {statistics.median(w for w, _ in values):8.3f} ms, "
              f"CPU {statistics.median(c for _, c in values):8.3f} ms per call ({len(values)} blocks)")
    print(f"threads {a.threads}, load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
