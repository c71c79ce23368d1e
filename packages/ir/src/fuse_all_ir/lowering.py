"""ATen FX graph -> `LoweredGraph`: walk the nodes, lower each op through the lowering table, fall back
to an ATen call for everything else."""
from __future__ import annotations

import contextlib
import operator

import sympy
import torch
import torch.fx

from . import dtypes
from ._torch_compat import backed_size_values, real_tensor_mode
from .nodes import CURRENT_ORIGIN, E, LoweredGraph, Node, Value, View, const, expr_stats, load, op
from .origins import origin_of, target_name
from .program import BufferRef, ExternCall, GraphInput, TensorSpec
from .lowering_mutations import deferrable_input_copy, write_back_inputs
from .lowering_outputs import input_view_from_meta, input_view_replay, returned_and_broadcast, view_of_realized_source
from .memory import buffer_refs
from .rounding import round_results
from .symbolic import free_size_symbols, linear_index
from .vocabulary import NodeKind, reduction

LOWERINGS: dict = {}
# ops whose lowering applies only under some targets' choices or for some sizes: op -> fn(g, fx node) -> bool,
# asked before lowering starts (whether a shared value may stay an expression in that consumer)
LOWERING_GATES: dict = {}
MAX_CONSTANT_ELEMENTS = 4096
# node.meta key: why a graph pass's op (one with no lowering by design) is an ATen-like call, for the report
EXTERN_REASON = "fuse_all_extern_reason"


class Unsupported(Exception):
    """Raised by a lowering that can't handle these arguments; the op then runs in ATen."""


def lowers(*targets):
    def register(fn):
        for target in targets:
            if target is None:
                continue
            for overload in _overloads(target):
                LOWERINGS[overload] = fn
        return fn
    return register


def _overloads(target):
    if isinstance(target, torch._ops.OpOverloadPacket):
        return [getattr(target, name) for name in target.overloads()]
    return [target]


# ---- symbolic values --------------------------------------------------------------------------------

def sym(value):
    """A python int / SymInt / SymFloat / sympy value -> sympy expression (ints stay ints)."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value.node.expr
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return sympy.Integer(value)
    return value


def contiguous_strides(size) -> tuple:
    strides, running = [], sympy.Integer(1)
    for n in reversed(size):
        strides.append(running)
        running = running * n
    return tuple(reversed(strides))


def spec_of(fake, device: str) -> TensorSpec:
    return TensorSpec(dtype=_dtype_str(fake.dtype), size=tuple(sym(s) for s in fake.shape),
                      stride=tuple(sym(s) for s in fake.stride()), offset=sympy.Integer(0), device=device)


def _dtype_str(dtype: torch.dtype) -> str:
    try:
        return dtypes.dtype_name(dtype)
    except dtypes.UnsupportedDtype:
        return str(dtype).replace("torch.", "")


def strided_loader(buffer: str, size, stride, offset, dtype: str, whole_buffer: bool = False):
    """Loads of `buffer` through a strided view. For a whole buffer the load also records the logical
    index, which lets the fusion pass recompute an in-kernel value instead of reading memory."""
    stride, offset = tuple(stride), sympy.sympify(offset)

    def loader(index):
        flat = linear_index(offset, index, stride)
        return load(buffer, flat, dtype, logical=index if whole_buffer else None)
    return loader


def buffer_value(buffer: str, spec: TensorSpec) -> Value:
    if any(sympy.sympify(n) == 0 for n in spec.size):
        # no element exists, so no value read from it can reach an output (its consumers are empty too,
        # or reductions and pads that never select it); a load would still run where a view dropped the
        # empty dim's index (reshape), out of bounds of a zero-byte (maybe null) allocation
        return Value(spec.size, spec.dtype, lambda index: const(0, spec.dtype),
                     view=View(buffer, spec.size, spec.stride, spec.offset))
    loader = strided_loader(buffer, spec.size, spec.stride, spec.offset, spec.dtype, whole_buffer=True)
    return Value(spec.size, spec.dtype, loader, view=View(buffer, spec.size, spec.stride, spec.offset))


# ---- the walker ------------------------------------------------------------------------------------

class GraphLowering:
    """Lowers one ATen graph. Lowering functions receive this object as `g` to realize values, make
    reduction nodes and fall back to ATen."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, graph_id: str, device: str | None = None,
                 recompute_shared: bool = False, random_in_kernel: bool = False, gather_in_kernel: bool = False,
                 small_matmul_rows: int = 0):
        self.gm = gm
        self.recompute_shared = recompute_shared   # see `_recomputable`
        # random ops as pointwise code from a per-call seeds buffer (lowerings_random.py), else ATen calls
        self.random_in_kernel = random_in_kernel
        self.random_seeds: str | None = None
        # embedding / index / index_select as loads at computed positions (lowerings_gather.py), else ATen
        self.gather_in_kernel = gather_in_kernel
        # mm/addmm with at most this many rows or columns as reductions (lowerings_matmul.py), else ATen
        self.small_matmul_rows = small_matmul_rows
        self.random_seeds_used = 0
        self.example_inputs = list(example_inputs)
        self.graph_id = graph_id
        self.device = device or _guess_device(gm, example_inputs)
        self.nodes: dict[str, Node] = {}
        self.externs: list[ExternCall] = []
        self.inputs: list[GraphInput] = []
        self.traced_inputs: dict[str, torch.Tensor] = {}   # input buffer -> its traced (fake) tensor
        self.size_symbols: dict = {}
        self.size_hints: dict = {}
        self.fallbacks: list = []
        self.inlined: list = []
        self.constants: dict = {}
        self.env: dict = {}
        self.deferred_copies: list = []      # copy_ into graph inputs, written back at the end (lowering_mutations)
        self._counter = 0
        self.current: torch.fx.Node | None = None

    def new_name(self, prefix="buf") -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    # -- realization
    def whole_buffer(self, value: Value) -> str | None:
        """The buffer `value` is exactly (all of it, as laid out), or None."""
        v = value.view
        node = self.nodes.get(v.buffer) if v is not None else None
        if (node is not None and tuple(v.size) == tuple(node.spec.size)
                and tuple(v.stride) == tuple(node.spec.stride) and v.offset == node.spec.offset):
            return v.buffer
        return None

    def realize(self, value: Value, stride=None) -> str:
        """Make `value` a buffer; afterwards `value` loads from it. Returns the buffer name."""
        whole = self.whole_buffer(value)
        if whole is not None and (stride is None or tuple(stride) == tuple(value.view.stride)):
            return whole
        stride = tuple(stride) if stride is not None else contiguous_strides(value.size)
        if any(s == 0 for s in stride) or len(stride) != len(value.size):
            stride = contiguous_strides(value.size)
        spec = TensorSpec(value.dtype, tuple(value.size), stride, sympy.Integer(0), self.device)
        name = self.new_name()
        order = tuple(sorted(range(len(stride)), key=lambda d: (-_stride_rank(stride[d]), d)))
        # the op that computed the value, not the one that needs it in memory (an ATen call's argument)
        origins = (value.origin,) if value.origin is not None else self._origins()
        self.nodes[name] = Node(name, NodeKind.POINTWISE, spec, body=value.loader, iter_order=order, origins=origins)
        fresh = buffer_value(name, spec)
        value.loader, value.view = fresh.loader, fresh.view
        return name

    def reduction(self, value: Value, dims, op: str, dtype: str, keepdim: bool = False) -> Value:
        dims = sorted({d % max(value.ndim, 1) for d in dims}) if value.ndim else []
        outer_dims = [d for d in range(value.ndim) if d not in dims]
        outer_size = tuple(value.size[d] for d in outer_dims)
        red_size = tuple(value.size[d] for d in dims)
        loader = value.loader

        def body(outer_index, red_index):
            index = [None] * value.ndim
            for d, i in zip(outer_dims, outer_index):
                index[d] = i
            for d, i in zip(dims, red_index):
                index[d] = i
            return loader(index)

        spec = TensorSpec(dtype, outer_size, contiguous_strides(outer_size), sympy.Integer(0), self.device)
        name = self.new_name()
        self.nodes[name] = Node(name, NodeKind.REDUCTION, spec, body=body, reduction_size=red_size, reduction_op=reduction(op),
                                iter_order=tuple(range(len(outer_size))), origins=self._origins())
        result = buffer_value(name, spec)
        if not keepdim:
            return result
        from .lowerings_view import unsqueeze_dims
        return unsqueeze_dims(result, dims)

    def _origins(self) -> tuple:
        origin = CURRENT_ORIGIN.get()
        return (origin,) if origin is not None else ()

    # -- fallback to ATen
    def extern(self, node: torch.fx.Node, reason: str):
        args = torch.fx.node.map_aggregate(node.args, self._extern_arg)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, self._extern_arg)
        val = node.meta.get("val")
        single = not isinstance(val, (tuple, list))
        vals = [val] if single else list(val)
        outputs, specs = [], []
        for v in vals:
            if isinstance(v, torch.Tensor):
                outputs.append(self.new_name())
                specs.append(spec_of(v, str(v.device)))   # an ATen result may live elsewhere (`.cpu()`)
            else:
                outputs.append(None)
                specs.append(None)
        call = ExternCall(target=target_name(node.target), args=tuple(args), kwargs=dict(kwargs),
                          outputs=tuple(outputs), out_specs=tuple(specs), origins=self._origins(), reason=reason,
                          single_result=single)
        self.externs.append(call)
        self.fallbacks.append((call.target, reason))
        reads = {a.name for a in buffer_refs((args, kwargs))}
        results = []
        anchor = outputs[0] if outputs and outputs[0] else self.new_name("extern")
        for i, (name, spec) in enumerate(zip(outputs, specs)):
            if name is None:
                results.append(None)
                continue
            self.nodes[name] = Node(name, NodeKind.EXTERN, spec, extern=call, origins=call.origins, reads=reads)
            results.append(buffer_value(name, spec))
        if not any(outputs):
            self.nodes[anchor] = Node(anchor, NodeKind.EXTERN, None, extern=call, origins=call.origins, reads=reads)
        return results[0] if single else tuple(results)

    def _extern_arg(self, a):
        if isinstance(a, torch.fx.Node):
            value = self.env[a.name]
            if isinstance(value, Value):
                return self.as_ref(value, _meta_stride(a))
            return value
        return a

    def as_ref(self, value: Value, stride=None) -> BufferRef:
        """An ATen call's tensor argument: a strided view of a buffer when possible, else a new buffer laid
        out with the strides tracing recorded (ops like as_strided see the storage order)."""
        if value.view is None:
            self.realize(value, stride)
        v = value.view
        node = self.nodes[v.buffer]
        if (tuple(v.size) == tuple(node.spec.size) and tuple(v.stride) == tuple(node.spec.stride)
                and v.offset == node.spec.offset):
            return BufferRef(v.buffer)
        return BufferRef(v.buffer, TensorSpec(value.dtype, tuple(v.size), tuple(v.stride), v.offset, self.device))

    # -- the walk
    @contextlib.contextmanager
    def lowering_node(self, node: torch.fx.Node):
        """Lower `node`'s op: lowerings read the op, its traced value (sizes a guard resolved, the split
        count, the dtype) and its origin from here, also when an output's view chain is lowered again
        after the walk (lowering_outputs)."""
        previous = self.current
        self.current = node
        token = CURRENT_ORIGIN.set(origin_of(node))
        try:
            yield
        finally:
            CURRENT_ORIGIN.reset(token)
            self.current = previous

    def run(self) -> LoweredGraph:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for i, (node, example) in enumerate(zip(placeholders, self.example_inputs)):
            self._lower_placeholder(i, node, example)
        outputs = []
        for node in self.gm.graph.nodes:
            if node.op == "call_function":
                with self.lowering_node(node):
                    self.env[node.name] = self._lower_call(node)
            elif node.op == "output":
                write_back_inputs(self)
                outputs = [self._lower_output(a) for a in node.args[0]]
            elif node.op == "get_attr":
                self.env[node.name] = self._lower_constant(node)
            elif node.op != "placeholder":
                raise Unsupported(f"fx node kind {node.op}")
        return LoweredGraph(self.graph_id, self.device, self.inputs, self.nodes, self.externs, outputs,
                            self.size_symbols, self.size_hints, self.fallbacks, self.inlined, self.constants)

    def _lower_placeholder(self, i, node, example):
        name = f"arg{i}"
        val = node.meta.get("val", example)
        if isinstance(val, torch.Tensor):
            spec = spec_of(val, self.device)
            self.traced_inputs[name] = val
            self.inputs.append(GraphInput(name, "tensor", spec=spec))
            self.nodes[name] = Node(name, NodeKind.INPUT, spec)
            self.env[node.name] = buffer_value(name, spec)
            for d, s in enumerate(spec.size):
                if isinstance(s, sympy.Symbol) and s not in self.size_symbols:
                    self.size_symbols[s] = f"{name}.size({d})"
            for d, s in enumerate(spec.stride):
                if isinstance(s, sympy.Symbol) and s not in self.size_symbols:
                    self.size_symbols[s] = f"{name}.stride({d})"
            for d, s in enumerate(spec.size):
                self._define_from_affine_size(s, f"{name}.size({d})")
        elif isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            expr = sym(val)
            self.inputs.append(GraphInput(name, "symint", symbol=expr))
            if isinstance(expr, sympy.Symbol):
                self.size_symbols.setdefault(expr, name)
            self.env[node.name] = expr
        else:
            self.inputs.append(GraphInput(name, "other"))
            self.env[node.name] = name  # passed through opaquely to ATen calls
        self._record_hints(val)

    def _lower_constant(self, node):
        """A tensor constant of the graph (e.g. `torch.tensor([1, 2])` in user code): embedded in the host
        program as a literal, so output_code.py stays self-contained."""
        value = self.gm
        for part in node.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor) or value.numel() > MAX_CONSTANT_ELEMENTS:
            raise Unsupported(f"graph constant {node.target} is too large to embed ({value.numel()} elements)")
        with real_tensor_mode():
            value = value.detach().to("cpu").contiguous().clone()
        name = f"const{len(self.constants)}"
        spec = TensorSpec(_dtype_str(value.dtype), tuple(sym(s) for s in value.shape),
                          contiguous_strides(tuple(sym(s) for s in value.shape)), sympy.Integer(0), self.device)
        self.constants[name] = value
        self.nodes[name] = Node(name, NodeKind.INPUT, spec)
        return buffer_value(name, spec)

    def _define_from_affine_size(self, size, host_size: str) -> None:
        """A symbol that reaches the graph only inside a size such as `s74 + 2` (a padded gradient's
        dims in a backward graph, fuzz seed 131 index 480) is computed back from that size:
        s = (size - b) // a for a size a*s + b with integer a, b."""
        if isinstance(size, sympy.Symbol) or not isinstance(size, sympy.Expr):
            return
        symbols = free_size_symbols(size)
        if len(symbols) != 1:
            return
        (symbol,) = symbols
        if symbol in self.size_symbols:
            return
        poly = sympy.Poly(size, symbol) if size.is_polynomial(symbol) else None
        if poly is None or poly.degree() != 1:
            return
        a, b = poly.all_coeffs()
        if not (a.is_Integer and b.is_Integer) or a == 0:
            return
        base = f"({host_size} - {int(b)})" if b != 0 else host_size
        self.size_symbols[symbol] = base if a == 1 else f"{base} // {int(a)}"

    def _record_hints(self, val):
        values = [val] if not isinstance(val, torch.Tensor) else list(val.shape) + list(val.stride())
        for v in values:
            if isinstance(v, torch.SymInt):
                shape_env = v.node.shape_env
                for s in free_size_symbols(v.node.expr):
                    hint = backed_size_values(shape_env).get(s)
                    if hint is not None:
                        self.size_hints[s] = int(hint)

    def _lower_call(self, node):
        target = node.target
        if target is operator.getitem:
            item = self.env[node.args[0].name][node.args[1]]
            self._maybe_realize(node, item)
            return item
        if not isinstance(target, torch._ops.OpOverload):
            return self._lower_python_op(node)
        if deferrable_input_copy(self, node):
            self.deferred_copies.append(node)
            return None
        size_value = self._known_size_value(node)
        if size_value is not None:
            return size_value
        lowering = LOWERINGS.get(target)
        reason = _unlowerable_reason(node)
        if lowering is None and reason is None:
            reason = node.meta.get(EXTERN_REASON) or f"{target_name(target)} has no lowering"
        if reason is None:
            args = torch.fx.node.map_arg(node.args, lambda n: self.env[n.name])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: self.env[n.name])
            try:
                result = _tag_origins(lowering(self, *args, **kwargs), CURRENT_ORIGIN.get())
                result = round_results(_with_traced_dtypes(result, node.meta.get("val")))
                self._maybe_realize(node, result)
                return result
            except (Unsupported, dtypes.UnsupportedDtype, NotImplementedError) as exc:
                reason = f"{target_name(target)}: {exc}"
        return self.extern(node, reason)

    def _known_size_value(self, node):
        """aten.sym_size/sym_stride/sym_numel and the like: a SymInt the shape environment already expresses
        over the graph's size symbols (as an extern call it would have no value: None reached the backward).
        An unbacked value (`.item()`) has a fresh symbol and stays an ATen call."""
        val = node.meta.get("val")
        if not isinstance(val, (torch.SymInt, torch.SymFloat)):
            return None
        expr = val.node.expr
        return expr if free_size_symbols(expr) <= set(self.size_symbols) else None

    def _lower_python_op(self, node):
        """Arithmetic on SymInts (sizes), e.g. operator.mul / sym_size."""
        args = [self.env[a.name] if isinstance(a, torch.fx.Node) else sym(a) for a in node.args]
        val = node.meta.get("val")
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return val.node.expr
        if isinstance(val, (int, float, bool)):
            return val
        try:
            return node.target(*args)
        except Exception as exc:  # noqa: BLE001 - anything else is an op we don't model
            raise Unsupported(f"python op {node.target}: {exc}") from exc

    def _recomputable(self, node: torch.fx.Node, ops: int, buffers: set) -> bool:
        """The value's expression (`ops` nodes over `buffers`) is small (see RECOMPUTE_MAX_OPS), every
        consumer is lowered to kernel code (an ATen call or the graph output needs the buffer), and it is not
        both returned and broadcast (`returned_and_broadcast`: BatchNorm's invstd in training)."""
        if ops > RECOMPUTE_MAX_OPS or len(buffers) > RECOMPUTE_MAX_READS:
            return False
        if returned_and_broadcast(node, self.size_hints):
            return False
        return all(lowers_in_kernel(self, user) for user in node.users)

    def _maybe_realize(self, node, result):
        """A value read by several consumers becomes a buffer (the fusion pass may still put producer and
        consumers into one kernel); a value read once stays an expression inside its consumer."""
        if not isinstance(result, Value) or result.view is not None:
            return
        shared = len(node.users) > 1
        if shared and not self.recompute_shared:
            self.realize(result, _meta_stride(node))
            return
        ops, buffers = expr_stats(result)   # one probe of the expression serves both tests
        if (shared and not self._recomputable(node, ops, buffers)) or ops > 64:
            self.realize(result, _meta_stride(node))
        else:
            self.inlined.append((target_name(node.target), CURRENT_ORIGIN.get()))

    def _lower_output(self, arg):
        if arg is None:
            return None
        if not isinstance(arg, torch.fx.Node):
            return sym(arg)
        value = self.env[arg.name]
        if isinstance(value, Value):
            replay = input_view_replay(self, arg)
            if replay is not None:
                return replay
            stride = _meta_stride(arg)
            view = value.view
            if view is not None and stride is not None and tuple(view.stride) == tuple(stride):
                # a view stays a view: outputs alias each other and the inputs as in eager (AOTAutograd
                # rebuilds an output that aliases an input from the returned tensor's storage offset)
                return self.as_ref(value)
            broadcast = view_of_realized_source(self, arg, stride)
            if broadcast is not None:
                return broadcast
            aliased = input_view_from_meta(self, arg)
            if aliased is not None:
                return aliased
            name = self.realize(value, stride)
            spec = self.nodes[name].spec
            if stride is not None and tuple(stride) != tuple(spec.stride):
                return BufferRef(name, TensorSpec(value.dtype, tuple(value.size), tuple(value.view.stride),
                                                  value.view.offset, self.device))
            return BufferRef(name)
        if value is None or isinstance(value, (sympy.Basic, int, float, bool)):
            return value
        raise Unsupported(f"graph output of type {type(value).__name__}")


def _meta_stride(node: torch.fx.Node):
    val = node.meta.get("val")
    return [sym(s) for s in val.stride()] if isinstance(val, torch.Tensor) else None


def _with_traced_dtypes(result, val):
    """Each result in the dtype the graph traced it with: that is the contract with the graph's other
    consumers, the backward graph among them, which reads a saved tensor with its traced dtype whatever
    this graph wrote. Where ATen's dtype depends on the device a lowering may compute wider (CPU's
    native_layer_norm keeps a float16 input's mean and rstd in float16, CUDA's in float32: a float32
    buffer read as float16 by the backward gave gradients of 150 for 0, fuzz seed 51 index 1496)."""
    if isinstance(result, (tuple, list)) and isinstance(val, (tuple, list)) and len(result) == len(val):
        return type(result)(_with_traced_dtypes(r, v) for r, v in zip(result, val))
    if isinstance(result, Value) and isinstance(val, torch.Tensor) and result.ndim != val.dim():
        # a lowering that disagrees with torch on the result's rank reads wrong elements downstream (a squeeze
        # of a size only a guard makes 1, fuzz seed 133 #1292): the op runs in ATen instead
        raise Unsupported(f"lowered to {result.ndim} dims where torch traced {val.dim()}")
    if not (isinstance(result, Value) and isinstance(val, torch.Tensor) and dtypes.is_supported(val.dtype)):
        return result
    traced = _dtype_str(val.dtype)
    if result.dtype == traced:
        return result
    inner = result.loader
    return Value(result.size, traced, lambda index: op("cast", (inner(index),), traced), origin=result.origin)


def _tag_origins(result, origin):
    """Expressions are built lazily (when kernels are generated), so each value remembers the op it came
    from and stamps it on the expression it returns."""
    if origin is None:
        return result
    if isinstance(result, (tuple, list)):
        return type(result)(_tag_origins(r, origin) for r in result)
    if not isinstance(result, Value) or result.origin is not None:
        return result
    inner = result.loader

    def loader(index):
        e = inner(index)
        return e if e.origin is not None else e.with_origin(origin)
    return Value(result.size, result.dtype, loader, result.view, origin)


# A value read by several consumers is recomputed in each (not written to memory and read back) when its
# expression is at most this many ops over at most this many buffers: Inductor's realize_opcount_threshold and
# realize_reads_threshold. On a grid target memory traffic is the cost: BatchNorm-backward's masked gradient
# and centred input, each read by a reduction and by the input-gradient kernel, were written and read back.
RECOMPUTE_MAX_OPS = 30
RECOMPUTE_MAX_READS = 4


def lowers_in_kernel(g, node: torch.fx.Node) -> bool:
    """Whether `node` is an op this lowering turns into kernel code (not an ATen call), as far as its traced
    values tell: a lowering exists, its dtypes have codegen, and its gate (LOWERING_GATES) lets it in."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if LOWERINGS.get(node.target) is None or _unlowerable_reason(node) is not None:
        return False
    gate = LOWERING_GATES.get(node.target)
    return gate is None or gate(g, node)


def _stride_rank(stride):
    try:
        return int(stride)
    except TypeError:
        return 1 << 40  # symbolic strides are large


def _unlowerable_reason(node) -> str | None:
    """Dtype checks that apply to every lowering: complex and float8 have no codegen."""
    vals = node.meta.get("val")
    vals = list(vals) if isinstance(vals, (tuple, list)) else [vals]
    for arg in node.all_input_nodes:
        vals.append(arg.meta.get("val"))
    for v in vals:
        if isinstance(v, torch.Tensor) and not dtypes.is_supported(v.dtype):
            return f"dtype {v.dtype} has no fused codegen"
    return None


def _guess_device(gm, example_inputs) -> str:
    for v in example_inputs:
        if isinstance(v, torch.Tensor) and v.device.type != "cpu":
            return str(v.device)
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and v.device.type != "cpu":
            return str(v.device)
    return "cpu"
