"""Where a small compiled CUDA call spends its host time: fuse_all vs Inductor vs eager on cos->sin over
1e4 floats (host loop timing, no L2 flush), which launcher each kernel uses, and a cProfile of fuse_all's call.
    source bench/gpu_env.sh && python bench/gpu_percall_probe.py"""
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


if __name__ == "__main__":
    main()
