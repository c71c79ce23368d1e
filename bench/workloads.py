"""The benchmark workloads, named as in anchors-h200.md.

A workload builds an `Instance`: the callable torch.compile wraps (`target`), its inputs, and `step`, one
iteration with any version of the target (eager or compiled) that returns what is compared with eager.
Inference runs under `torch.no_grad()` (eval mode, as served; without it AOTAutograd would build a
forward graph that saves activations for a backward nobody runs). Training is one forward + loss +
backward step with the gradients reset first (no optimizer step, as in the anchors).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F


@dataclass
class Instance:
    target: Callable[..., Any]
    inputs: tuple
    step: Callable[[Callable[..., Any]], Any]
    min_bytes: int | None = None     # memory-bound workloads: each input read once, each output written once
    tol: float = 1e-5                # see compare.py: atol = rtol = tol, atol scaled by the reference's size
    loss_only: bool = False          # dropout makes everything but the loss's rough value incomparable
    reset: Callable[[], None] = lambda: None   # back to the state of build() (BatchNorm running stats)
    # the step once more in float64 (eager; the model returned to float32 after): what the check judges a
    # result against when it differs from eager's float32 by more than `tol` (compare.py)
    float64_step: Callable[[], Any] | None = None


def _inference(target, inputs, **kw) -> Instance:
    def step(fn):
        with torch.no_grad():
            return fn(*inputs)
    return Instance(target, inputs, step, **kw)


def _training(model: torch.nn.Module, target, inputs, loss_of_output=None, **kw) -> Instance:
    """`target(*inputs)` is the loss, or with `loss_of_output` the model's output that gives it."""
    params = [p for p in model.parameters() if p.requires_grad]
    buffers = list(model.buffers())
    initial = [b.detach().clone() for b in buffers]

    def reset():
        with torch.no_grad():
            for b, value in zip(buffers, initial):
                b.copy_(value)

    def step(fn, args=inputs):
        for p in params:
            p.grad = None
        loss = fn(*args) if loss_of_output is None else loss_of_output(fn(*args))
        loss.backward()
        # BatchNorm's running stats change every step; compare them too (cheap clones; tiny tensors)
        return [loss.detach()] + [p.grad for p in params] + [b.detach().clone() for b in buffers]

    def float64_step():
        floats = [t for t in params + buffers if t.is_floating_point()]
        _retype(floats, torch.float64)      # in place (`.data`): Module.double() would replace the buffers
        try:
            reset()
            return step(target, tuple(x.double() if x.is_floating_point() else x for x in inputs))
        finally:
            for p in params:
                p.grad = None
            _retype(floats, torch.float32)  # exact: every value came from float32
            reset()
    if not kw.get("loss_only"):        # with dropout only the loss's rough value compares
        kw["float64_step"] = float64_step
    return Instance(target, inputs, step, reset=reset, **kw)


def _retype(tensors: list, dtype: torch.dtype) -> None:
    with torch.no_grad():
        for t in tensors:
            t.data = t.data.to(dtype)


# ------------------------------------------------------------------------------------------ micro kernels
def pw_cos_sin(device: str, n: int) -> Instance:
    x = torch.randn(n, device=device)
    return _inference(lambda x: torch.sin(torch.cos(x)), (x,), min_bytes=2 * 4 * n)


def softmax(device: str, rows: int, cols: int) -> Instance:
    x = torch.randn(rows, cols, device=device)
    return _inference(lambda x: torch.softmax(x, dim=-1), (x,), min_bytes=2 * 4 * rows * cols)


def add_layernorm_gelu(device: str, rows: int, hidden: int) -> Instance:
    ln = torch.nn.LayerNorm(hidden, device=device)
    x, y = torch.randn(rows, hidden, device=device), torch.randn(rows, hidden, device=device)
    # x, y and the output, plus the layer norm's weight and bias (6 KB, counted for honesty)
    return _inference(lambda x, y: F.gelu(ln(x + y)), (x, y), min_bytes=4 * (3 * rows * hidden + 2 * hidden))


def gelu_tanh(device: str, rows: int, cols: int) -> Instance:
    x = torch.randn(rows, cols, device=device)
    return _inference(lambda x: F.gelu(x, approximate="tanh"), (x,), min_bytes=2 * 4 * rows * cols)


def layernorm(device: str, rows: int, hidden: int) -> Instance:
    ln = torch.nn.LayerNorm(hidden, device=device)
    x = torch.randn(rows, hidden, device=device)
    return _inference(lambda x: ln(x), (x,), min_bytes=4 * (2 * rows * hidden + 2 * hidden))


def causal_attention(device: str, batch: int, heads: int, seq: int, head_dim: int) -> Instance:
    """The body of a decoder's attention written out as GPT-2 does (scores, causal mask with the dtype's
    minimum, softmax, weighted sum): two matmuls and the fused scale/mask/softmax between them."""
    q, k, v = (torch.randn(batch, heads, seq, head_dim, device=device) for _ in range(3))
    causal = torch.tril(torch.ones(seq, seq, dtype=torch.bool, device=device))

    def attention(q, k, v):
        scores = q @ k.transpose(-1, -2) / head_dim ** 0.5
        scores = torch.where(causal, scores, torch.finfo(scores.dtype).min)
        return torch.softmax(scores, dim=-1) @ v
    return _inference(attention, (q, k, v), tol=1e-4)


# ------------------------------------------------------------------------- layouts that disagree (tiling)
# Kernels whose operands walk different dims contiguously (fuse_all_ir.tiling): a 2-D tile keeps every
# operand's reads whole. min_bytes: each input read once, the output written once.
def transposed_add(device: str, n: int) -> Instance:
    x, y = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    return _inference(lambda x, y: x.t() + y, (x, y), min_bytes=3 * 4 * n * n)


def permuted_copy(device: str, n: int, c: int, h: int, w: int) -> Instance:
    """NCHW -> NHWC as a copy (what a channels-last conversion does)."""
    x = torch.randn(n, c, h, w, device=device)
    return _inference(lambda x: x.permute(0, 2, 3, 1).contiguous(), (x,), min_bytes=2 * 4 * n * c * h * w)


def weight_layout_copy(device: str, out_ch: int, in_ch: int, k: int, to_channels_last: bool) -> Instance:
    """A k x k convolution weight converted NCHW -> channels-last (what a channels-last graph does with a
    parameter before each convolution) or back (its gradient, for the parameter's layout): one side walks
    runs of only k*k elements."""
    w = torch.randn(out_ch, in_ch, k, k, device=device)
    if to_channels_last:
        return _inference(lambda w: w.contiguous(memory_format=torch.channels_last), (w,), min_bytes=2 * 4 * w.numel())
    return _inference(lambda w: w.contiguous(), (w.contiguous(memory_format=torch.channels_last),),
                      min_bytes=2 * 4 * w.numel())


def sum_dim0(device: str, rows: int, cols: int) -> Instance:
    x = torch.randn(rows, cols, device=device)
    # a sum of `rows` terms: float32 rounding grows with sqrt(rows) relative to the column's scale
    return _inference(lambda x: x.sum(0), (x,), min_bytes=4 * (rows * cols + cols), tol=1e-4)


def layernorm_over_channels(device: str, n: int, c: int, h: int, w: int) -> Instance:
    """LayerNorm over the channels of an NCHW tensor (as ConvNeXt-style blocks do): the reduction walks C
    with a stride of H*W, the contiguous dim is W."""
    ln = torch.nn.LayerNorm(c, device=device)
    x = torch.randn(n, c, h, w, device=device)
    return _inference(lambda x: ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2), (x,),
                      min_bytes=4 * (2 * n * c * h * w + 2 * c), tol=1e-4)


def batchnorm_channels_last(device: str, n: int, c: int, h: int, w: int) -> Instance:
    """Training-mode BatchNorm statistics on a channels-last tensor: per channel over N*H*W, C contiguous."""
    weight, bias = torch.randn(c, device=device), torch.randn(c, device=device)
    x = torch.randn(n, c, h, w, device=device).to(memory_format=torch.channels_last)
    return _inference(lambda x: F.batch_norm(x, None, None, weight, bias, training=True), (x,),
                      min_bytes=4 * (2 * n * c * h * w + 2 * c), tol=1e-4)


def batchnorm_nchw(device: str, n: int, c: int, h: int, w: int) -> Instance:
    """Training-mode BatchNorm statistics on an NCHW tensor: per channel over N*H*W, few long rows (H*W
    contiguous, N strided)."""
    weight, bias = torch.randn(c, device=device), torch.randn(c, device=device)
    x = torch.randn(n, c, h, w, device=device)
    return _inference(lambda x: F.batch_norm(x, None, None, weight, bias, training=True), (x,),
                      min_bytes=4 * (2 * n * c * h * w + 2 * c), tol=1e-4)


def train_pool_stem(device: str, n: int, c: int, size: int, channels_last: bool = False) -> Instance:
    """ResNet's stem after conv1, one training step: BatchNorm, ReLU, max pool 3x3/2 pad 1 (forward: values
    and indices; backward: the gather of max_pool2d_with_indices_backward with ReLU's and BatchNorm's
    backward). Issue 11: ATen's max pool backward alone was 0.29 ms of train_resnet50_32x224's step."""
    bn = torch.nn.BatchNorm2d(c).to(device).train()
    x = torch.randn(n, c, size, size, device=device)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_()

    def loss(x):
        return F.max_pool2d(F.relu(bn(x)), 3, 2, 1).square().mean()
    return _training(bn, loss, (x,), tol=1e-4)


def sum_all(device: str, numel: int) -> Instance:
    x = torch.randn(numel, device=device)
    return _inference(lambda x: x.sum(), (x,), min_bytes=4 * numel, tol=1e-4)


# ------------------------------------------------------------------------------------------------- models
# Deep nets with random weights: float32 rounding differs wherever a compiler reorders a reduction or fuses
# (e.g. batch norm folded into one multiply-add), and the differences grow through ~50-100 layers. 1e-3 of
# the output's scale is ~1e4 float32 ulps; a real bug (wrong index, missing op) is off by O(1).
MODEL_TOL = 1e-3


def resnet50(device: str, batch: int, channels: int, height: int, width: int) -> Instance:
    import torchvision
    model = torchvision.models.resnet50(weights=None).eval().to(device)
    x = torch.randn(batch, channels, height, width, device=device)
    return _inference(model, (x,), tol=MODEL_TOL)


def resnext101(device: str, batch: int, channels: int, height: int, width: int) -> Instance:
    import timm
    model = timm.create_model("resnext101_32x8d", pretrained=False, num_classes=2).eval().to(device)
    x = torch.randn(batch, channels, height, width, device=device)
    return _inference(model, (x,), tol=MODEL_TOL)


def _bert(device: str, batch: int, seq: int, train: bool):
    from transformers import BertConfig, BertModel
    model = BertModel(BertConfig()).to(device).train(train)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=device)
    mask = torch.ones(batch, seq, dtype=torch.long, device=device)
    types = torch.zeros(batch, seq, dtype=torch.long, device=device)
    return model, (ids, mask, types)


def bert(device: str, batch: int, seq: int) -> Instance:
    model, inputs = _bert(device, batch, seq, train=False)

    def forward(ids, mask, types):
        return model(input_ids=ids, attention_mask=mask, token_type_ids=types)
    return _inference(forward, inputs, tol=MODEL_TOL)


def resnet50_channels_last(device: str, batch: int, size: int) -> Instance:
    import torchvision
    model = torchvision.models.resnet50(weights=None).eval().to(device, memory_format=torch.channels_last)
    x = torch.randn(batch, 3, size, size, device=device).to(memory_format=torch.channels_last)
    return _inference(model, (x,), tol=MODEL_TOL)


def mobilenet_v2(device: str, batch: int, size: int) -> Instance:
    """Inverted residuals: 1x1 expand, 3x3 depthwise, 1x1 project, ReLU6, BatchNorm (folded in eval)."""
    import torchvision
    model = torchvision.models.mobilenet_v2(weights=None).eval().to(device)
    return _inference(model, (torch.randn(batch, 3, size, size, device=device),), tol=MODEL_TOL)


def mobilenet_v3_small(device: str, batch: int, size: int) -> Instance:
    """Depthwise convolutions with squeeze-and-excitation (a mean, two 1x1s, hardsigmoid) and hardswish."""
    import torchvision
    model = torchvision.models.mobilenet_v3_small(weights=None).eval().to(device)
    return _inference(model, (torch.randn(batch, 3, size, size, device=device),), tol=MODEL_TOL)


def gpt2(device: str, batch: int, seq: int) -> Instance:
    """Decoder-only (GPT-2 small config, random weights): causal mask, tanh GELU (`gelu_new`), pre-LN."""
    from transformers import GPT2Config, GPT2Model
    model = GPT2Model(GPT2Config()).to(device).eval()
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device=device)

    def forward(ids):
        return model(input_ids=ids, use_cache=False).last_hidden_state
    return _inference(forward, (ids,), tol=MODEL_TOL)


def vit_tiny(device: str, batch: int, size: int) -> Instance:
    """An encoder on image patches (timm's ViT-Tiny/16, random weights): erf GELU, LayerNorm, attention."""
    import timm
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=size).eval().to(device)
    return _inference(model, (torch.randn(batch, 3, size, size, device=device),), tol=MODEL_TOL)


def train_resnet50(device: str, batch: int, size: int, tol: float = MODEL_TOL) -> Instance:
    import torchvision
    model = torchvision.models.resnet50(weights=None).train().to(device)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)

    def loss(x, y):
        return F.cross_entropy(model(x), y)
    return _training(model, loss, (x, y), tol=tol)


def ddp_train_resnet50(device: str, batch: int, size: int) -> Instance:
    """ResNet50 training step through DistributedDataParallel with world size 1 (NCCL on CUDA, gloo on
    CPU): the target torch.compile wraps is the DDP module (`torch.compile(DDP(model))`), so Dynamo's
    DDPOptimizer splits the graph at DDP's 25 MiB gradient buckets and DDP all-reduces each bucket."""
    import torchvision
    from torch.nn.parallel import DistributedDataParallel
    _init_single_process_group(device)
    model = torchvision.models.resnet50(weights=None).train().to(device)
    ddp = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if device == "cuda" else None)
    x = torch.randn(batch, 3, size, size, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    return _training(model, ddp, (x,), loss_of_output=lambda logits: F.cross_entropy(logits, y), tol=MODEL_TOL)


def _init_single_process_group(device: str) -> None:
    import socket

    import torch.distributed as dist
    if dist.is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1)


def train_bert(device: str, batch: int, seq: int) -> Instance:
    # default config, dropout on (as trained): compiled dropout draws other random numbers than eager, so
    # only the loss's rough value is comparable here; tests/training checks gradients with dropout off
    model, inputs = _bert(device, batch, seq, train=True)

    def loss(ids, mask, types):
        hidden = model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        return hidden.pow(2).mean()
    return _training(model, loss, inputs, tol=2e-2, loss_only=True)


def variance(device: str, rows: int, cols: int, dim: int) -> Instance:
    """torch.var over one dim of a (rows, cols) tensor: dim 1 walks contiguous rows, dim 0 strided columns.
    Eager's CPU kernel accumulates a float32 variance in double (so does fuse_all's on CPU)."""
    x = torch.randn(rows, cols, device=device) + 3.0
    kept = cols if dim == 0 else rows
    return _inference(lambda x: x.var(dim), (x,), min_bytes=4 * (rows * cols + kept))


# ---------------------------------------------------------------- float16/bfloat16 (CPU cost of rounding)
# Eager rounds every float16/bfloat16 ATen op's result; so does fuse_all (fuse_all_ir.rounding): these rows
# measure what the rounding costs in fused kernels (memory traffic halves, the compute stays float32).
_HALF = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def half_chain(device: str, n: int, dtype: str) -> Instance:
    """Eight pointwise ATen ops (six rounded results in a narrow dtype: abs of a rounded value is exact)."""
    dt = _HALF[dtype]
    x, y = torch.randn(n, device=device, dtype=dt), torch.randn(n, device=device, dtype=dt)
    return _inference(lambda x, y: (torch.sigmoid(x * y + x) * (x - y).abs() + 1) * 0.5, (x, y),
                      min_bytes=3 * dt.itemsize * n, tol=1e-2 if dt.itemsize == 2 else 1e-5)


def half_softmax(device: str, rows: int, cols: int, dtype: str) -> Instance:
    dt = _HALF[dtype]
    x = torch.randn(rows, cols, device=device, dtype=dt)
    return _inference(lambda x: torch.softmax(x * 0.5 + 1, dim=-1), (x,), min_bytes=2 * dt.itemsize * rows * cols,
                      tol=1e-2 if dt.itemsize == 2 else 1e-5)


def half_add_layernorm_gelu(device: str, rows: int, hidden: int, dtype: str) -> Instance:
    dt = _HALF[dtype]
    ln = torch.nn.LayerNorm(hidden, device=device, dtype=dt)
    x, y = torch.randn(rows, hidden, device=device, dtype=dt), torch.randn(rows, hidden, device=device, dtype=dt)
    return _inference(lambda x, y: F.gelu(ln(x + y)), (x, y), min_bytes=dt.itemsize * (3 * rows * hidden + 2 * hidden),
                      tol=2e-2 if dt.itemsize == 2 else 1e-5)


P = functools.partial
WORKLOADS: dict[str, Callable[[str], Instance]] = {
    "pw_cos_sin_1e4": P(pw_cos_sin, n=10**4),
    "pw_cos_sin_1e7": P(pw_cos_sin, n=10**7),
    "pw_cos_sin_2e28": P(pw_cos_sin, n=2**28),      # 2^28 floats (1 GiB), as in the anchors' GB/s
    "softmax_4096x4096": P(softmax, rows=4096, cols=4096),
    "softmax_16384x4096": P(softmax, rows=16384, cols=4096),
    "add_layernorm_gelu_4096x768": P(add_layernorm_gelu, rows=4096, hidden=768),
    "gelu_tanh_4096x3072": P(gelu_tanh, rows=4096, cols=3072),
    "layernorm_4096x768": P(layernorm, rows=4096, hidden=768),
    "causal_attention_1x12x256x64": P(causal_attention, batch=1, heads=12, seq=256, head_dim=64),
    # 256 MB per tensor on the GPU (issue 11), a few MB to a few tens of MB on CPU (issue 17)
    "transposed_add_1024": P(transposed_add, n=1024),
    "transposed_add_4096": P(transposed_add, n=4096),
    "transposed_add_8192": P(transposed_add, n=8192),
    "permuted_copy_8x64x128x128": P(permuted_copy, n=8, c=64, h=128, w=128),
    "permuted_copy_64x256x64x64": P(permuted_copy, n=64, c=256, h=64, w=64),
    # ResNet-50's largest 3 x 3 weight (9.4 MB: in L2) and a 302 MB one, both ways
    **{f"weight_to_{side}_{o}x{i}x3x3": P(weight_layout_copy, out_ch=o, in_ch=i, k=3, to_channels_last=side == "cl")
       for side in ("cl", "nchw") for o, i in ((512, 512), (4096, 2048))},
    "sum_dim0_4096x4096": P(sum_dim0, rows=4096, cols=4096),
    "sum_dim0_8192x8192": P(sum_dim0, rows=8192, cols=8192),
    "layernorm_channels_8x64x64x64": P(layernorm_over_channels, n=8, c=64, h=64, w=64),
    "layernorm_channels_64x256x64x64": P(layernorm_over_channels, n=64, c=256, h=64, w=64),
    "batchnorm_channels_last_8x64x64x64": P(batchnorm_channels_last, n=8, c=64, h=64, w=64),
    "batchnorm_channels_last_64x256x64x64": P(batchnorm_channels_last, n=64, c=256, h=64, w=64),
    "batchnorm_nchw_32x64x112x112": P(batchnorm_nchw, n=32, c=64, h=112, w=112),
    "sum_all_2e26": P(sum_all, numel=2**26),
    "var_rows_4096x4096": P(variance, rows=4096, cols=4096, dim=1),
    "var_columns_4096x4096": P(variance, rows=4096, cols=4096, dim=0),
    "var_all_2e24": P(variance, rows=1, cols=2**24, dim=1),
    "train_pool_stem_32x64x112": P(train_pool_stem, n=32, c=64, size=112),
    "train_pool_stem_cl_32x64x112": P(train_pool_stem, n=32, c=64, size=112, channels_last=True),
    "resnet50_1x3x64x64": P(resnet50, batch=1, channels=3, height=64, width=64),
    "resnet50_cl_1x3x64x64": P(resnet50_channels_last, batch=1, size=64),
    "mobilenet_v2_1x3x128x128": P(mobilenet_v2, batch=1, size=128),
    "mobilenet_v3_small_1x3x128x128": P(mobilenet_v3_small, batch=1, size=128),
    "gpt2_1x64": P(gpt2, batch=1, seq=64),
    "vit_tiny_1x3x224x224": P(vit_tiny, batch=1, size=224),
    "resnet50_1x3x224x224": P(resnet50, batch=1, channels=3, height=224, width=224),
    "resnet50_64x3x224x224": P(resnet50, batch=64, channels=3, height=224, width=224),
    "bert_1x12": P(bert, batch=1, seq=12),
    "bert_32x128": P(bert, batch=32, seq=128),
    "resnext101_64x3x7x7": P(resnext101, batch=64, channels=3, height=7, width=7),
    "resnext101_32x3x224x224": P(resnext101, batch=32, channels=3, height=224, width=224),
    "train_resnet50_32x224": P(train_resnet50, batch=32, size=224),
    # a training conv row a CPU times in minutes. Random-weight ResNet50 with train-mode batch norm over 4x2x2
    # values in layer4: float32 gradients are a few % apart between any two correct runs (Inductor 5.5e-2 and
    # fuse_all 4-5e-2 from eager on CPU, 2026-12-01), so only an O(1) error is a mismatch here
    "train_resnet50_4x64": P(train_resnet50, batch=4, size=64, tol=0.2),
    "train_bert_8x128": P(train_bert, batch=8, seq=128),
    **{f"half_chain_{d}_4e6": P(half_chain, n=4 * 10**6, dtype=d) for d in _HALF},
    **{f"half_softmax_{d}_4096x1024": P(half_softmax, rows=4096, cols=1024, dtype=d) for d in _HALF},
    **{f"half_add_layernorm_gelu_{d}_4096x768": P(half_add_layernorm_gelu, rows=4096, hidden=768, dtype=d)
       for d in _HALF},
    "ddp_train_resnet50_32x224": P(ddp_train_resnet50, batch=32, size=224),   # issue 15; not in a default set
}

# issue 3 (CPU) and issues 4/5 (CUDA)
CPU_SET = ["pw_cos_sin_1e4", "pw_cos_sin_1e7", "softmax_4096x4096", "add_layernorm_gelu_4096x768",
           "resnet50_1x3x64x64", "bert_1x12"]
# issue 17: the wider CPU set (transformer families and conv nets; config-built, no downloads)
CPU_MODEL_SET = ["bert_1x12", "gpt2_1x64", "vit_tiny_1x3x224x224", "resnet50_1x3x64x64", "resnet50_cl_1x3x64x64",
                 "mobilenet_v2_1x3x128x128", "mobilenet_v3_small_1x3x128x128"]
CPU_MICRO_SET = ["pw_cos_sin_1e4", "softmax_16384x4096", "gelu_tanh_4096x3072", "layernorm_4096x768",
                 "add_layernorm_gelu_4096x768", "causal_attention_1x12x256x64"]
CUDA_SET = ["pw_cos_sin_1e4", "pw_cos_sin_2e28", "softmax_16384x4096", "add_layernorm_gelu_4096x768",
            "resnet50_1x3x64x64", "resnet50_1x3x224x224", "resnet50_64x3x224x224", "bert_1x12", "bert_32x128",
            "resnext101_64x3x7x7", "resnext101_32x3x224x224", "train_resnet50_32x224", "train_bert_8x128"]


# the cost of rounding float16/bfloat16 results (float32 rows as the reference)
CPU_HALF_SET = [f"half_{w}_{d}_{size}" for w, size in (("chain", "4e6"), ("softmax", "4096x1024"),
                                                       ("add_layernorm_gelu", "4096x768")) for d in _HALF]

TILING_CPU_SET = ["transposed_add_1024", "transposed_add_4096", "permuted_copy_8x64x128x128", "sum_dim0_4096x4096",
                  "layernorm_channels_8x64x64x64", "batchnorm_channels_last_8x64x64x64"]
TILING_CUDA_SET = ["transposed_add_8192", "permuted_copy_64x256x64x64", "weight_to_cl_4096x2048x3x3",
                   "weight_to_nchw_4096x2048x3x3", "sum_dim0_8192x8192",
                   "layernorm_channels_64x256x64x64", "batchnorm_channels_last_64x256x64x64"]


def build(name: str, device: str, seed: int = 0) -> Instance:
    if name not in WORKLOADS:
        raise KeyError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    torch.manual_seed(seed)
    return WORKLOADS[name](device)


NAMED_SETS = {"cpu": CPU_SET, "cpu_models": CPU_MODEL_SET, "cpu_micro": CPU_MICRO_SET, "cuda": CUDA_SET,
              "cpu_half": CPU_HALF_SET}


def expand(names: list[str]) -> list[str]:
    """Workload names, with a set's name (`cpu_models`, ...) standing for its workloads."""
    return [w for n in names for w in NAMED_SETS.get(n, [n])]


def default_set(device: str) -> list[str]:
    return list(CUDA_SET if device == "cuda" else CPU_SET)
