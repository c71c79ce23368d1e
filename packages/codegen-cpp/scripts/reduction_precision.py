"""Error of fused float32 reductions against float64, next to eager's and Inductor's (issue 9, item 4).

    python packages/codegen-cpp/scripts/reduction_precision.py [--sizes 1e6,1e7] [--inductor] [--time]

Each program is run on random float32 inputs by eager, fuse_all (C++ codegen) and optionally Inductor;
the reference is the same program on the inputs converted to float64. Printed: max |result - ref64| of
each, and the ratio fuse_all / eager. `--time` adds best-of-N times of fuse_all and eager.
"""
from __future__ import annotations

import argparse
import time

import torch

PROGRAMS = {
    "sum(x*1.5+0.25)": lambda x: (x * 1.5 + 0.25).sum(),
    "sum(exp(x/4))": lambda x: torch.exp(x / 4).sum(),
    "mean(x^2)": lambda x: (x * x).mean(),
    "var(x+3)": lambda x: (x + 3).var(),
    "rows.sum(1)": lambda x: (x.view(64, -1) + 1).sum(1),                  # 64 long rows
    "cols.sum(0)": lambda x: (x.view(-1, 64) + 1).sum(0),                  # 64 long columns (tiled)
    "transposed.sum(0)": lambda x: (x.view(64, -1).t() + 1).sum(0),        # 64 long rows, read transposed
    "2d.sum()": lambda x: (x.view(-1, 64).t() * 2 + 1).sum(),              # a full sum over two dims
    "short_inner.sum()": lambda x: (x.view(4, -1).t() * 2 + 1).sum(),      # innermost reduction dim: 4
}


def best(fn, repeat=7):
    fn()
    t = float("inf")
    for _ in range(repeat):
        s = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - s)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="557700,5e6,1e7")
    ap.add_argument("--programs", default=",".join(PROGRAMS))
    ap.add_argument("--inductor", action="store_true")
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    for size in [int(float(s)) for s in args.sizes.split(",")]:
        size -= size % 64
        x = torch.randn(size)
        for name in args.programs.split(","):
            fn = PROGRAMS[name]
            ref = fn(x.double())
            err = lambda out: (out.double() - ref).abs().max().item()
            torch._dynamo.reset()
            fa = torch.compile(fn, backend="fuse_all")
            line = f"{name:22s} n={size:>10d}  |ref|={ref.abs().max().item():10.4g}  eager {err(fn(x)):9.3g}" \
                   f"  fuse_all {err(fa(x)):9.3g} ({err(fa(x)) / max(err(fn(x)), 1e-30):7.1f}x)"
            if args.inductor:
                ind = torch.compile(fn, backend="inductor")
                line += f"  inductor {err(ind(x)):9.3g}"
            if args.time:
                line += f"  time fuse_all {best(lambda: fa(x)) * 1e3:8.3f} ms  eager {best(lambda: fn(x)) * 1e3:8.3f} ms"
            print(line, flush=True)


if __name__ == "__main__":
    main()
