"""CPU ms and minor page faults per call of one workload compiled by fuse_all twice in ONE process, once with
a function of fuse-all replaced by one returning None ("before": the change it gates turned off) and once as
it is ("after"), optionally with Inductor, taking turns (see cpu_ab_inprocess.py for why one process):

    python bench/patched_ab.py gpt2_1x64 fuse_all_ir.lowerings_view.view_strides --steps 3 --rounds 12 --inductor
    python bench/patched_ab.py resnet50_1x3x64x64 fuse_all_codegen_cpp.render.split_ranges \\
        fuse_all_codegen_cpp.render.invariant_tests

Each variant is compiled from its own code object with torch's AOTAutograd cache off, so both are real
compilations of the same graph.
"""
from __future__ import annotations

import argparse
import importlib
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload")
    p.add_argument("patched", nargs="+", help="module.function made to return None for 'before'")
    p.add_argument("--steps", type=int, default=10, help="calls per block")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--inductor", action="store_true")
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch._functorch.config
    import workloads
    import fuse_all  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    torch._functorch.config.enable_autograd_cache = False
    inst = workloads.build(a.workload, "cpu")

    def fresh(tag: str):            # a new code object: Dynamo compiles it anew
        namespace = {"target": inst.target}
        exec(compile("def f(*args):\n    return target(*args)\n", f"<{tag}>", "exec"), namespace)
        return namespace["f"]

    def compiled(tag: str, backend: str = "fuse_all"):
        fn = torch.compile(fresh(tag), backend=backend)
        for _ in range(3):
            inst.step(fn)
        return fn

    places = [(importlib.import_module(name.rpartition(".")[0]), name.rpartition(".")[2]) for name in a.patched]
    kept = [getattr(module, attr) for module, attr in places]
    for module, attr in places:
        setattr(module, attr, lambda *args, **kwargs: None)
    try:
        fns = {"before": compiled("before")}
    finally:
        for (module, attr), original in zip(places, kept):
            setattr(module, attr, original)
    fns["after"] = compiled("after")
    if a.inductor:
        fns["inductor"] = compiled("inductor", "inductor")
    times: dict[str, list[float]] = {k: [] for k in fns}
    faults = dict.fromkeys(fns, 0)
    for _ in range(a.rounds):
        for name, fn in fns.items():
            before, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.process_time()
            for _ in range(a.steps):
                inst.step(fn)
            times[name].append((time.process_time() - start) / a.steps * 1e3)
            faults[name] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    for name, values in times.items():
        ratio = statistics.median(v / b for v, b in zip(values, times["before"]))
        print(f"{a.workload} {name:9s} median {statistics.median(values):9.3f} ms CPU per call, per-round ratio "
              f"to before {ratio:.3f}, minor faults {faults[name] / (a.steps * a.rounds):.1f} per call")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
