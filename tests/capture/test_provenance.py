"""Source provenance: node.meta["source_loc"] and the compiled function's FunctionInfo point at user lines."""
import functools
import inspect
import os

import torch
import torch.fx
import torch.nn as nn

from fuse_all_capture import SOURCE_LOC, capture, function_span, graph_breaks
from fuse_all_capture.provenance import FunctionInfo, annotate_nodes, parse_stack_trace, unwrap_decorators

HERE = os.path.abspath(__file__)


def line_of(fn, text):
    """The absolute line number of the line of `fn`'s source that contains `text`."""
    lines, start = inspect.getsourcelines(fn)
    (index,) = [i for i, line in enumerate(lines) if text in line]
    return start + index


def def_line(fn):
    return line_of(fn, f"def {fn.__name__}(")


def last_line(fn):
    lines, start = inspect.getsourcelines(fn)
    return start + len(lines) - 1


def helper(t):
    return torch.sigmoid(t) * 2


def pointwise(x):
    a = torch.cos(x)
    b = helper(a)
    return b + x


def locations(graph, target):
    nodes = graph.graph.find_nodes(op="call_function", target=target)
    assert nodes, f"no {target} in the graph"
    return {(n.meta[SOURCE_LOC]["file"], n.meta[SOURCE_LOC]["line"], n.meta[SOURCE_LOC]["code"]) for n in nodes}


def test_forward_nodes_point_at_user_lines_innermost_frame_first():
    (graph,) = capture(pointwise, torch.randn(4))
    aten = torch.ops.aten
    assert locations(graph, aten.cos.default) == {(HERE, line_of(pointwise, "torch.cos"), "a = torch.cos(x)")}
    # sigmoid runs inside `helper`: the innermost user frame wins, not the call site in `pointwise`.
    assert locations(graph, aten.sigmoid.default) == {(HERE, line_of(helper, "sigmoid"), "return torch.sigmoid(t) * 2")}
    assert locations(graph, aten.add.Tensor) == {(HERE, line_of(pointwise, "b + x"), "return b + x")}
    cos = graph.graph.find_nodes(op="call_function", target=aten.cos.default)[0]
    assert cos.meta[SOURCE_LOC]["function"] == "pointwise"
    assert graph.function == FunctionInfo("pointwise", HERE, def_line(pointwise), last_line(pointwise), "pointwise")


def test_backward_nodes_point_at_the_forward_line_they_differentiate():
    forward, backward = capture(pointwise, torch.randn(4, requires_grad=True), training=True)
    assert (forward.kind, backward.kind) == ("forward", "backward")
    # d/dx cos(x) = -sin(x): the backward's sin comes from the cos line.
    sin_lines = {line for _, line, _ in locations(backward, torch.ops.aten.sin.default)}
    assert sin_lines == {line_of(pointwise, "torch.cos")}
    located = [n for n in backward.graph.nodes if n.op == "call_function" and SOURCE_LOC in n.meta]
    assert located and all(n.meta[SOURCE_LOC]["file"] == HERE for n in located)


def test_backward_nodes_without_stack_trace_borrow_the_forward_location_by_seq_nr():
    location = {"file": HERE, "line": 7, "code": "y = x.exp()", "function": "f"}
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.ops.aten.mul.Tensor, (x, x))
    node.meta["seq_nr"] = 12
    unrelated = graph.call_function(torch.ops.aten.neg.default, (node,))
    unrelated.meta["seq_nr"] = 99
    graph.output(unrelated)
    annotate_nodes(graph.nodes, {12: location})
    assert node.meta[SOURCE_LOC] == location
    assert SOURCE_LOC not in unrelated.meta and SOURCE_LOC not in x.meta


def test_parse_stack_trace_skips_caret_lines_and_torch_frames():
    torch_file = os.path.join(os.path.dirname(torch.__file__), "nn", "modules", "linear.py")
    trace = (
        f'  File "{HERE}", line 10, in forward\n    y = self.lin(x)\n        ^^^^^^^^^^^\n'
        f'  File "{torch_file}", line 125, in forward\n    return F.linear(input, self.weight, self.bias)\n'
    )
    frames = parse_stack_trace(trace)
    assert [(f.file, f.line, f.function, f.code) for f in frames] == [
        (HERE, 10, "forward", "y = self.lin(x)"),
        (torch_file, 125, "forward", "return F.linear(input, self.weight, self.bias)"),
    ]
    graph = torch.fx.Graph()
    node = graph.call_function(torch.ops.aten.relu.default, ())
    node.meta["stack_trace"] = trace
    annotate_nodes([node])
    assert node.meta[SOURCE_LOC] == {"file": HERE, "line": 10, "code": "y = self.lin(x)", "function": "forward"}


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4)

    def forward(self, x):
        hidden = self.first(x)
        return torch.relu(hidden)


def test_module_forward_is_the_compiled_function():
    (graph,) = capture(TwoLayer(), torch.randn(2, 4))
    forward = TwoLayer.forward
    assert graph.function == FunctionInfo("forward", HERE, def_line(forward), last_line(forward), "TwoLayer.forward")
    assert locations(graph, torch.ops.aten.addmm.default) == {(HERE, line_of(forward, "self.first(x)"), "hidden = self.first(x)")}


def passthrough(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


@passthrough
def decorated(x):
    return torch.tanh(x) + 1


def test_decorator_wrappers_are_stepped_through_to_the_decorated_def_line():
    (graph,) = capture(decorated, torch.randn(3))
    inner = decorated.__wrapped__
    assert graph.function.name == "decorated"
    assert graph.function.first_line == def_line(inner)  # the `def`, not the `@passthrough` line
    assert graph.function.first_line == line_of(inner, "@passthrough") + 1
    assert graph.function.last_line == last_line(inner)


def unwrap_probe(x, *rest):
    return x


def test_unwrap_stops_when_the_wrapper_has_ops_of_its_own():
    info = FunctionInfo("unwrap_probe", HERE, def_line(unwrap_probe), last_line(unwrap_probe))
    call_line = line_of(unwrap_probe, "return x")
    inner = f'  File "{HERE}", line {line_of(helper, "sigmoid")}, in helper\n'
    through = parse_stack_trace(f'  File "{HERE}", line {call_line}, in unwrap_probe\n' + inner)
    own = parse_stack_trace(f'  File "{HERE}", line {call_line}, in unwrap_probe\n')
    assert unwrap_decorators(info, [through, through]).name == "helper"
    assert unwrap_decorators(info, [through, own]) == info


def breaks_once(x):
    y = x.sin()
    print("a graph break")
    return y.cos()


def test_graph_breaks_and_the_resume_function_maps_back_to_the_original_def():
    graphs = capture(breaks_once, torch.randn(3))
    assert len(graphs) == 2
    first, resumed = graphs
    expected = FunctionInfo("breaks_once", HERE, def_line(breaks_once), last_line(breaks_once), "breaks_once")
    assert first.function == expected and resumed.function == expected
    break_line = line_of(breaks_once, "print(")
    assert first.graph_break is not None and first.graph_break["line"] == break_line
    assert "print" in first.graph_break["reason"]
    assert resumed.graph_break is None  # it ends at the return
    assert [(b["file"], b["line"]) for b in graph_breaks(expected)] == [(HERE, break_line)]
    assert graph_breaks(FunctionInfo("other", HERE, 1, 2)) == []


def test_function_span_finds_nested_functions_and_lambdas(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "class A:\n"
        "    @staticmethod\n"
        "    def run(x):\n"
        "        def inner(y):\n"
        "            return y\n"
        "        return inner(x)\n"
        "square = lambda v: v * v\n"
    )
    assert function_span(str(source), "run", 2) == ("A.run", 3, 6)  # from the decorator line
    assert function_span(str(source), "inner", 5) == ("A.run.<locals>.inner", 4, 5)
    assert function_span(str(source), "<lambda>", 7) == ("<lambda>", 7, 7)
    assert function_span(str(source), "missing", 3) is None
    assert function_span(str(tmp_path / "absent.py"), "run", 3) is None

