"""Where a default-mode (no CUDA graphs) call of a whole model spends its host time, fuse_all against Inductor
(issue 11 item 1: per-kernel host cost ≤ Inductor's).

    source bench/gpu_env.sh && python bench/host_profile_cuda.py --workloads resnext101_64x3x7x7,resnet50_1x3x224x224
    ... --workloads bert_1x12 --backends fuse_all,inductor --threads     # who else burns CPU during the loop

Per workload and backend: the host loop µs per call (calls issued back to back with one synchronize at the
end: when the host is the bottleneck this is its cost per call), the device kernels and ATen calls per call,
and a cProfile of `--profile-calls` calls: the functions with the most own time, so the two host programs can
be compared line by line (ATen ops such as `convolution` show up as builtins in both).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import env  # noqa: E402

env.add_repo_paths()

import torch  # noqa: E402

import workloads  # noqa: E402

env.register_fuse_all()


def host_us_per_call(instance, fn, calls: int) -> float:
    for _ in range(5):
        instance.step(fn)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        instance.step(fn)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def _thread_cpu_s() -> dict[str, float]:
    """CPU seconds so far of every thread of this process and of its child processes, by name (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}

    def add(stat_dir: Path, label: str) -> None:
        try:
            fields = (stat_dir / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return
        out[label] = out.get(label, 0.0) + (int(fields[11]) + int(fields[12])) / tick

    me = Path("/proc/self/task")
    for task in me.iterdir():
        add(task, "thread " + (task / "comm").read_text().strip())
        try:
            children = (task / "children").read_text().split()
        except OSError:
            children = []
        for pid in children:
            add(Path(f"/proc/{pid}"), "child " + Path(f"/proc/{pid}/comm").read_text().strip())
    return out


def busy_threads(instance, fn, calls: int) -> str:
    """Which threads and child processes burn CPU while the host loop runs: a thread that takes the GIL
    whenever an ATen op releases it slows every op of the loop without showing in any profile of the loop."""
    before = _thread_cpu_s()
    wall = host_us_per_call(instance, fn, calls) * calls / 1e6
    after = _thread_cpu_s()
    rows = sorted(((after[k] - before.get(k, 0.0), k) for k in after), reverse=True)
    return "\n".join(f"  {cpu:6.3f} CPU s  {name}" for cpu, name in rows if cpu > 0) + f"\n  (loop wall {wall:.3f} s)"


def profile_text(instance, fn, calls: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        instance.step(fn)
    profiler.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def aten_host_table(instance, fn, calls: int, top: int) -> str:
    """torch.profiler's host-side view: ATen ops (and what they call: copies, allocations, cuDNN) by self
    CPU time, so an op that costs more host time under one backend shows why."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=False) as prof:
        for _ in range(calls):
            instance.step(fn)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top, max_name_column_width=60)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", required=True)
    p.add_argument("--backends", default="inductor,fuse_all")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--profile-calls", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--threads", action="store_true",
                   help="only the host loop, twice, with the CPU time of every thread and child process during "
                        "the first (no profiles)")
    args = p.parse_args()
    for name in args.workloads.split(","):
        print(f"\n## {name}")
        for backend in args.backends.split(","):
            torch._dynamo.reset()
            instance = workloads.build(name, "cuda")
            fn = instance.target if backend == "eager" else torch.compile(instance.target, backend=backend)
            us = host_us_per_call(instance, fn, args.calls)
            print(f"\n### {backend}: {us:.1f} µs per call, host loop")
            if args.threads:
                print(busy_threads(instance, fn, args.calls))
                print(f"  host loop again: {host_us_per_call(instance, fn, args.calls):.1f} µs per call")
                continue
            print(profile_text(instance, fn, args.profile_calls, args.top))
            print(aten_host_table(instance, fn, args.profile_calls, args.top))


if __name__ == "__main__":
    main()
