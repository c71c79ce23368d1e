"""Host cost of one cuDNN convolution by the way it is called (issue 11: resnet50_64x224 in default mode is
host-bound, and ~50 of its ~80 us of host time per convolution are ATen's convolution call).

    source bench/gpu_env.sh && python bench/gpu_conv_host_probe.py

Per ResNet-50 convolution shape at batch 1 on 7x7 images (the device work, a few us, stays below the host's
so the loop measures the host), channels-last float32: host us per call of a loop of calls (no sync inside)
for `F.conv2d`, `aten.convolution` (what Inductor and fuse-all call), `aten.cudnn_convolution` (the cuDNN
entry `_convolution` ends in, called directly), and cuDNN's fused `cudnn_convolution_relu` /
`cudnn_convolution_add_relu`; then the same at the real 64x56x56 size with a synchronize after each call
(host + device) as a check that the direct call runs the same kernels (device us from torch.profiler).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

aten = torch.ops.aten
CL = torch.channels_last
# (Cin, Cout, kernel, stride)
SHAPES = [(64, 64, 1, 1), (64, 64, 3, 1), (256, 64, 1, 1), (128, 128, 3, 2), (1024, 256, 1, 1), (512, 2048, 1, 1)]


def host_us(fn, n=3000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / n * 1e6


def variants(x, w, b, z, stride, pad):
    s, p, d = [stride, stride], [pad, pad], [1, 1]
    flags = (False, False, True)   # benchmark, deterministic, allow_tf32: torch's defaults
    return {
        "F.conv2d": lambda: F.conv2d(x, w, None, stride, pad),
        "aten.convolution": lambda: aten.convolution.default(x, w, None, s, p, d, False, [0, 0], 1),
        "aten.cudnn_convolution": lambda: aten.cudnn_convolution.default(x, w, p, s, d, 1, *flags),
        "torch.cudnn_convolution": lambda: torch.cudnn_convolution(x, w, p, s, d, 1, *flags),
        "cudnn_convolution_relu": lambda: aten.cudnn_convolution_relu.default(x, w, b, s, p, d, 1),
        "cudnn_convolution_add_relu": lambda: aten.cudnn_convolution_add_relu.default(x, w, z, 1.0, b, s, p, d, 1),
    }


def tensors(batch, size, cin, cout, k, stride):
    x = torch.randn(batch, cin, size, size, device="cuda").to(memory_format=CL)
    w = (torch.randn(cout, cin, k, k, device="cuda") / (cin * k * k) ** 0.5).to(memory_format=CL)
    b = torch.randn(cout, device="cuda")
    out = (size + 2 * (k // 2) - k) // stride + 1
    z = torch.randn(batch, cout, out, out, device="cuda").to(memory_format=CL)
    return x, w, b, z


def main() -> None:
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    names = list(variants(*tensors(1, 7, 8, 8, 1, 1), 1, 0))
    print("host us per call, batch 1, 7x7 (no sync in the loop)")
    print("| shape | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    with torch.no_grad():
        for cin, cout, k, stride in SHAPES:
            x, w, b, z = tensors(1, 7, cin, cout, k, stride)
            row = [f"{host_us(fn):.1f}" for fn in variants(x, w, b, z, stride, k // 2).values()]
            print(f"| {cin}->{cout} k{k} s{stride} | " + " | ".join(row) + " |", flush=True)
        print("\nsame kernels? batch 64, 56x56: device us per call (profiler) and max |difference| from aten.convolution")
        from torch.profiler import ProfilerActivity, profile
        for cin, cout, k, stride in SHAPES[:3]:
            x, w, b, z = tensors(64, 56, cin, cout, k, stride)
            fns = variants(x, w, b, z, stride, k // 2)
            ref = fns["aten.convolution"]()
            cells = []
            for name in ("aten.convolution", "aten.cudnn_convolution"):
                out = fns[name]()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        fns[name]()
                    torch.cuda.synchronize()
                device = sum(e.self_device_time_total for e in prof.key_averages()
                             if e.device_type.name == "CUDA") / 20
                kernels = sorted({e.key[:40] for e in prof.key_averages() if e.device_type.name == "CUDA"})
                cells.append(f"{name}: {device:.1f} us, strides {tuple(out.stride()) == tuple(ref.stride())}, "
                             f"diff {(out - ref).abs().max().item():.1e}, {kernels}")
            print(f"{cin}->{cout} k{k} s{stride}: " + " ; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
