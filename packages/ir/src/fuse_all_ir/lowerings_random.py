"""Random ops as pointwise code: dropout, rand/randn(_like) and bernoulli with their random numbers made
inside the kernels, where the target's choices say so (`FusionChoices.random_in_kernel`; Triton).

As Inductor does (`inductor_seeds` / `inductor_lookup_seed` / `inductor_random`): each call of the graph
first draws one int64 seed per random op of the graph from torch's generator of the graph's device, in one
ATen call (`aten.randint.low`, as Inductor's `RandomSeeds`): so `torch.manual_seed` makes compiled runs
reproducible and successive calls differ. Under a captured CUDA graph that call is captured too, and the
CUDA generator's graph-safe Philox state gives each replay new seeds (the graph registers the default
generator at capture and advances its offset at every replay). Element `i` (its position in the op's
result, counted contiguously) of random op `k` is then `rand(seeds[k], i)`: a counter-based generator, a
pure function of (seed, offset) that every kernel computing the element agrees on. So a value may be
recomputed by several kernels (recompute_shared_pointwise), split over programs or tiles, and dropout's
output and mask, in whichever kernels they land, agree element by element.

The numbers cannot equal eager's (ATen's generators consume their state differently), only their
distribution: uniform floats of the dtype's precision in [0, 1) (24 bits for float32, 11 for float16, 8 for
bfloat16: ATen's `uniform_real`, so a narrow value never rounds up to 1), normal values by Box-Muller, and
dropout keeping an element with probability 1 - p exactly as ATen's `bernoulli(1 - p)` (p = 0 keeps every
element, p = 1 none). The mask that `native_dropout` returns (saved for the backward by AOTAutograd) is
the compact bool of eager. A target that keeps ATen's random numbers (the C++ target: eager CPU semantics)
runs these ops in ATen.
"""
from __future__ import annotations

import sympy
import torch

from . import dtypes
from .lowering import Unsupported, contiguous_strides, lowers, sym
from .nodes import Node, Value, const, index_value, load, op
from .program import ExternCall, TensorSpec
from .symbolic import linear_index
from .vocabulary import NodeKind, compute_dtype

aten = torch.ops.aten

RANDOM_OPS = frozenset(o for o in (
    aten.native_dropout.default, aten.rand_like.default, aten.randn_like.default, aten.rand.default,
    aten.randn.default, aten.bernoulli.default, aten.bernoulli.p,
) if o is not None)
_INT64 = torch.iinfo(torch.int64)
_SEED_REASON = "the seeds of the kernels' random numbers: one per random op and call, from torch's generator"
# mantissa digits of a uniform value per result dtype: ATen's uniform_real uses this many random bits
_UNIFORM_DIGITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 24}


def _seed(g):
    """The seed of the random op being lowered: element k of the graph's seeds buffer, drawn by one ATen
    call per graph call (made when the first random op is lowered, with one seed per random op)."""
    if not g.random_in_kernel:
        raise Unsupported("the target keeps ATen's random number generator (choices.random_in_kernel)")
    if g.random_seeds is None:
        count = sum(1 for n in g.gm.graph.nodes if n.op == "call_function" and n.target in RANDOM_OPS)
        name = g.new_name()
        spec = TensorSpec("int64", (sympy.Integer(count),), (sympy.Integer(1),), sympy.Integer(0), g.device)
        call = ExternCall(target="aten.randint.low", args=(_INT64.min, _INT64.max, [count]),
                          kwargs={"dtype": torch.int64, "device": torch.device(g.device)}, outputs=(name,),
                          out_specs=(spec,), origins=g._origins(), reason=_SEED_REASON, single_result=True)
        g.externs.append(call)
        g.nodes[name] = Node(name, NodeKind.EXTERN, spec, extern=call, origins=call.origins, reads=set())
        g.random_seeds, g.random_seeds_used = name, 0
    index = g.random_seeds_used
    g.random_seeds_used += 1
    # the seed's position is a launch argument, not a constant of the kernel's source: the kernels of
    # repeated blocks (BERT's 12 layers) stay the same code and compile once (kernel_sharing.py)
    position = sympy.Symbol(f"seed_index{index}", integer=True, nonnegative=True)
    g.size_symbols[position] = str(index)
    g.size_hints[position] = index
    return load(g.random_seeds, position, "int64")


def _traced(g) -> torch.Tensor:
    """The random op's traced result (its size, dtype and device); one on another device than the graph's
    (`torch.rand(..., device="cpu")` in a CUDA graph) stays an ATen call."""
    val = g.current.meta.get("val") if g.current is not None else None
    if isinstance(val, (tuple, list)):
        val = val[0]
    if not isinstance(val, torch.Tensor):
        raise Unsupported("no traced result")
    if val.device.type != torch.device(g.device).type:
        raise Unsupported(f"result on {val.device}, the graph on {g.device}")
    return val


def _random_value(g, size, mode: str):
    """A float32 Value of `size`: element i is `mode`(seed, i), i counted contiguously over `size`."""
    seed = _seed(g)
    strides = contiguous_strides(size)

    def loader(index):
        offset = index_value(linear_index(sympy.Integer(0), index, strides), "int64")
        return op(mode, (seed, offset), "float32")
    return loader


def _no_generator(generator) -> None:
    if generator is not None:
        raise Unsupported("a torch.Generator argument: ATen draws from it")


def _uniform(g, generator=None) -> Value:
    _no_generator(generator)
    val = _traced(g)
    dtype = dtypes.dtype_name(val.dtype)
    if dtype not in _UNIFORM_DIGITS:
        raise Unsupported(f"rand of {dtype}")
    size = tuple(sym(s) for s in val.shape)
    uniform = _random_value(g, size, "rand")
    digits = _UNIFORM_DIGITS[dtype]
    if digits == 24:
        return Value(size, dtype, lambda index: _cast(uniform(index), dtype))
    scale = float(1 << digits)

    def loader(index):
        # the top `digits` bits of the 24: exact in the narrow dtype, so never rounded up to 1.0
        top = op("floor", (op("mul", (uniform(index), const(scale, "float32")), "float32"),), "float32")
        return _cast(op("mul", (top, const(1.0 / scale, "float32")), "float32"), dtype)
    return Value(size, dtype, loader)


def _normal(g, generator=None) -> Value:
    _no_generator(generator)
    val = _traced(g)
    dtype = dtypes.dtype_name(val.dtype)
    if compute_dtype(dtype) not in ("float32", "float64"):
        raise Unsupported(f"randn of {dtype}")
    size = tuple(sym(s) for s in val.shape)
    normal = _random_value(g, size, "randn")
    return Value(size, dtype, lambda index: _cast(normal(index), dtype))


def _cast(e, dtype: str):
    return e if e.dtype == dtype else op("cast", (e,), dtype)


# The factories' arguments (a size or a tensor to match; dtype, layout, device, memory format) are not read:
# the traced value has them all.
@lowers(aten.rand.default, aten.rand_like.default)
def rand(g, _size_or_like, **_factory_kwargs):
    return _uniform(g)


@lowers(aten.randn.default, aten.randn_like.default)
def randn(g, _size_or_like, **_factory_kwargs):
    return _normal(g)


def _bernoulli(g, x: Value, probability, generator) -> Value:
    """1 where a uniform value is below the probability (a float or the element of `x`), else 0."""
    _no_generator(generator)
    val = _traced(g)
    dtype = dtypes.dtype_name(val.dtype)
    size = tuple(sym(s) for s in val.shape)
    acc = compute_dtype(probability.dtype) if isinstance(probability, Value) else "float32"
    if acc not in ("float32", "float64"):
        raise Unsupported(f"bernoulli of {probability.dtype} probabilities")
    uniform = _random_value(g, size, "rand")

    def loader(index):
        if isinstance(probability, Value):
            bound = _cast(probability.loader(index), acc)
            hit = op("lt", (_cast(uniform(index), acc), bound), "bool")
        else:
            hit = op("lt", (uniform(index), const(float(probability), "float32")), "bool")
        return _cast(hit, dtype)
    return Value(size, dtype, loader)


@lowers(aten.bernoulli.default)
def bernoulli(g, x, *, generator=None):
    if x.size != tuple(sym(s) for s in _traced(g).shape):
        raise Unsupported("bernoulli probabilities broadcast to the result")
    return _bernoulli(g, x, x, generator)


@lowers(aten.bernoulli.p)
def bernoulli_p(g, x, p=0.5, *, generator=None):
    return _bernoulli(g, x, p, generator)


@lowers(aten.native_dropout.default)
def native_dropout(g, x, p, train):
    """(x * mask * scale, mask): mask keeps an element with probability 1 - p; scale = 1 / (1 - p), 0 for
    p = 1 (ATen's). A multiplication, as eager's, so a NaN input stays NaN where dropped."""
    size = tuple(x.size)
    if train is False:   # ATen: a copy of the input (never the input itself) and an all-true mask
        return (Value(size, x.dtype, lambda index: x.loader(index)),
                Value(size, "bool", lambda index: const(True, "bool")))
    acc = compute_dtype(x.dtype)
    if acc not in ("float32", "float64"):
        raise Unsupported(f"dropout of {x.dtype}")
    _traced(g)
    keep_probability = 1.0 - float(p)
    scale = 0.0 if keep_probability == 0 else 1.0 / keep_probability
    uniform = _random_value(g, size, "rand")

    def keep(index):
        return op("lt", (uniform(index), const(keep_probability, "float32")), "bool")

    def output(index):
        kept = op("mul", (_cast(x.loader(index), acc), _cast(keep(index), acc)), acc)
        return _cast(op("mul", (kept, const(scale, acc)), acc), x.dtype)
    return Value(size, x.dtype, output), Value(size, "bool", keep)
