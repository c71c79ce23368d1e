"""`prefer_channels_last` and `adopt_input_strides` on graphs traced with fake CUDA tensors (no GPU needed:
fake tensors take cuDNN's layout rules), so the GPU path of the rewrite is checked on CPU machines too:
where the copies go, which outputs keep their strides, what a backward re-derives from its inputs."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from fuse_all_ir import adopt_input_strides, prefer_channels_last

aten = torch.ops.aten


def _is_nhwc(t: torch.Tensor) -> bool:
    return t.stride(1) == 1 and t.is_contiguous(memory_format=torch.channels_last)


def _fake_cuda(*shapes, memory_format=torch.contiguous_format):
    mode = FakeTensorMode()
    with mode:
        try:
            values = [torch.empty(s, device="cuda") for s in shapes]
        except (RuntimeError, AssertionError) as exc:   # a torch built without CUDA
            pytest.skip(f"no fake CUDA tensors here: {exc}")
        values[0] = values[0].contiguous(memory_format=memory_format)
    return mode, values


def block(x, w1, w2):
    a = F.conv2d(x, w1, padding=1).relu()
    b = F.conv2d(a, w2, padding=1)
    return b.sigmoid(), a, b          # (user output, then two "saved activations" of a training forward)


def _trace(fn, mode, values):
    with mode:
        return make_fx(fn)(*values)


def _outputs(gm):
    return [n.meta["val"] for n in gm.graph.find_nodes(op="output")[0].args[0]]


def _clones(gm):
    return [n for n in gm.graph.nodes if n.target is aten.clone.default]


SHAPES = [(4, 3, 32, 32), (96, 3, 3, 3), (128, 96, 3, 3)]


def test_inference_graph_copies_the_input_once_and_restores_every_output():
    mode, values = _fake_cuda(*SHAPES)
    gm = _trace(block, mode, values)
    traced = [o.stride() for o in _outputs(gm)]
    decision = prefer_channels_last(gm, values, is_inference=True)
    assert decision and "1 layout copy of convolution inputs" in decision.reason, decision
    convs = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    assert all(_is_nhwc(c.meta["val"]) for c in convs)
    assert convs[0].args[0].target is aten.clone.default and convs[1].args[0].target is aten.relu.default
    assert [o.stride() for o in _outputs(gm)] == traced
    assert all(c.args[1].target is aten.clone.default and _is_nhwc(c.args[1].meta["val"]) for c in convs)
    assert len(_clones(gm)) == 6      # the input copy, two weights (cuDNN would convert each itself), three outputs
    assert decision.reason.endswith("1 layout copy of convolution inputs, 2 weights converted in the graph")


def test_training_forward_keeps_saved_activations_channels_last():
    mode, values = _fake_cuda(*SHAPES)
    gm = _trace(block, mode, values)
    traced = [o.stride() for o in _outputs(gm)]
    decision = prefer_channels_last(gm, values, is_inference=False, num_user_outputs=1)
    assert decision.reason.startswith("training with 2 convolutions"), decision
    user, *saved = _outputs(gm)
    assert user.stride() == traced[0]
    assert all(_is_nhwc(s) for s in saved)
    assert len(_clones(gm)) == 4      # the input copy, two weights, and the user output back to NCHW


def test_refused_and_already_channels_last_leave_the_graph_alone():
    mode, values = _fake_cuda((4, 3, 32, 32), (16, 3, 3, 3), (32, 16, 3, 3))
    gm = _trace(block, mode, values)
    code = gm.code
    decision = prefer_channels_last(gm, values, is_inference=False)
    assert not decision and "<=64" in decision.reason and gm.code == code
    mode, values = _fake_cuda(*SHAPES, memory_format=torch.channels_last)
    gm = _trace(block, mode, values)
    decision = prefer_channels_last(gm, values, is_inference=True)
    assert not decision and "channels-last already" in decision.reason and not _clones(gm)


def backward_like(grad, a, w):
    """What a backward does with a saved activation: a convolution backward and pointwise ops."""
    grad_input, grad_weight, _ = aten.convolution_backward(grad, a, w, None, [1, 1], [1, 1], [1, 1], False,
                                                           [0, 0], 1, [True, True, False])
    return grad_input * (a > 0), grad_weight


def test_backward_re_derives_strides_from_its_real_inputs():
    mode, values = _fake_cuda((4, 128, 32, 32), (4, 96, 32, 32), (128, 96, 3, 3))
    gm = _trace(backward_like, mode, values)
    traced = [o.stride() for o in _outputs(gm)]
    assert not adopt_input_strides(gm, values)            # inputs as traced: nothing to do
    with mode:
        real = [v.contiguous(memory_format=torch.channels_last) for v in values[:2]] + [values[2]]
    assert adopt_input_strides(gm, real)
    placeholders = gm.graph.find_nodes(op="placeholder")
    assert all(_is_nhwc(p.meta["val"]) for p in placeholders[:2])
    conv_backward = next(n for n in gm.graph.nodes if n.target is aten.convolution_backward.default)
    assert _is_nhwc(conv_backward.meta["val"][0])         # cuDNN's backward runs NHWC now
    assert [o.stride() for o in _outputs(gm)] == traced   # gradients keep the strides they were traced with


def pointwise_weights(x, w1, w2):
    return (F.conv2d(F.conv2d(x, w1).relu(), w2, padding=1),)


def test_one_by_one_weights_and_cpu_graphs_keep_their_weights():
    """A 1x1 weight is channels-last already (nothing for cuDNN to convert); oneDNN reorders CPU weights into its
    own format whatever their strides, so CPU graphs get no weight copies."""
    mode, values = _fake_cuda((4, 3, 32, 32), (128, 3, 1, 1), (128, 128, 3, 3))
    gm = _trace(pointwise_weights, mode, values)
    assert prefer_channels_last(gm, values, is_inference=True)
    first, second = [n for n in gm.graph.nodes if n.target is aten.convolution.default]
    assert first.args[1].op == "placeholder"
    assert second.args[1].target is aten.clone.default
    cpu_mode = FakeTensorMode()
    with cpu_mode:
        cpu_values = [torch.empty(s) for s in ((4, 3, 32, 32), (128, 3, 1, 1), (128, 128, 3, 3))]
    gm = _trace(pointwise_weights, cpu_mode, cpu_values)
    assert not prefer_channels_last(gm, cpu_values, is_inference=True)   # per-call weight copies: layout_decision.py
    assert prefer_channels_last(gm, cpu_values, is_inference=True, weights_kept=True)
    assert all(c.args[1].op == "placeholder" for c in gm.graph.nodes if c.target is aten.convolution.default)


def test_backward_converts_the_weight_once_in_the_graph():
    mode, values = _fake_cuda((4, 128, 32, 32), (4, 96, 32, 32), (128, 96, 3, 3))
    gm = _trace(backward_like, mode, values)
    traced = [o.stride() for o in _outputs(gm)]
    with mode:
        real = [v.contiguous(memory_format=torch.channels_last) for v in values[:2]] + [values[2]]
    assert adopt_input_strides(gm, real)
    conv_backward = next(n for n in gm.graph.nodes if n.target is aten.convolution_backward.default)
    assert conv_backward.args[2].target is aten.clone.default and _is_nhwc(conv_backward.args[2].meta["val"])
    assert [o.stride() for o in _outputs(gm)] == traced   # the weight gradient goes back to NCHW


def test_a_pointwise_weight_gradient_needs_no_copy_back():
    """A 1x1 convolution's weight gradient comes out of a channels-last backward with strides (96, 1, 96, 96)
    where it was traced (96, 1, 1, 1): the same memory, so a view restores the strides, no clone (no copy
    kernel); the 3x3 weight's gradient, laid out differently, is still copied back."""
    def two_weights(grad, a, w1, w3):
        _, gw1, _ = aten.convolution_backward(grad, a, w1, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                              [False, True, False])
        _, gw3, _ = aten.convolution_backward(grad, a, w3, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                              [False, True, False])
        return gw1, gw3
    mode, values = _fake_cuda((4, 128, 32, 32), (4, 96, 32, 32), (128, 96, 1, 1), (128, 96, 3, 3))
    gm = _trace(two_weights, mode, values)
    with mode:
        real = [v.contiguous(memory_format=torch.channels_last) for v in values[:2]] + values[2:]
    assert adopt_input_strides(gm, real)
    gw1, gw3 = gm.graph.find_nodes(op="output")[0].args[0]
    assert gw1.target is aten.as_strided.default and gw3.target is aten.clone.default
    assert gw1.meta["val"].stride() == (96, 1, 1, 1) and gw3.meta["val"].stride() == (864, 9, 3, 1)


def _layouts(gm):
    def layout(v):
        if isinstance(v, torch.Tensor):
            return tuple(v.shape), tuple(v.stride()), v.storage_offset(), v.dtype
        if isinstance(v, (list, tuple)):
            return tuple(layout(x) for x in v)
        return v
    return {n.name: layout(n.meta.get("val")) for n in gm.graph.nodes if n.op != "output"}


def _fully_propagated(gm, values, mode):
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    FakeTensorProp(gm, mode=mode).propagate_dont_convert_inputs(*values)
    return _layouts(gm)


def two_layer_backward(grad, a, b, w1, w2):
    """Two convolution backwards in a chain, a view and a tuple-returning op between them, a weight gradient
    and an input gradient as outputs: what the rewrite's clones change and what they must not."""
    gi2, gw2, _ = aten.convolution_backward(grad, b, w2, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                            [True, True, False])
    masked = (gi2 * (b > 0)).permute(0, 2, 3, 1).permute(0, 3, 1, 2)
    gi1, gw1, _ = aten.convolution_backward(masked, a, w1, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
                                            [True, True, False])
    return gi1, gw1, gw2, masked.sum(dim=(2, 3))


def test_incremental_propagation_gives_what_a_full_one_gives():
    """After the clones the layout pass inserts, every node's value has the layout a propagation of the whole
    graph gives (layout_propagation.py re-runs only what the clones change)."""
    mode, values = _fake_cuda((4, 128, 16, 16), (4, 64, 16, 16), (4, 96, 16, 16), (96, 64, 3, 3),
                              (128, 96, 3, 3))
    gm = _trace(two_layer_backward, mode, values)
    with mode:
        real = [v.contiguous(memory_format=torch.channels_last) for v in values[:3]] + values[3:]
    assert adopt_input_strides(gm, real)
    assert sum(n.target is aten.clone.default for n in gm.graph.nodes) >= 3    # weights and weight gradients
    incremental = _layouts(gm)
    assert incremental == _fully_propagated(gm, real, mode)

    mode, values = _fake_cuda(*SHAPES)
    gm = _trace(block, mode, values)
    assert prefer_channels_last(gm, values, is_inference=False, num_user_outputs=1)
    incremental = _layouts(gm)
    assert incremental == _fully_propagated(gm, values, mode)


def test_incremental_propagation_follows_a_changed_layout_downstream():
    """A clone inserted mid-graph that changes a value's layout: every node after it whose layout follows
    (pointwise ops, a view, a reduction's input) gets the new layout, and nothing else is run again."""
    from fuse_all_ir.layout_propagation import IncrementalFakeTensorProp

    def chain(x, y):
        a = x.relu()
        b = (a * 2 + y).permute(0, 2, 3, 1)
        return b.sum(dim=3), y.sigmoid()
    mode, values = _fake_cuda((4, 8, 6, 6), (4, 8, 6, 6))
    gm = _trace(chain, mode, values)
    relu = next(n for n in gm.graph.nodes if n.target is aten.relu.default)
    untouched = next(n for n in gm.graph.nodes if n.target is aten.sigmoid.default)
    kept = untouched.meta["val"]
    with gm.graph.inserting_after(relu):
        clone = gm.graph.call_function(aten.clone.default, (relu,), {"memory_format": torch.channels_last})
    relu.replace_all_uses_with(clone, delete_user_cb=lambda user: user is not clone)
    IncrementalFakeTensorProp(gm, mode, [clone]).propagate_dont_convert_inputs(*values)
    incremental = _layouts(gm)
    assert untouched.meta["val"] is kept                      # not downstream of the clone: not run again
    permuted = next(n for n in gm.graph.nodes if n.target is aten.permute.default)
    assert permuted.meta["val"].is_contiguous()               # NHWC all the way down: the permute is dense
    assert incremental == _fully_propagated(gm, values, mode)


def first_layer_backward(grad, image, w):
    """The first convolution's backward: only the weight gradient, from the user's (NCHW) image."""
    _, grad_weight, _ = aten.convolution_backward(grad, image, w, None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1,
                                                  [False, True, False])
    return (grad_weight,)


def test_the_first_layers_backward_reads_a_channels_last_copy_of_the_image():
    """The forward copied the image to channels-last for its convolution, but the backward gets the user's
    NCHW image: without a copy in the backward, ATen would make the (much larger) channels-last gradient
    contiguous to match it, and cuDNN convert both back."""
    mode, values = _fake_cuda((8, 64, 16, 16), (8, 3, 32, 32), (64, 3, 7, 7))
    gm = _trace(first_layer_backward, mode, values)
    traced = [o.stride() for o in _outputs(gm)]
    with mode:
        real = [values[0].contiguous(memory_format=torch.channels_last)] + values[1:]
    assert adopt_input_strides(gm, real)
    conv_backward = next(n for n in gm.graph.nodes if n.target is aten.convolution_backward.default)
    image = conv_backward.args[1]
    assert image.target is aten.clone.default and image.args[0].op == "placeholder"
    assert _is_nhwc(image.meta["val"])
    assert conv_backward.args[2].target is aten.clone.default          # and then the weight, as for any layer
    assert [o.stride() for o in _outputs(gm)] == traced
    assert _layouts(gm) == _fully_propagated(gm, real, mode)


def test_a_backward_whose_gradient_is_nchw_gets_no_image_copy():
    mode, values = _fake_cuda((8, 64, 16, 16), (8, 3, 32, 32), (64, 3, 7, 7))
    gm = _trace(first_layer_backward, mode, values)
    with mode:
        real = [values[0], values[1].contiguous(memory_format=torch.channels_last), values[2]]
    assert adopt_input_strides(gm, real)
    conv_backward = next(n for n in gm.graph.nodes if n.target is aten.convolution_backward.default)
    assert conv_backward.args[1].op == "placeholder"


def test_backward_runs_again_only_what_its_restrided_inputs_change():
    """`adopt_input_strides` on values of the inputs' own fake mode re-runs the restrided inputs' users only;
    values of another mode are all derived again (they could not mix with the new inputs in an op)."""
    def backward_with_bystander(grad, a, w, bias_grad):
        gi, gw = backward_like(grad, a, w)
        return gi, gw, bias_grad.sigmoid()
    shapes = ((4, 128, 16, 16), (4, 96, 16, 16), (128, 96, 3, 3), (128,))
    mode, values = _fake_cuda(*shapes)
    gm = _trace(backward_with_bystander, mode, values)
    bystander = next(n for n in gm.graph.nodes if n.target is aten.sigmoid.default)
    kept = bystander.meta["val"]
    with mode:
        real = [values[0], values[1].contiguous(memory_format=torch.channels_last), *values[2:]]
    assert adopt_input_strides(gm, real)
    assert bystander.meta["val"] is kept                       # not downstream of the restrided input
    assert _layouts(gm) == _fully_propagated(gm, real, mode)

    gm = _trace(backward_with_bystander, mode, values)
    other_mode, _ = _fake_cuda(*shapes)
    with other_mode:
        real = [torch.empty_strided(v.shape, v.stride(), device=v.device) for v in values]
        real[1] = real[1].contiguous(memory_format=torch.channels_last)
    bystander = next(n for n in gm.graph.nodes if n.target is aten.sigmoid.default)
    kept = bystander.meta["val"]
    assert adopt_input_strides(gm, real)
    assert bystander.meta["val"] is not kept and bystander.meta["val"].fake_mode is other_mode


def test_incremental_propagation_keeps_the_values_of_unchanged_inputs():
    """Inputs whose example values have their nodes' layouts keep their values (no new snapshot for each of a
    ResNet's ~270 parameters); one with a new layout gets a value of it, and its users run again."""
    from fuse_all_ir.layout_propagation import IncrementalFakeTensorProp

    def two_inputs(x, y):
        return x.relu(), y.sigmoid()
    mode, values = _fake_cuda((4, 8, 6, 6), (4, 8, 6, 6))
    gm = _trace(two_inputs, mode, values)
    x, y = gm.graph.find_nodes(op="placeholder")
    kept_x, kept_y = x.meta["val"], y.meta["val"]
    IncrementalFakeTensorProp(gm, mode, []).propagate_dont_convert_inputs(*values)
    assert x.meta["val"] is kept_x and y.meta["val"] is kept_y
    with mode:
        restrided = [values[0], values[1].contiguous(memory_format=torch.channels_last)]
    IncrementalFakeTensorProp(gm, mode, []).propagate_dont_convert_inputs(*restrided)
    assert x.meta["val"] is kept_x and _is_nhwc(y.meta["val"])
    assert _layouts(gm) == _fully_propagated(gm, restrided, mode)
