"""Where a CPU workload's time goes, per backend: generated kernels, ATen calls (by op), and the rest (host).

    python bench/profile_cpu.py bert_1x12 --backends eager,inductor,fuse_all --steps 20 --threads 1

Each backend compiles the workload in this process, warms up, then `--steps` steps run under torch.profiler
(CPU activity). fuse_all's host program runs its kernels and ATen calls inside profiler ranges
(`fuse_all::<graph>::<kernel>`, `...::extern_<i>::<op>`); Inductor records its C++ kernels when
`cpp.enable_kernel_profile` is on (set here). The outermost generated kernel or ATen op under a step is
counted once; what is left of the step is the host's (Dynamo's guards, the wrapper, allocation). The
profiler's times are wall-clock: on a loaded machine read the shares, and take absolute CPU times from
`cpu_time_per_call.py`.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

_GENERATED = re.compile(r"^(graph_\d+_)?cpp_fused|^fuse_all::[^:]+::(?!extern_)[^:]+$")
_EXTERN = re.compile(r"^fuse_all::[^:]+::extern_\d+::(?P<op>.+)$")
_STEP = "profile_cpu::step"


def classify(name: str) -> tuple[str, str] | None:
    """(kind, label) for a counted event, None for an event that only contains others."""
    if _GENERATED.search(name):
        return "generated", name.split("::")[-1]
    found = _EXTERN.match(name)
    if found:
        return "aten", found["op"].removeprefix("aten.").split(".")[0]
    if name.startswith("aten::"):
        return "aten", name.removeprefix("aten::")
    return None


def profile_backend(workload: str, backend: str, steps: int) -> tuple[float, dict, dict]:
    import torch
    import workloads
    from torch.profiler import ProfilerActivity, profile, record_function
    torch._dynamo.reset()
    inst = workloads.build(workload, "cpu")
    fn = inst.target if backend == "eager" else torch.compile(inst.target, backend=backend)
    for _ in range(3):
        inst.step(fn)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with record_function(_STEP):
                inst.step(fn)
    events = prof.events()
    step_us = sum(e.cpu_time_total for e in events if e.name == _STEP) / steps
    by_kind: dict[str, float] = collections.defaultdict(float)
    by_label: dict[tuple[str, str], list] = collections.defaultdict(lambda: [0.0, 0])
    for e in events:
        kind = classify(e.name)
        if kind is None:
            continue
        parent, inside = e.cpu_parent, False
        while parent is not None:
            if classify(parent.name) is not None:
                inside = True
                break
            parent = parent.cpu_parent
        if inside:
            continue
        by_kind[kind[0]] += e.cpu_time_total / steps
        by_label[kind][0] += e.cpu_time_total / steps
        by_label[kind][1] += 1
    by_kind["host and other"] = step_us - sum(by_kind.values())
    return step_us, dict(by_kind), {k: (v[0], v[1] / steps) for k, v in by_label.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workload")
    p.add_argument("--backends", default="eager,inductor,fuse_all")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import torch._inductor.config as inductor_config
    import fuse_all  # noqa: F401  (registers the backend)
    torch.set_num_threads(a.threads)
    inductor_config.cpp.enable_kernel_profile = True
    for backend in a.backends.split(","):
        step_us, by_kind, by_label = profile_backend(a.workload, backend, a.steps)
        kinds = ", ".join(f"{k} {v / 1e3:.3f}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]))
        print(f"\n{a.workload} {backend}: {step_us / 1e3:.3f} ms per step ({kinds})")
        for (kind, label), (us, calls) in sorted(by_label.items(), key=lambda kv: -kv[1][0])[:a.top]:
            print(f"  {us / 1e3:8.4f} ms  {calls:6.1f} calls  {kind:9s} {label[:100]}")


if __name__ == "__main__":
    main()
