"""H200 probe: does cuDNN's fused convolution epilogue pay for inference BatchNorm (+ residual) + ReLU?

    source bench/gpu_env.sh && python bench/gpu_conv_epilogue_probe.py

In an inference graph a ResNet block is convolution -> BatchNorm (running statistics: a per-channel affine)
-> [+ residual] -> ReLU. Both fuse_all and Inductor run the convolution in cuDNN and the rest as one
generated pointwise kernel, which reads and writes the activation once more. With the BatchNorm folded into
the weights (w * a[co], a = gamma / sqrt(var + eps)) and a bias (beta - mean * a), the rest is cuDNN's own
epilogue: `aten.cudnn_convolution_relu` / `aten.cudnn_convolution_add_relu` (a cuDNN fused operation graph
where an engine supports it, else ATen's fallback: convolution, then add and relu as separate kernels).
Per ResNet50 shape, channels-last float32 (TF32 convolutions, torch's default), µs per call
(triton.testing.do_bench median):
  conv      the convolution alone (cuDNN, as both backends call it)
  +epi      conv + a Triton kernel for scale/shift [+ residual] + ReLU (what the generated kernel costs)
  fused     cudnn_convolution_[add_]relu with folded weights
  fold      folding the weights and bias (per call: parameters are graph inputs)
and the fused result's error against float64, relative to the unfused path's.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def scale_shift_relu(y_ptr, a_ptr, b_ptr, z_ptr, out_ptr, n, C: tl.constexpr, RESIDUAL: tl.constexpr,
                     BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    c = i % C
    v = tl.load(y_ptr + i, mask) * tl.load(a_ptr + c, mask) + tl.load(b_ptr + c, mask)
    if RESIDUAL:
        v += tl.load(z_ptr + i, mask)
    tl.store(out_ptr + i, tl.maximum(v, 0.0), mask)


# (Cin, H, W, Cout, kernel, stride, residual): ResNet50's distinct convolutions, a bottleneck's last 1x1
# conv carrying the residual add
SHAPES = [(64, 56, 56, 64, 1, 1, False), (64, 56, 56, 64, 3, 1, False), (64, 56, 56, 256, 1, 1, True),
          (256, 56, 56, 64, 1, 1, False), (128, 28, 28, 128, 3, 1, False), (128, 28, 28, 512, 1, 1, True),
          (512, 28, 28, 128, 1, 1, False), (256, 14, 14, 256, 3, 1, False), (256, 14, 14, 1024, 1, 1, True),
          (1024, 14, 14, 256, 1, 1, False), (512, 7, 7, 512, 3, 1, False), (512, 7, 7, 2048, 1, 1, True),
          (2048, 7, 7, 512, 1, 1, False)]


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200) * 1000


def probe(batch: int, cin, h, w, cout, k, stride, residual) -> str:
    cl = torch.channels_last
    x = torch.randn(batch, cin, h, w, device="cuda").to(memory_format=cl)
    weight = (torch.randn(cout, cin, k, k, device="cuda") / (cin * k * k) ** 0.5).to(memory_format=cl)
    gamma, beta = torch.rand(cout, device="cuda") + 0.5, torch.randn(cout, device="cuda")
    mean, var = torch.randn(cout, device="cuda") * 0.1, torch.rand(cout, device="cuda") + 0.5
    eps, pad = 1e-5, k // 2
    out_h = (h + 2 * pad - k) // stride + 1
    z = torch.randn(batch, cout, out_h, out_h, device="cuda").to(memory_format=cl) if residual else None
    scale = gamma * torch.rsqrt(var + eps)
    shift = beta - mean * scale
    out = torch.empty(batch, cout, out_h, out_h, device="cuda").to(memory_format=cl)
    n = out.numel()

    def conv():
        return F.conv2d(x, weight, None, stride, pad)

    def unfused():
        y = conv()
        scale_shift_relu[(triton.cdiv(n, 1024),)](y, scale, shift, z if residual else y, out, n, cout, residual,
                                                   1024, num_warps=4)
        return out

    def fold():
        s = gamma * torch.rsqrt(var + eps)
        return (weight * s.view(-1, 1, 1, 1)), beta - mean * s

    folded_w, folded_b = fold()

    def fused():
        if residual:
            return torch.cudnn_convolution_add_relu(x, folded_w, z, 1.0, folded_b, (stride, stride), (pad, pad),
                                                    (1, 1), 1)
        return torch.cudnn_convolution_relu(x, folded_w, folded_b, (stride, stride), (pad, pad), (1, 1), 1)

    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):   # error check in full float32
        ref = F.batch_norm(F.conv2d(x.double(), weight.double(), None, stride, pad), mean.double(), var.double(),
                           gamma.double(), beta.double(), False, 0.0, eps)
        if residual:
            ref = ref + z.double()
        ref = ref.relu()
        err_unfused = (unfused().double() - ref).abs().max().item()
        err_fused = (fused().double() - ref).abs().max().item()
    t_conv, t_unfused, t_fused, t_fold = bench(conv), bench(unfused), bench(fused), bench(fold)
    return (f"| {batch} | {cin}x{h}x{w} -> {cout} k{k}{' +res' if residual else ''} | {t_conv:.1f} | {t_unfused:.1f} | "
            f"{t_fused:.1f} | {t_fold:.1f} | {(t_fused + t_fold) / t_unfused:.2f} | "
            f"{err_fused / max(err_unfused, 1e-30):.2f} |")


def main() -> None:
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print("| batch | shape | conv us | conv+epi us | fused us | fold us | (fused+fold)/(conv+epi) | err fused/unfused |")
    print("|---|---|---|---|---|---|---|---|")
    for batch in (64, 1):
        for shape in SHAPES:
            try:
                print(probe(batch, *shape), flush=True)
            except Exception as e:   # an op this torch build lacks: say so and go on
                print(f"| {batch} | {shape} | failed: {type(e).__name__}: {str(e)[:120]} |", flush=True)


if __name__ == "__main__":
    main()
