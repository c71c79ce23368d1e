"""CPU µs per call of BatchNorm + ReLU + 3x3/2 max-pool over an NCHW input, in one process, taking turns:
fuse_all with and without the index-set splitting of the C++ inner loop (fuse_all_codegen_cpp.index_split),
Inductor and eager. On the shared machine the per-round ratios (same load) are what to read:

    python bench/bn_relu_pool_ab.py --size 112 --steps 10 --rounds 15

Each variant is compiled from its own code object with torch's AOTAutograd cache off, so "before" and
"after" really are two compilations of the same graph.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=32, help="input height and width (64 channels, batch 1)")
    p.add_argument("--steps", type=int, default=50, help="calls per block")
    p.add_argument("--rounds", type=int, default=15)
    a = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch._functorch.config
    import fuse_all  # noqa: F401  (registers the backend)
    import fuse_all_codegen_cpp.render as render
    torch.set_num_threads(1)
    torch._functorch.config.enable_autograd_cache = False

    m = torch.nn.Sequential(torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)).eval()
    with torch.no_grad():
        m[0].running_mean.normal_(), m[0].running_var.uniform_(0.5, 2.0), m[0].weight.normal_(), m[0].bias.normal_()
    x = torch.randn(1, 64, a.size, a.size)

    def fresh(tag: str):            # a new code object: Dynamo compiles it anew
        namespace = {"m": m}
        exec(compile("def f(x):\n    return m(x)\n", f"<{tag}>", "exec"), namespace)
        return namespace["f"]

    fns = {}
    kept = render.split_ranges, render.invariant_tests
    render.split_ranges = render.invariant_tests = lambda *args, **kwargs: None
    try:
        fns["fuse_all, loop not split"] = torch.compile(fresh("before"), backend="fuse_all", dynamic=False)
        with torch.no_grad():
            fns["fuse_all, loop not split"](x)
    finally:
        render.split_ranges, render.invariant_tests = kept
    fns["fuse_all"] = torch.compile(fresh("after"), backend="fuse_all", dynamic=False)
    fns["inductor"] = torch.compile(fresh("inductor"), backend="inductor", dynamic=False)
    fns["eager"] = m
    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for fn in fns.values():
            torch.testing.assert_close(fn(x), m(x))
        for _ in range(a.rounds):
            for name, fn in fns.items():
                start = time.process_time()
                for _ in range(a.steps):
                    fn(x)
                times[name].append((time.process_time() - start) / a.steps * 1e6)
    first = next(iter(times))
    for name, values in times.items():
        ratio = statistics.median(v / f for v, f in zip(values, times[first]))
        print(f"1x64x{a.size}x{a.size} {name:26s} median {statistics.median(values):8.1f} us CPU per call, "
              f"median per-round ratio to '{first}' {ratio:.3f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
