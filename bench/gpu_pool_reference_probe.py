"""Which side of the channels-last pooling gradient mismatch on the GPU is wrong: torch's CUDA eager or
fuse_all's kernels? Prints one line per check (max abs error against CPU eager in float64, the reference):

* CUDA eager avg_pool2d / max_pool2d backward, NCHW and channels-last, padding 1 (ResNet's 3x3/2 stem pool).
  torch's channels-last avg_pool2d backward kernel drops the padding offset when it maps an input pixel to
  its windows (pytorch#188344; torch 2.11 has it): expected wrong there, right everywhere else;
* fuse_all (Triton) on the same stem as tests/cuda/test_pooling_cuda.py, channels-last and NCHW.

    source bench/gpu_env.sh && python bench/gpu_pool_reference_probe.py      (about a minute on one H200)
    python bench/gpu_pool_reference_probe.py --cpu      # the script's logic, small, Triton's interpreter
"""
from __future__ import annotations

import os
import sys

CPU = "--cpu" in sys.argv
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import fuse_all  # noqa: E402

DEVICE = "cpu" if CPU else "cuda"
SHAPE = (2, 16, 32, 32) if CPU else (8, 64, 112, 112)
OUT = SHAPE[-1] // 2


def stem(x, w):
    y = x.relu()
    return F.max_pool2d(y, 3, 2, 1) * w + F.avg_pool2d(y, 3, 2, 1, count_include_pad=False)


def grads(fn, device, channels_last, x, w, g, dtype=None):
    """Gradients of fn at (x, w) with cotangent g, computed on `device` in `dtype` (default: x's)."""
    dtype = dtype or x.dtype
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    xx = torch.empty_like(x, device=device, dtype=dtype, memory_format=fmt).copy_(x).requires_grad_()
    ww = w.to(device, dtype, copy=True).requires_grad_()
    out = fn(xx, ww)
    out.backward(g.to(device, dtype).contiguous(memory_format=fmt) if g.dim() == 4 else g.to(device, dtype))
    return xx.grad.double().cpu(), ww.grad.double().cpu()


def error(got, want) -> str:
    return f"{(got - want).abs().max().item():.2e}"


def main() -> None:
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name() if not CPU else 'cpu (interpreter)'}")
    x = (torch.rand(SHAPE) * 6 - 3).round()            # ties in every window, as the test
    w = torch.randn(OUT)
    g = torch.randn(SHAPE[0], SHAPE[1], OUT, OUT)
    pools = {
        "avg_pool2d(3,2,1) exclude_pad": lambda x, w: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False) * w,
        "avg_pool2d(3,2,1) include_pad": lambda x, w: F.avg_pool2d(x, 3, 2, 1) * w,
        "avg_pool2d(2,2,0)": lambda x, w: F.avg_pool2d(x, 2, 2, 0) * w,
        "max_pool2d(3,2,1)": lambda x, w: F.max_pool2d(x.relu(), 3, 2, 1) * w,
    }
    for name, fn in pools.items():
        ref = grads(fn, "cpu", False, x, w, g, torch.float64)[0]
        line = [f"eager {DEVICE} {name}:"]
        for cl in (False, True):
            line.append(f"{'channels_last' if cl else 'nchw'} {error(grads(fn, DEVICE, cl, x, w, g)[0], ref)}")
        print(" ".join(line))
    ref = grads(stem, "cpu", False, x, w, g, torch.float64)
    compiled = torch.compile(stem, backend="fuse_all", options={"codegen": "triton", "fallback": False})
    for cl in (False, True):
        torch._dynamo.reset()
        got = grads(compiled, DEVICE, cl, x, w, g)
        eager = grads(stem, DEVICE, cl, x, w, g)
        print(f"stem {'channels_last' if cl else 'nchw'}: fuse_all dx {error(got[0], ref[0])} dw "
              f"{error(got[1], ref[1])}; {DEVICE} eager dx {error(eager[0], ref[0])} dw {error(eager[1], ref[1])} "
              f"(float32 against float64 on CPU)")
    graphs = fuse_all.compiled_graphs()
    print("fallbacks:", [r.fallback_reason for r in graphs if r.fallback_reason] or "none")


if __name__ == "__main__":
    main()
