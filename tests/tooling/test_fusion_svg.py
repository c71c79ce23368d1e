"""The fusion picture: ops grouped into their kernels, ATen calls marked, unfused edges with reasons."""
import xml.etree.ElementTree as ET

import torch

import fuse_all
from fuse_all import fusion_svg
import fuse_all_capture as capture
import fuse_all_ir as ir

SVG = "{http://www.w3.org/2000/svg}"


def layer(x, w):
    a = torch.relu(x @ w)
    b = a.sum(-1, keepdim=True)
    return torch.softmax(a - b, -1).cos() + x.mean()


def _picture():
    graph = capture.capture(layer, torch.randn(8, 16), torch.randn(16, 16))[0]
    program = ir.lower(graph.graph_module, graph.example_inputs, graph.graph_id, graph.device).program
    return graph, program, ET.fromstring(fusion_svg.fusion_svg(graph, program))


def _groups(root, kind):
    return [g for g in root.iter(f"{SVG}g") if kind in (g.get("class") or "").split()]


def _text(element):
    return " ".join(t.text or "" for t in element.iter(f"{SVG}text"))


def test_each_kernel_is_a_box_of_its_ops_with_source_lines():
    graph, program, root = _picture()
    kernels = _groups(root, "kernel")
    assert [k.get("id") for k in kernels] == [s.kernel for s in program.steps if isinstance(s, ir.KernelCall)]
    ops = {g.get("id")[3:]: g for g in _groups(root, "op")}
    fx_ops = [n.name for n in graph.graph.nodes if n.op == "call_function"]
    assert sorted(ops) == sorted(fx_ops)          # every ATen op drawn once
    relu = ops["relu"]
    assert "relu" in _text(relu) and "test_fusion_svg.py:" in _text(relu)
    assert "a = torch.relu(x @ w)" in relu.find(f"{SVG}title").text
    # the editor's click-to-jump contract (docs/artifact-record.md): an op node names its file and line
    assert "node" in relu.get("class").split()
    assert relu.get("data-file", "").endswith("test_fusion_svg.py") and int(relu.get("data-line")) > 0
    # inside the box of the kernel that computes it
    kernel_of_relu = next(k for k in program.kernels.values() if any(o.fx_node == "relu" for o in k.origins))
    box = next(k for k in kernels if k.get("id") == kernel_of_relu.name).find(f"{SVG}rect")
    node = relu.find(f"{SVG}rect")
    assert float(box.get("x")) <= float(node.get("x")) and float(node.get("y")) >= float(box.get("y"))
    assert float(node.get("y")) + float(node.get("height")) <= float(box.get("y")) + float(box.get("height"))


def test_aten_calls_are_marked_and_rejected_edges_carry_the_reason():
    _, program, root = _picture()
    externs = _groups(root, "extern")
    assert len(externs) == 1 and "aten.mm.default" in _text(externs[0])
    assert externs[0].find(f"{SVG}rect").get("stroke-dasharray")
    rejected = _groups(root, "rejected")
    reasons = [r["reason"] for r in program.report.rejected]
    assert rejected and all(any(_text(r).rstrip("…") in reason for reason in reasons) for r in rejected)
    assert any("producer is an ATen call (aten.mm.default)" in r.find(f"{SVG}title").text for r in rejected)


def test_a_fallback_graph_is_one_aten_box():
    graph = capture.capture(layer, torch.randn(8, 16), torch.randn(16, 16))[0]
    root = ET.fromstring(fusion_svg.fusion_svg(graph, None))
    assert not _groups(root, "kernel") and len(_groups(root, "extern")) == 1
    assert "runs in ATen" in _text(_groups(root, "extern")[0])


def test_labels_are_escaped():
    ops = {"a": fusion_svg.Op("a", "aten.<weird>&", "f.py:1", "x < y & z")}
    text = fusion_svg.render("g<1>", ops, [], [fusion_svg.Group("k", "kernel", "k <&>", ["a"])], {})
    ET.fromstring(text)
