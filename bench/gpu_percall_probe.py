"""Where a small compiled CUDA call spends its host time: fuse_all vs Inductor vs eager on cos->sin over
1e4 floats (host loop timing, no L2 flush), which launcher each kernel uses, and a cProfile of fuse_all's call;
then (`--stack`, issue 11) a BERT-like stack of tiny layers: per backend the host loop µs per call, do_bench
medians in default and reduce-overhead mode, device kernels and ATen calls per call (torch.profiler), and
host µs per kernel = (default − reduce-overhead) / kernels; fuse_all with buffer reuse on and off.
    source bench/gpu_env.sh && python bench/gpu_percall_probe.py [--stack-only] [--layers 12]"""
import cProfile
import logging
import pstats
import time

import torch

logging.basicConfig(level=logging.WARNING)


def per_call_us(fn, x, n=3000):
    for _ in range(100):
        fn(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e6


def main():
    import fuse_all
    x = torch.randn(10_000, device="cuda")
    fn = lambda t: torch.sin(torch.cos(t))  # noqa: E731
    compiled = {"eager": fn, "inductor": torch.compile(fn, backend="inductor"),
                "fuse_all": torch.compile(fn, backend="fuse_all")}
    for name, f in compiled.items():
        print(f"{name:9s} {per_call_us(f, x):8.2f} us/call")
    graph = fuse_all.compiled_graphs()[-1]
    from torch.profiler import ProfilerActivity, profile as torch_profile
    for name in ("inductor", "fuse_all"):
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(200):
                compiled[name](x)
            torch.cuda.synchronize()
        kernels = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
        for e in kernels:
            print(f"{name:9s} device {e.key[:60]:60s} calls {e.count:5d} avg {e.device_time:8.2f} us")
    import triton.testing
    for name in ("eager", "inductor", "fuse_all"):
        print(name, "do_bench ms", triton.testing.do_bench(lambda: compiled[name](x), return_mode="median"))
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(2000):
        compiled["fuse_all"](x)
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(22)


def stack_probe(layers: int) -> None:
    import os
    import sys

    import triton.testing
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from env import temporary_environ
    from host_percall import tiny_stack
    from launches import count_launches, host_us_per_kernel
    torch.manual_seed(0)
    model, x = tiny_stack(layers).cuda(), torch.randn(1, 12, 32, device="cuda")
    with torch.no_grad():
        expected = model(x)
    print(f"\n== tiny stack: {layers} layers, hidden 32, 1x12 tokens")
    rows = [("eager", None, None, {}), ("inductor", "inductor", "reduce-overhead", {}),
            ("fuse_all", "fuse_all", "reduce-overhead", {}),
            ("fuse_all no-reuse", "fuse_all", "reduce-overhead", {"FUSE_ALL_REUSE_BUFFERS": "0"})]
    for name, backend, ro_mode, env in rows:
        with temporary_environ(env):
            torch._dynamo.reset()
            fn = model if backend is None else torch.compile(model, backend=backend)
            with torch.no_grad():
                torch.testing.assert_close(fn(x), expected, rtol=1e-4, atol=1e-4)
                host = per_call_us(fn, x, n=1000)
                default = triton.testing.do_bench(lambda: fn(x), return_mode="median")
                counts = count_launches(lambda: fn(x), "cuda")
                ro = None
                if ro_mode:
                    torch._dynamo.reset()
                    graphed = torch.compile(model, backend=backend, mode=ro_mode)
                    for _ in range(3):
                        graphed(x)

                    def replay():
                        torch.compiler.cudagraph_mark_step_begin()
                        return graphed(x)
                    ro = triton.testing.do_bench(replay, return_mode="median")
            per_kernel = host_us_per_kernel(default, ro, counts["kernels"])
            print(f"{name:18s} host loop {host:8.1f} us/call  do_bench {default * 1e3:8.1f} us  "
                  f"RO {ro * 1e3 if ro else float('nan'):8.1f} us  {counts['kernels']:4d} kernels  "
                  f"{counts['aten']:4d} ATen calls  host/kernel "
                  f"{per_kernel if per_kernel is not None else float('nan'):6.2f} us")


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--stack-only", action="store_true")
    parser.add_argument("--layers", type=int, default=12)
    opts = parser.parse_args()
    if not opts.stack_only:
        main()
    stack_probe(opts.layers)
