"""Channels-last activations for convolution graphs (Inductor's layout optimisation).

oneDNN's and cuDNN's convolutions are much faster on NHWC activations than on NCHW ones (MobileNetV2
1x3x128x128 on CPU, one thread: its 3x3 depthwise convolutions 2.4 ms -> 0.38 ms per call in all), and ATen
picks NHWC whenever the input is channels-last. So, where `decide_channels_last` says so, each 4-D
convolution input that is not channels-last is cloned to channels-last before lowering, and fake-tensor
propagation re-derives every downstream stride: pointwise kernels then keep NHWC (TensorIterator's rule,
which the lowering follows through `meta["val"]`), and only the graph's first convolution pays a layout copy.

Weights: cuDNN and oneDNN pick NHWC when either operand is channels-last and then convert an NCHW weight
themselves, one strided copy per convolution and call (on the H200, 34 such copies were 0.33 ms of a ResNet-50
training step, forward and backward). On CUDA every weight that is not channels-last already (1x1 kernels are)
is cloned to channels-last in the graph instead, as Inductor's `require_channels_last(weight)` does: a
generated kernel, before the convolution in the forward and before `convolution_backward` in the backward.
It is not kept across calls there: a CUDA graph replay would not run a staleness check. On CPU, inference
graphs can keep the converted copy while the parameter is unchanged (`weight_layouts.py`, option
`weight_layout_cache`: checked at every call by identity, storage and `_version`); not training graphs, whose
weights change at every step.

What the caller sees keeps the strides it had: every user-visible output (all outputs of an inference graph,
the first `num_user_outputs` of a training forward) is cloned back where its strides changed. A training
forward's saved activations stay channels-last: AOTAutograd restrides the backward's example inputs to the
strides the forward compiler reports (`fuse_all_capture` reports them), and `adopt_input_strides` re-derives
the backward graph's strides from those inputs before it is lowered. The one saved activation that stays
NCHW is the user's input to the first convolution (the forward's copy is not saved): on CUDA the backward
copies it to channels-last too, before that convolution's `convolution_backward`.
"""
from __future__ import annotations

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import free_symbols

from .layout_decision import LayoutDecision, decide_channels_last

aten = torch.ops.aten


def _tensor(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def _convolution_inputs(gm: torch.fx.GraphModule) -> list[tuple[torch.fx.Node, torch.fx.Node]]:
    """(convolution, its NCHW activation input) for every 2-D convolution whose input is not channels-last."""
    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.convolution.default:
            continue
        x, transposed = node.args[0], node.args[6]
        val = _tensor(x)
        if transposed or val is None or val.dim() != 4:
            continue
        if not val.is_contiguous(memory_format=torch.channels_last):
            found.append((node, x))
    return found


def _outputs(gm: torch.fx.GraphModule) -> list:
    (output,) = gm.graph.find_nodes(op="output")
    return list(output.args[0])


def _output_strides(gm: torch.fx.GraphModule) -> list:
    return [tuple(v.stride()) if (v := _tensor(a)) is not None else None for a in _outputs(gm)]


def _propagate(gm: torch.fx.GraphModule, example_inputs, fake_mode, inserted: list | None = None,
               incremental: bool = False) -> None:
    """Fake-tensor values for the graph's nodes. `inserted`: only these new nodes changed the graph since the
    last propagation, so only they and the nodes whose inputs' values they change are run again (a ResNet-50
    training backward has ~1000 ops; a weight or output clone changes a handful); none inserted: nothing to
    run, unless `incremental` (inputs whose layout changed, and what they change, run again)."""
    from .layout_propagation import IncrementalFakeTensorProp
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    if inserted is None:
        FakeTensorProp(gm, mode=fake_mode).propagate_dont_convert_inputs(*example_inputs)
    elif inserted or incremental:
        IncrementalFakeTensorProp(gm, fake_mode, inserted).propagate_dont_convert_inputs(*example_inputs)


def _fake_mode(example_inputs):
    from torch._guards import detect_fake_mode
    return detect_fake_mode(list(example_inputs))


def prefer_channels_last(gm: torch.fx.GraphModule, example_inputs, *, is_inference: bool = True,
                         num_user_outputs: int | None = None, weights_kept: bool = False) -> LayoutDecision:
    """Rewrite an inference graph or a training forward so its convolutions see channels-last activations
    where `decide_channels_last` says so. `num_user_outputs`: a training forward's outputs the user sees
    (the rest are saved for the backward and may change layout); None: all. The graph is left as it was
    when the inputs are not fake tensors of one mode or a user-visible output's strides cannot be restored."""
    decision = decide_channels_last(gm, is_inference, weights_kept)
    if not decision:
        return decision
    convs = _convolution_inputs(gm)
    if not convs:
        return LayoutDecision(False, f"{decision.reason}; but every convolution input is channels-last already")
    fake_mode = _fake_mode(example_inputs)
    if fake_mode is None:
        return LayoutDecision(False, f"{decision.reason}; but the inputs are not fake tensors of one mode")
    before = _output_strides(gm)
    visible = range(len(before) if num_user_outputs is None else min(num_user_outputs, len(before)))
    added: list[torch.fx.Node] = []
    clones: dict[torch.fx.Node, torch.fx.Node] = {}   # one copy per activation, however many convolutions read it
    for conv, x in convs:
        conv.replace_input_with(x, _channels_last_clone(gm, x, conv, clones))
    added.extend(clones.values())
    try:
        _propagate(gm, example_inputs, fake_mode)
        _drop_copies_of_channels_last(gm, added)
        copies = len(added)
        weights = _channels_last_weights(gm)
        added.extend(weights)
        _propagate(gm, example_inputs, fake_mode, inserted=weights)
        restoring = len(added)
        _restore_output_strides(gm, before, visible, added, strict=True)
        _propagate(gm, example_inputs, fake_mode, inserted=added[restoring:])
        after = _output_strides(gm)
        if any(after[i] != before[i] for i in visible):
            raise ValueError("output strides changed")
        _check_saved_strides_are_static(gm, before, after)
    except Exception as exc:  # noqa: BLE001 - any doubt (symbolic strides included): the graph as traced
        _undo(gm, added, example_inputs, fake_mode)
        return LayoutDecision(False, f"{decision.reason}; but the rewrite was undone ({type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0] if str(exc) else ''})")
    gm.recompile()
    converted = f", {len(weights)} weights converted in the graph" if weights else ""
    return LayoutDecision(True, f"{decision.reason}; {copies} layout cop{'y' if copies == 1 else 'ies'} "
                                f"of convolution inputs{converted}")


def _channels_last_weights(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """A channels-last clone of every CUDA convolution weight that cuDNN would convert itself (its activation
    is channels-last, the weight is not), one per weight, placed before its first convolution; the clones."""
    clones: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.convolution.default:
            x, w, transposed, position = node.args[0], node.args[1], node.args[6], 1
        elif node.target is aten.convolution_backward.default:
            x, w, transposed, position = node.args[1], node.args[2], node.args[7], 2
        else:
            continue
        xv, wv = _tensor(x), _tensor(w)
        if (transposed or xv is None or wv is None or wv.dim() != 4 or wv.device.type != "cuda"
                or free_symbols(xv) or free_symbols(wv)    # a layout query on symbolic sizes would guard
                or not xv.is_contiguous(memory_format=torch.channels_last)
                or wv.is_contiguous(memory_format=torch.channels_last)):
            continue
        args = list(node.args)
        args[position] = _channels_last_clone(gm, w, node, clones)
        node.args = tuple(args)
    return list(clones.values())


def _channels_last_backward_inputs(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """A channels-last clone of a CUDA `convolution_backward`'s saved input where its gradient is channels-last
    and the input is not: the graph's first convolution reads the user's NCHW input, which the forward copied
    to channels-last for the convolution but which the backward gets as it was. ATen then makes the gradient
    contiguous to match the input (a strided copy of the first layer's whole activation gradient) and cuDNN
    converts both back to NHWC for its weight-gradient kernel: on a ResNet-50 training step on the H200,
    0.18 + 0.13 ms of device time, against a generated copy of a 3-channel image. The clones."""
    clones: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.convolution_backward.default:
            continue
        grad, x, transposed = node.args[0], node.args[1], node.args[7]
        gv, xv = _tensor(grad), _tensor(x)
        if (transposed or gv is None or xv is None or xv.dim() != 4 or xv.device.type != "cuda"
                or free_symbols(gv) or free_symbols(xv)
                or not gv.is_contiguous(memory_format=torch.channels_last) or gv.is_contiguous()
                or xv.is_contiguous(memory_format=torch.channels_last)):
            continue
        node.replace_input_with(x, _channels_last_clone(gm, x, node, clones))
    return list(clones.values())


def _channels_last_clone(gm: torch.fx.GraphModule, value: torch.fx.Node, first_user: torch.fx.Node,
                         clones: dict) -> torch.fx.Node:
    """`value`'s channels-last clone in `clones`, inserted before `first_user` the first time it is asked for."""
    if value not in clones:
        with gm.graph.inserting_before(first_user):
            clones[value] = gm.graph.call_function(aten.clone.default, (value,),
                                                   {"memory_format": torch.channels_last})
    return clones[value]


def _drop_copies_of_channels_last(gm: torch.fx.GraphModule, added: list) -> None:
    """Once strides are propagated, most convolution inputs are channels-last already (outputs of earlier
    channels-last convolutions and the pointwise ops after them): their copies go."""
    for clone in list(added):
        source = _tensor(clone.args[0])
        if source is not None and tuple(source.stride()) == tuple(_tensor(clone).stride()):
            clone.replace_all_uses_with(clone.args[0])
            gm.graph.erase_node(clone)
            added.remove(clone)


def _check_saved_strides_are_static(gm: torch.fx.GraphModule, before: list, after: list) -> None:
    """Saved activations that changed layout must have plain-int strides: AOTAutograd restrides the
    backward's inputs only to strides the forward compiler reports as numbers, and a backward compiled
    for the traced strides would misread channels-last ones."""
    for i, (old, new) in enumerate(zip(before, after)):
        if old != new and free_symbols(_tensor(_outputs(gm)[i])):
            raise ValueError(f"saved output {i} would change layout with symbolic strides")


def adopt_input_strides(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """A backward graph whose example inputs (the forward's saved activations, restrided by AOTAutograd to
    what the forward compiler produced) have other strides than its placeholders were traced with: re-derive
    every stride from the inputs, and clone outputs (gradients) back to their traced strides where a memory
    format restores them (a view where only size-1 dims' strides changed: a 1x1 weight's gradient). True when
    the graph changed."""
    placeholders = gm.graph.find_nodes(op="placeholder")
    if not any(isinstance(e, torch.Tensor) and (v := _tensor(p)) is not None and tuple(v.stride()) != tuple(e.stride())
               for p, e in zip(placeholders, example_inputs)):
        return False
    fake_mode = _fake_mode(example_inputs)
    if fake_mode is None:
        raise ValueError("the backward's example inputs have new strides but are not fake tensors of one mode")
    before = _output_strides(gm)
    from .layout_propagation import values_in_mode
    if values_in_mode(gm, fake_mode):     # only what the restrided inputs change runs again
        _propagate(gm, example_inputs, fake_mode, inserted=[], incremental=True)
    else:
        _propagate(gm, example_inputs, fake_mode)
    _propagate(gm, example_inputs, fake_mode, inserted=_channels_last_backward_inputs(gm))
    _propagate(gm, example_inputs, fake_mode, inserted=_channels_last_weights(gm))
    restored: list = []
    _restore_output_strides(gm, before, range(len(before)), restored, strict=False)
    _propagate(gm, example_inputs, fake_mode, inserted=restored)
    gm.recompile()
    return True


def _restore_output_strides(gm: torch.fx.GraphModule, before: list, indices, added: list, *, strict: bool) -> int:
    """A clone to the original memory format for every output in `indices` whose strides changed; how many.
    `strict`: raise for strides that no memory format restores (else such an output keeps its new strides)."""
    (output,) = gm.graph.find_nodes(op="output")
    outs = list(output.args[0])
    restored = 0
    for i in indices:
        arg, strides = outs[i], before[i]
        val = _tensor(arg)
        if val is None or strides is None or tuple(val.stride()) == strides:
            continue
        probe = torch.empty_strided(tuple(val.shape), strides, device="meta")
        formats = (torch.contiguous_format, torch.channels_last) if val.dim() == 4 else (torch.contiguous_format,)
        fmt = next((f for f in formats if probe.is_contiguous(memory_format=f)), None)
        if fmt is None:
            if strict:
                raise ValueError(f"output {i} had strides {strides} that no memory format restores")
            continue
        with gm.graph.inserting_before(output):
            if not strict and fmt is torch.contiguous_format and _same_memory_layout(val, strides):
                # a 1x1 convolution's weight gradient, channels-last: only its size-1 dims' strides differ,
                # the memory is laid out as traced already, so a view gives back the traced strides; the clone
                # was one plain copy kernel per 1x1 convolution (35 per train_resnet50 step, ~70 us)
                outs[i] = gm.graph.call_function(aten.as_strided.default,
                                                 (arg, list(val.shape), list(strides), val.storage_offset()))
            else:
                outs[i] = gm.graph.call_function(aten.clone.default, (arg,), {"memory_format": fmt})
        added.append(outs[i])
        restored += 1
    output.args = (type(output.args[0])(outs),) + tuple(output.args[1:])
    return restored


def _same_memory_layout(val: torch.Tensor, strides) -> bool:
    """Whether `val` and a tensor of its shape with `strides` address the same memory element by element: equal
    strides on every dim longer than 1 (and no stride-0 size-1 dim, which autograd treats as a view)."""
    return all((size == 1 and new != 0) or (size != 1 and new == old)
               for size, new, old in zip(val.shape, val.stride(), strides))


def _undo(gm: torch.fx.GraphModule, added: list, example_inputs, fake_mode) -> None:
    for node in reversed(added):
        node.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(node)
    gm.recompile()
    _propagate(gm, example_inputs, fake_mode)
