"""In-place buffer reuse A/B on CPU (issue 17): the same workload compiled by fuse_all three ways -- no
reuse (FUSE_ALL_REUSE_BUFFERS=0), the dead-buffer pool only, pool + in place (the default) -- with the
memory each host program allocates per call, its peak of live intermediates, and steady-state times
measured interleaved in one process (so machine noise hits all three alike).

    python bench/in_place_ab.py --workloads mobilenet_v2_1x3x128x128,resnet50_cl_1x3x64x64 --threads 1

Memory is counted from the Program (`fuse_all_ir`): every fresh allocation of a step (an Alloc that
reuses nothing, an ATen call's results), and the largest total of intermediates alive at once; ATen's
own workspaces (oneDNN's) are not seen.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import env  # noqa: E402

env.add_repo_paths()


def program_memory(program) -> tuple[int, int]:
    """(bytes allocated per call, peak bytes of intermediates alive at once)."""
    import sympy

    import fuse_all_ir as ir
    from fuse_all_ir.memory import buffer_specs

    specs = buffer_specs(program)

    def nbytes(name):
        spec = specs.get(name)
        if spec is None:
            return 0
        n = 1
        for d in spec.size:
            n *= int(sympy.sympify(d).subs(program.size_hints))
        return n * ir.torch_dtype(spec.dtype).itemsize

    live, allocated, peak = {}, 0, 0
    for step in program.steps:
        if isinstance(step, ir.Alloc):
            if step.reuse is None:
                live[step.buffer] = nbytes(step.buffer)
                allocated += live[step.buffer]
            else:
                live[step.buffer] = live.pop(step.reuse, 0)
        elif isinstance(step, ir.ExternCall):
            for name in step.outputs:
                if name is not None:
                    live[name] = nbytes(name)
                    allocated += live[name]
        elif isinstance(step, ir.Free):
            live.pop(step.buffer, None)
        peak = max(peak, sum(live.values()))
    return allocated, peak


VARIANTS = ("no_reuse", "pool", "pool+in_place")


def compile_variant(instance, variant: str):
    """The workload compiled with `variant`'s memory plan; returns (callable, [Program])."""
    import torch

    import fuse_all_ir as ir
    from fuse_all_ir import memory

    programs = []
    real_lower, real_donor = ir.lower, memory._in_place_donor

    def lower(*args, **kwargs):
        compiled = real_lower(*args, **kwargs)
        programs.append(compiled.program)
        return compiled
    os.environ["FUSE_ALL_REUSE_BUFFERS"] = "0" if variant == "no_reuse" else "1"
    ir.lower = lower
    if variant == "pool":
        memory._in_place_donor = lambda *a, **k: None
    try:
        # a function of its own per variant: Dynamo keeps one compiled entry per code object (a module's
        # copy would hit the first variant's entry: parameters are graph inputs, not guarded by identity)
        scope = {"target": instance.target}
        exec(f"def run_{variant.replace('+', '_')}(*inputs):\n    return target(*inputs)\n", scope)  # noqa: S102
        fn = torch.compile(scope[f"run_{variant.replace('+', '_')}"], backend="fuse_all")
        instance.step(fn)
    finally:
        ir.lower, memory._in_place_donor = real_lower, real_donor
        os.environ.pop("FUSE_ALL_REUSE_BUFFERS", None)
    return fn, programs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds; each times every variant")
    p.add_argument("--calls", type=int, default=10, help="calls per variant per round")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"     # each variant compiles (no graph from the cache)
    import torch
    torch.set_num_threads(args.threads)
    import workloads
    reason = env.register_fuse_all()
    if reason:
        raise SystemExit(reason)

    for name in args.workloads.split(","):
        instance = workloads.build(name, "cpu")
        torch._dynamo.reset()
        fns = {}
        expected = instance.step(instance.target)
        for variant in VARIANTS:
            fn, programs = compile_variant(instance, variant)
            got = instance.step(fn)
            torch.testing.assert_close(got, expected, atol=instance.tol * 10, rtol=instance.tol * 10)
            memory = [program_memory(prog) for prog in programs]
            fns[variant] = fn
            print(f"{name} {variant:>14}: {len(programs)} graph(s), allocated per call "
                  f"{sum(m[0] for m in memory) / 2**20:7.2f} MiB, peak live intermediates "
                  f"{max(m[1] for m in memory) / 2**20:7.2f} MiB", flush=True)
        times = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                start = time.perf_counter()
                for _ in range(args.calls):
                    instance.step(fns[variant])
                times[variant].append((time.perf_counter() - start) / args.calls * 1e3)
        base = statistics.median(times["pool+in_place"])
        for variant in VARIANTS:
            med = statistics.median(times[variant])
            print(f"{name} {variant:>14}: median {med:8.3f} ms  min {min(times[variant]):8.3f} ms  "
                  f"({med / base:.3f}x of pool+in_place)", flush=True)


if __name__ == "__main__":
    main()
