"""Whether a graph's convolutions should run channels-last: Inductor's layout-optimisation rules
(`GraphLowering.decide_layout_opt`, torch 2.11-2.14), ported so that every decision carries its reason.

* CPU with oneDNN: yes (its NHWC convolutions are much faster, depthwise ones above all), except for an
  inference graph without depthwise convolutions whose k x k weights are NCHW (parameters, unless
  `weight_layout_cache` keeps their converted copies): ATen copies each such weight to channels-last on
  every call, and for dense convolutions that costs more than the NHWC kernels save. torchvision
  ResNet-50, fp32, Intel Xeon VM (AVX-512, AMX), oneDNN 3.12, one thread, CPU time per call (in-process A/B):
  NCHW took 0.75x (1x3x64x64), 0.81x (1x3x224x224), 0.76x (4x3x112x112) and 1.01x (8x3x224x224) of the
  channels-last time; two threads, 1x3x64x64: 0.78x. MobileNetV2 (depthwise) 1x3x128x128: NCHW 1.20x.
* Elsewhere (cuDNN), not when convolutions are rare in the graph (fewer than one per 300 nodes), nor with
  dynamic shapes (a known slowdown, pytorch#102670). Then
  - inference: a flop-weighted estimate of the NHWC speed-up per kind of convolution (grouped with more
    than one input channel per group 1.358x slower; small-channel 0.783x, in>out-channel 0.725x, others
    0.823x of the NCHW time; Inductor's numbers, measured on torchbench's convolutions);
  - training: not with grouped convolutions of more than one input channel per group (up to 31x slower
    NHWC), nor with any convolution of at least twice as many input as output channels and a kernel wider
    than 1 (unet, CycleGAN), nor when every convolution has at most 64 input and output channels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_symbols

from .fx_values import tensor_of

aten = torch.ops.aten

_GROUPED_MULTIPLIER = 1.358
_DEFAULT_MULTIPLIER = 0.823
_IN_OUT_MULTIPLIER = 0.725
_SMALL_MULTIPLIER = 0.783
_NODES_PER_CONVOLUTION = 300


@dataclass(frozen=True)
class LayoutDecision:
    """`apply`: run the convolutions' activations channels-last; `reason`: one line saying why (not)."""
    apply: bool
    reason: str

    def __bool__(self) -> bool:
        return self.apply

    def __str__(self) -> str:
        return f"channels-last {'applied' if self.apply else 'not applied'}: {self.reason}"


def convolutions(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.convolution.default]


def _weight(conv: torch.fx.Node) -> torch.Tensor:
    return tensor_of(conv.args[1])


def _is_grouped(conv: torch.fx.Node) -> bool:
    return conv.args[-1] > 1 and _weight(conv).size(1) > 1


def _is_in_out_channel(conv: torch.fx.Node) -> bool:
    w = _weight(conv)
    return w.size(0) * 2 <= w.size(1) and w.size(2) > 1


def _is_depthwise(conv: torch.fx.Node) -> bool:
    """One input channel per group, more than one group (with dynamic shapes `groups` is a symbol, the input's
    channel count: a convolution of a 1-channel input has no symbol there)."""
    groups, w = conv.args[-1], _weight(conv)
    if free_symbols(w) or w.size(1) != 1:
        return False
    return isinstance(groups, torch.fx.Node) or groups > 1


def _weight_copied_per_call(conv: torch.fx.Node, weights_kept: bool) -> bool:
    """ATen converts this convolution's weight to channels-last on every call of a channels-last graph: a k x k
    kernel (1 x 1 ones are channels-last in either layout) that is not channels-last already, unless it is a
    graph input (a parameter) whose converted copy the weight cache keeps."""
    w, node = _weight(conv), conv.args[1]
    if w is None or w.dim() != 4 or free_symbols(w) or w.is_contiguous(memory_format=torch.channels_last):
        return False
    return not (weights_kept and isinstance(node, torch.fx.Node) and node.op == "placeholder")


def _is_small_channel(conv: torch.fx.Node) -> bool:
    w = _weight(conv)
    return w.size(0) <= 64 and w.size(1) <= 64


def convolution_flops(conv: torch.fx.Node) -> int | None:
    """2 x batch x weight elements x output positions (input positions for a transposed convolution), as
    torch's flop counter counts them; None without shapes."""
    x, w, out = tensor_of(conv.args[0]), _weight(conv), tensor_of(conv)
    if x is None or w is None or out is None:
        return None
    positions = x.shape[2:] if conv.args[6] else out.shape[2:]
    return 2 * int(x.shape[0]) * math.prod(int(s) for s in w.shape) * math.prod(int(s) for s in positions)


def _kind(conv: torch.fx.Node) -> str:
    if _is_grouped(conv):
        return "grouped"
    if _is_small_channel(conv):
        return "small"
    if _is_in_out_channel(conv):
        return "in_out"
    return "default"


def decide_channels_last(gm: torch.fx.GraphModule, is_inference: bool,
                         weights_kept: bool = False) -> LayoutDecision:
    """Inductor's rules (module docstring) for this graph; a graph without shapes on its convolutions'
    operands is left as traced. `weights_kept`: the converted weights are kept across calls (CPU
    inference with `weight_layout_cache`), so channels-last costs no weight copy per call."""
    convs = convolutions(gm)
    if not convs:
        return LayoutDecision(False, "no convolutions")
    operands = [tensor_of(conv.args[i]) for conv in convs for i in (0, 1)]
    if any(v is None for v in operands):
        return LayoutDecision(False, "a convolution operand has no traced shape")
    if (torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()
            and all(v.device.type == "cpu" for v in operands)):
        if is_inference:
            refused = _cpu_weight_copies(convs, weights_kept)
            if refused is not None:
                return refused
        return LayoutDecision(True, f"{len(convs)} CPU convolutions: oneDNN runs channels-last faster")
    nodes = len(gm.graph.nodes)
    if nodes >= _NODES_PER_CONVOLUTION * len(convs):
        return LayoutDecision(False, f"only {len(convs)} convolutions among {nodes} nodes")
    if any(free_symbols(v) for v in operands):
        return LayoutDecision(False, "dynamic shapes (channels-last is slower with them, pytorch#102670)")
    if is_inference:
        return _inference_estimate(convs)
    if grouped := [c for c in convs if _is_grouped(c)]:
        return LayoutDecision(False, f"training with {len(grouped)} grouped convolutions of >1 input channel "
                                     f"per group ({grouped[0].name}); channels-last is much slower for those")
    if in_out := [c for c in convs if _is_in_out_channel(c)]:
        return LayoutDecision(False, f"training with {len(in_out)} convolutions of >=2x more input than output "
                                     f"channels ({in_out[0].name}); channels-last is slower for those")
    if all(_is_small_channel(c) for c in convs):
        return LayoutDecision(False, "training: every convolution has <=64 input and output channels")
    return LayoutDecision(True, f"training with {len(convs)} convolutions, none grouped, in>out-channel or "
                                f"all small")


def _cpu_weight_copies(convs: list[torch.fx.Node], weights_kept: bool) -> LayoutDecision | None:
    """The CPU inference exception of the module docstring: a refusal, or None."""
    if any(_is_depthwise(c) for c in convs):
        return None
    copied = [c for c in convs if _weight_copied_per_call(c, weights_kept)]
    if not copied:
        return None
    mb = sum(_weight(c).numel() * _weight(c).element_size() for c in copied) / 2**20
    return LayoutDecision(False, f"{len(convs)} CPU convolutions, none depthwise: NHWC would copy {len(copied)} "
                                 f"k x k weights ({mb:.1f} MB) to channels-last on every call, which costs more "
                                 f"than oneDNN's NHWC kernels save on dense convolutions")


def _inference_estimate(convs: list[torch.fx.Node]) -> LayoutDecision:
    flops = {"grouped": 0.0, "small": 0.0, "in_out": 0.0, "default": 0.0}
    for conv in convs:
        counted = convolution_flops(conv)
        if counted is not None:
            flops[_kind(conv)] += counted
    total = sum(flops.values())
    weighted = (flops["grouped"] * _GROUPED_MULTIPLIER + flops["small"] * _SMALL_MULTIPLIER
                + flops["in_out"] * _IN_OUT_MULTIPLIER + flops["default"] * _DEFAULT_MULTIPLIER)
    estimate = f"flop-weighted estimate {weighted / total:.3f}x of the NCHW time" if total else "no flops counted"
    shares = ", ".join(f"{k} {v / total:.0%}" if v / total >= 0.005 else f"{k} <1%"
                       for k, v in flops.items() if v) if total else ""
    return LayoutDecision(weighted <= total, f"inference, {len(convs)} convolutions: {estimate}"
                                             + (f" ({shares})" if shares else ""))
