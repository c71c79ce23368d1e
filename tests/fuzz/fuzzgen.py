"""A seeded generator of random tensor programs for differential testing of fuse_all.

`generate(seed, index, **knobs)` returns a `Program`: input specs (shape per call, dtype, memory layout,
value range) and a straight-line body of PyTorch statements. Program (seed, index) is always the same,
so a failure is reproduced from those two numbers alone.

Each statement is proposed from a table of ops, then *validated by running it on meta tensors* for every
call's shapes (so shapes, dtypes and the eager legality of every op come from PyTorch itself). Per value
the generator tracks a conservative interval of its values (to keep exp/log/div/prod in safe domains,
inserting a squashing op first when needed) and whether it is *exact*: computed only from inputs by ops
whose results every correct implementation gets bit-identical (views, neg/abs/max/min/where, casts,
integer and bool arithmetic, floor/round, comparisons). Discontinuous ops (floor, comparisons, argmax,
fmod, float->int casts) are applied to exact values only, so eager, fuse_all and the float64 reference
always take the same branch. In training programs, kinked ops (relu, abs, clamp, max) are applied to
exact values only too (their gradient is discontinuous).

The body uses `cast(v, DTYPE)` for dtype conversions and dtype names F16/BF16/F32/F64/I32/I64/BOOL, so
the float64 reference runs the same text with casts that round like the real program and then widen.
"""
from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

import torch

DTYPE_NAMES = {torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64",
               torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
LOW = (torch.float16, torch.bfloat16)
INTS = (torch.int32, torch.int64)
SIZES = (1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17, 31, 32, 33, 64)
MAX_NUMEL = 6000          # per value, for ordinary programs
BIG_ROWS = (65537, 70001)  # > 2**16 rows, for the few "big" programs
BIG_NUMEL = 300_000
HUGE_SUM = 600_000        # long mode: sums over 0.5-5 M elements (issue 9 item 4)
FLOAT_LIMIT = {torch.float16: 1e3, torch.bfloat16: 1e4, torch.float32: 1e6, torch.float64: 1e6}


@dataclass
class InputSpec:
    name: str
    shapes: list            # one logical shape per call
    dtype: torch.dtype
    perm: tuple             # memory order of the dims (outermost first)
    steps: tuple            # step per dim (sliced layouts)
    expanded: tuple         # dims that are broadcast (stride 0) in memory
    offset: int             # extra storage offset
    lo: float
    hi: float
    requires_grad: bool = False

    def layout_name(self) -> str:
        parts = []
        if self.perm != tuple(range(len(self.perm))):
            parts.append(f"perm{list(self.perm)}")
        if any(s != 1 for s in self.steps):
            parts.append(f"steps{list(self.steps)}")
        if self.expanded:
            parts.append(f"expanded{list(self.expanded)}")
        if self.offset:
            parts.append(f"offset{self.offset}")
        return ",".join(parts) or "contiguous"


@dataclass
class Val:
    name: str
    metas: list             # meta tensor per call
    lo: float
    hi: float
    exact: bool
    is_input: bool = False

    @property
    def meta(self):
        return self.metas[0]

    @property
    def dtype(self):
        return self.meta.dtype

    @property
    def ndim(self):
        return self.meta.dim()

    def bound(self):
        return max(abs(self.lo), abs(self.hi))


@dataclass
class Program:
    seed: int
    index: int
    inputs: list
    lines: list             # (target name, expression, tag)
    outputs: list
    dynamic: bool = False   # compile with dynamic=True, call with each shape set
    train: bool = False
    tags: list = field(default_factory=list)
    exact_names: set = field(default_factory=set)

    @property
    def calls(self) -> int:
        return len(self.inputs[0].shapes)

    def source(self, lines=None, outputs=None) -> str:
        lines = self.lines if lines is None else lines
        outputs = self.outputs if outputs is None else outputs
        args = ", ".join(i.name for i in self.inputs)
        body = [f"    {t} = {e}" for t, e, _ in lines]
        return "\n".join([f"def program({args}):"] + body + [f"    return ({', '.join(outputs)},)"]) + "\n"

    def describe(self) -> str:
        heads = [f"# program seed={self.seed} index={self.index} dynamic={self.dynamic} train={self.train}"]
        for i in self.inputs:
            heads.append(f"# {i.name}: shapes {[tuple(s) for s in i.shapes]} {str(i.dtype)[6:]} {i.layout_name()} "
                         f"values [{i.lo}, {i.hi}]{' requires_grad' if i.requires_grad else ''}")
        return "\n".join(heads) + "\n" + self.source()


def cast(v, dtype):
    return v.to(dtype)


def namespace(reference=False) -> dict:
    """Globals the program text runs in; the reference widens every float cast to float64 after rounding."""
    ns = {"torch": torch, "F": torch.nn.functional, "math": math}
    ns.update({name: dt for dt, name in DTYPE_NAMES.items()})
    if reference:
        def ref_cast(v, dtype):
            v = v.to(dtype)
            return v.to(torch.float64) if dtype.is_floating_point else v
        ns["cast"] = ref_cast
    else:
        ns["cast"] = cast
    return ns


class _Invalid(Exception):
    pass


class Generator:
    def __init__(self, seed, index, *, dynamic_frac=0.15, train_frac=0.15, big_frac=0.02, huge_frac=0.0,
                 max_ops=10, max_numel=MAX_NUMEL):
        self.r = random.Random(f"fuse-all-fuzz:{seed}:{index}")
        self.seed, self.index = seed, index
        r = self.r
        self.dynamic = r.random() < dynamic_frac
        self.train = r.random() < train_frac
        self.big = r.random() < big_frac
        self.huge = r.random() < huge_frac
        self.max_ops = max_ops
        self.vals: list[Val] = []
        self.lines = []
        self.inputs: list[InputSpec] = []
        self.ns = namespace()
        self.counter = 0
        self.tags = []
        self.ncalls = (3 if r.random() < 0.3 else 2) if self.dynamic else 1
        self.limit = BIG_NUMEL if self.big else HUGE_SUM * 4 if self.huge else max_numel
        dts = [torch.float32] * 8 + [torch.float64] * 2 + [torch.float16] * 2 + [torch.bfloat16] * 2 + \
              [torch.int32, torch.int64]
        if self.train:
            dts = [torch.float32] * 4 + [torch.float64]
        self.main_dtype = r.choice(dts)

    # ------------------------------------------------------------------ shapes and inputs
    def _base_shape(self):
        r = self.r
        if self.huge:
            n = r.randint(HUGE_SUM, 2 * HUGE_SUM)
            return [n] if r.random() < 0.5 else [r.choice((3, 5, 8)), n // 5]
        if self.big:
            return [r.choice(BIG_ROWS), r.choice((1, 2, 3))]
        ndim = r.choices((0, 1, 2, 3, 4, 5), (1, 4, 8, 6, 5, 1))[0]
        while True:
            shape = [r.choice(SIZES) if r.random() > 0.03 else 0 for _ in range(ndim)]
            if math.prod(shape) <= self.limit // 2:
                return shape

    def _shape_sets(self, shape):
        """One shape per call; dims >= 2 change between the calls of a dynamic program."""
        sets = [list(shape)]
        for _ in range(1, self.ncalls):
            sets.append([s if s < 2 else max(2, s + self.r.choice((-3, -1, 1, 2, 5))) for s in shape])
        return sets

    def add_input(self, shapes, dtype, lo=None, hi=None):
        r = self.r
        n = len(shapes[0])
        name = f"a{len(self.inputs)}"
        if dtype.is_floating_point:
            if lo is None:
                lo, hi = r.choice(((-2.0, 2.0), (-2.0, 2.0), (0.5, 2.0), (-1.0, 1.0), (-4.0, 4.0)))
        elif dtype == torch.bool:
            lo, hi = 0, 1
        elif lo is None:
            lo, hi = r.choice(((-8, 8), (0, 5), (-3, 3)))
        layout = r.random()
        perm = tuple(range(n))
        if n >= 2 and layout < 0.35:
            perm = tuple(r.sample(range(n), n))
        elif n == 4 and layout < 0.45:
            perm = (0, 2, 3, 1)        # channels-last
        steps = tuple(r.choice((1, 1, 2, 3)) if r.random() < 0.2 else 1 for _ in range(n))
        expanded = tuple(d for d in range(n) if r.random() < 0.1)
        offset = r.choice((0, 0, 0, 1, 5))
        spec = InputSpec(name, shapes, dtype, perm, steps, expanded, offset, lo, hi,
                         requires_grad=self.train and dtype.is_floating_point)
        self.inputs.append(spec)
        # meta tensors with the real layouts: whether `view` is legal depends on the strides
        reals = [make_input(spec, c, torch.Generator().manual_seed(0)) for c in range(len(shapes))]
        metas = [torch.empty_strided(x.shape, x.stride(), dtype=dtype, device="meta") for x in reals]
        v = Val(name, metas, lo, hi, exact=True, is_input=True)
        self.vals.append(v)
        return v

    def _related_shapes(self, base: Val):
        """Shapes that broadcast against `base`: some dims set to 1, some leading dims dropped."""
        r = self.r
        shapes = [list(m.shape) for m in base.metas]
        drop = r.randint(0, len(shapes[0])) if r.random() < 0.3 else 0
        keep1 = [r.random() < 0.3 for _ in shapes[0]]
        return [[1 if k else s for s, k in zip(sh, keep1)][drop:] for sh in shapes]

    # ------------------------------------------------------------------ statements
    def emit(self, expr: str, lo, hi, exact, tag, operands=()) -> Val | None:
        """Validate `expr` on meta tensors for every call; on success define it as a new value."""
        metas = []
        for call in range(self.ncalls):
            env = {v.name: v.metas[call] for v in self.vals}
            try:
                out = eval(expr, self.ns, env)  # noqa: S307 - our own generated text
            except Exception:  # noqa: BLE001 - the op is illegal for these shapes: try another
                return None
            if not isinstance(out, torch.Tensor):
                return None
            metas.append(out)
        if any(m.dim() != metas[0].dim() or m.dtype != metas[0].dtype for m in metas):
            return None
        if max(m.numel() for m in metas) > self.limit:
            return None
        if metas[0].dtype.is_floating_point:
            lim = FLOAT_LIMIT[metas[0].dtype]
            if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) > lim:
                return None
        elif metas[0].dtype != torch.bool:
            info = torch.iinfo(metas[0].dtype)
            if max(abs(lo), abs(hi)) > min(info.max // 4, 2 ** 40):
                return None
        name = f"v{self.counter}"
        self.counter += 1
        self.lines.append((name, expr, tag))
        v = Val(name, metas, lo, hi, exact)
        self.vals.append(v)
        self.tags.append(tag)
        return v

    def pick(self, pred=lambda v: True, recent=True) -> Val | None:
        cands = [v for v in self.vals if pred(v)]
        if not cands:
            return None
        if recent and self.r.random() < 0.6:
            return cands[-1]
        return self.r.choice(cands)

    # squashing: bring a float value into [lo_target, hi_target]
    def squash(self, v: Val, kind="unit") -> Val | None:
        if self.train or self.r.random() < 0.6:
            expr, lo, hi, tag = self.r.choice((
                (f"torch.tanh({v.name})", -1.0, 1.0, "tanh"),
                (f"torch.sin({v.name})", -1.0, 1.0, "sin"),
                (f"torch.sigmoid({v.name}) * 2 - 1", -1.0, 1.0, "sigmoid")))
        else:
            expr, lo, hi, tag = f"torch.clamp({v.name}, -1.0, 1.0)", -1.0, 1.0, "clamp"
        if v.bound() > 50 and tag == "sin":
            expr, tag = f"torch.tanh({v.name})", "tanh"
        out = self.emit(expr, lo, hi, v.exact and tag == "clamp", tag)
        if out is None or kind == "unit":
            return out
        if kind == "pos":   # [0.5, 1.5]
            return self.emit(f"{out.name} * 0.5 + 1.0", 0.5, 1.5, False, "affine")
        return out

    def _float_operand(self, pred=lambda v: True):
        return self.pick(lambda v: v.dtype.is_floating_point and pred(v))

    def _kink_ok(self, v):
        return v.exact or not self.train

    # ------------------------------------------------------------------ op families
    def op_unary(self):
        v = self._float_operand()
        if v is None:
            return
        r = self.r
        b = v.bound()
        name = v.name
        choices = [
            ("sin", lambda: (f"torch.sin({name})", -1, 1, False) if b < 100 else None),
            ("cos", lambda: (f"{name}.cos()", -1, 1, False) if b < 100 else None),
            ("tanh", lambda: (f"torch.tanh({name})", -1, 1, False)),
            ("sigmoid", lambda: (f"torch.sigmoid({name})", 0, 1, False)),
            ("atan", lambda: (f"torch.atan({name})", -1.6, 1.6, False)),
            ("erf", lambda: (f"torch.erf({name})", -1, 1, False)),
            ("gelu", lambda: (f"F.gelu({name})", -0.2, max(v.hi, 0.0), False)),
            ("gelu_tanh", lambda: (f"F.gelu({name}, approximate='tanh')", -0.2, max(v.hi, 0.0), False)),
            ("silu", lambda: (f"F.silu({name})", -0.3, max(v.hi, 0.0), False)),
            ("softplus", lambda: (f"F.softplus({name})", 0, max(v.hi, 0.0) + 0.7, False)),
            ("elu", lambda: (f"F.elu({name})", -1, max(v.hi, 0.0), False)),
            ("hardswish", lambda: (f"F.hardswish({name})", -0.4, max(v.hi, 0.0), False) if self._kink_ok(v) else None),
            ("mish", lambda: (f"F.mish({name})", -0.4, max(v.hi, 0.0), False)),
            ("logsigmoid", lambda: (f"F.logsigmoid({name})", min(v.lo, 0) - 0.7, 0, False)),
            ("neg", lambda: (f"-{name}", -v.hi, -v.lo, v.exact)),
            ("abs", lambda: (f"{name}.abs()", 0, b, v.exact) if self._kink_ok(v) else None),
            ("relu", lambda: (f"torch.relu({name})", 0, max(v.hi, 0), v.exact) if self._kink_ok(v) else None),
            ("square", lambda: (f"{name} * {name}", 0, b * b, False)),
            ("pow2", lambda: (f"{name} ** 2", 0, b * b, False)),
            ("pow3", lambda: (f"torch.pow({name}, 3)", -b ** 3, b ** 3, False) if b < 20 else None),
            ("exp", lambda: (f"torch.exp({name})", math.exp(v.lo), math.exp(v.hi), False) if v.hi < 6 else None),
            ("expm1", lambda: (f"torch.expm1({name})", -1, math.exp(v.hi), False) if v.hi < 6 else None),
            ("exp2", lambda: (f"torch.exp2({name})", 0, 2 ** v.hi, False) if v.hi < 8 else None),
            ("rpow", lambda: (f"2 ** {name}", 0, 2 ** v.hi, False) if v.hi < 8 else None),
            ("sinh", lambda: (f"torch.sinh({name})", -math.sinh(b), math.sinh(b), False) if b < 6 else None),
            ("cosh", lambda: (f"torch.cosh({name})", 1, math.cosh(b), False) if b < 6 else None),
            ("asinh", lambda: (f"torch.asinh({name})", -math.asinh(b), math.asinh(b), False)),
            ("log", lambda: (f"torch.log({name})", math.log(v.lo), math.log(v.hi), False) if v.lo >= 0.3 else None),
            ("log2", lambda: (f"torch.log2({name})", math.log2(v.lo), math.log2(v.hi), False) if v.lo >= 0.3 else None),
            ("log10", lambda: (f"{name}.log10()", -1, math.log10(v.hi), False) if v.lo >= 0.3 else None),
            ("log1p", lambda: (f"torch.log1p({name})", math.log1p(v.lo), math.log1p(v.hi), False) if v.lo >= -0.5 else None),
            ("sqrt", lambda: (f"torch.sqrt({name})", math.sqrt(v.lo), math.sqrt(v.hi), False) if v.lo >= 0.1 else None),
            ("rsqrt", lambda: (f"torch.rsqrt({name})", v.hi ** -0.5, v.lo ** -0.5, False) if v.lo >= 0.3 else None),
            ("reciprocal", lambda: (f"torch.reciprocal({name})", 1 / v.hi, 1 / v.lo, False) if v.lo >= 0.3 else None),
            ("asin", lambda: (f"torch.asin({name})", -1.6, 1.6, False) if b <= 0.9 else None),
            ("acos", lambda: (f"torch.acos({name})", 0, 3.2, False) if b <= 0.9 else None),
            ("atanh", lambda: (f"torch.atanh({name})", -1.5, 1.5, False) if b <= 0.9 else None),
            ("erfinv", lambda: (f"torch.erfinv({name})", -1.2, 1.2, False) if b <= 0.8 else None),
            ("acosh", lambda: (f"torch.acosh({name})", 0, math.acosh(max(v.hi, 1.3)), False) if v.lo >= 1.2 else None),
            ("tan", lambda: (f"torch.tan({name})", -3, 3, False) if b <= 1.2 else None),
            ("lgamma", lambda: (f"torch.lgamma({name})", -0.2, math.lgamma(max(v.hi, 2.0)) + 1, False) if v.lo >= 0.5 and v.hi < 20 else None),
            ("clamp", lambda: (f"torch.clamp({name}, {-0.5 * b:.3g}, {0.7 * b:.3g})", -0.5 * b, 0.7 * b, v.exact) if self._kink_ok(v) else None),
            ("hardtanh", lambda: (f"F.hardtanh({name})", -1, 1, v.exact) if self._kink_ok(v) else None),
            ("leaky_relu", lambda: (f"F.leaky_relu({name}, 0.1)", min(0.1 * v.lo, 0), max(v.hi, 0), False) if self._kink_ok(v) else None),
            ("scale", lambda: (f"{name} * {r.choice((0.5, 2, -1.5, 3))}", -3 * b, 3 * b, False)),
            ("shift", lambda: (f"{name} + {r.choice((0.5, 1, -2.25))}", v.lo - 2.25, v.hi + 1, False)),
            ("rsub", lambda: (f"1.5 - {name}", 1.5 - v.hi, 1.5 - v.lo, False)),
            ("div_scalar", lambda: (f"{name} / 3.0", v.lo / 3, v.hi / 3, False)),
        ]
        tag, make = r.choice(choices)
        spec = make()
        if spec is None:       # out of the op's safe domain: squash first, then apply
            base = self.squash(v, "pos" if tag in ("log", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "acosh",
                                                   "lgamma") else "unit")
            if base is None:
                return
            v, b, name = base, base.bound(), base.name
            if tag == "acosh":
                base = self.emit(f"{name} + 1.0", 1.5, 2.5, False, "shift")
                if base is None:
                    return
                v, b, name = base, base.bound(), base.name
            spec = make()
            if spec is None:
                return
        expr, lo, hi, exact = spec
        self.emit(expr, min(lo, hi), max(lo, hi), exact, tag)

    def op_binary(self):
        r = self.r
        a = self.pick(lambda v: v.dtype != torch.bool)
        if a is None:
            return
        compatible = [v for v in self.vals if v is not a and v.dtype != torch.bool and self._broadcasts(a, v)]
        if compatible and r.random() < 0.7:
            b = r.choice(compatible)
        else:
            dt = a.dtype if r.random() < 0.8 else r.choice((torch.float32, torch.float64, torch.float16, a.dtype))
            b = self.add_input(self._related_shapes(a), dt)
        if r.random() < 0.5:
            a, b = b, a
        both_float = a.dtype.is_floating_point or b.dtype.is_floating_point
        both_exact = a.exact and b.exact
        A, B = a.name, b.name
        ba, bb = a.bound(), b.bound()
        ops = [("add", f"{A} + {B}", a.lo + b.lo, a.hi + b.hi, not both_float),
               ("sub", f"torch.sub({A}, {B})", a.lo - b.hi, a.hi - b.lo, not both_float),
               ("mul", f"{A} * {B}", -ba * bb, ba * bb, not both_float),
               ("add_alpha", f"torch.add({A}, {B}, alpha=2)", -ba - 2 * bb, ba + 2 * bb, not both_float)]
        if self._kink_ok(a) and self._kink_ok(b):
            ops += [("maximum", f"torch.maximum({A}, {B})", max(a.lo, b.lo), max(a.hi, b.hi), both_exact),
                    ("minimum", f"torch.minimum({A}, {B})", min(a.lo, b.lo), min(a.hi, b.hi), both_exact)]
        if b.lo >= 0.3:
            ops.append(("div", f"{A} / {B}", -ba / b.lo, ba / b.lo, False))
        if both_float and a.lo >= 0.3 and bb <= 3:
            ops.append(("pow", f"torch.pow({A}, {B})", 0, max(a.hi, 1) ** bb, False))
        if both_float and b.lo >= 0.1:
            ops.append(("atan2", f"torch.atan2({A}, {B})", -1.6, 1.6, False))
        if both_float:
            ops.append(("hypot", f"torch.hypot({A}, {B})", 0, ba + bb, False))
        if b.exact and both_float:
            ops.append(("copysign", f"torch.copysign({A}, {B})", -ba, ba, a.exact))
        if both_exact and (b.lo >= 1 or b.hi <= -1) and not both_float:
            ops += [("floor_divide", f"torch.floor_divide({A}, {B})", -ba, ba, True),
                    ("remainder", f"torch.remainder({A}, {B})", -bb, bb, True),
                    ("fmod", f"torch.fmod({A}, {B})", -bb, bb, True)]
        if not both_float and a.dtype != torch.bool and b.dtype != torch.bool:
            ops += [("bitwise_and", f"{A} & {B}", -max(ba, bb) - 1, max(ba, bb) + 1, True),
                    ("bitwise_xor", f"torch.bitwise_xor({A}, {B})", -2 * max(ba, bb) - 1, 2 * max(ba, bb) + 1, True),
                    ("bitwise_or", f"{A} | {B}", -2 * max(ba, bb) - 1, 2 * max(ba, bb) + 1, True)]
        if both_exact:
            ops += [("lt", f"{A} < {B}", 0, 1, True), ("ge", f"torch.ge({A}, {B})", 0, 1, True),
                    ("eq", f"{A} == {B}", 0, 1, True), ("ne", f"{A} != {B}", 0, 1, True)]
        tag, expr, lo, hi, exact = r.choice(ops)
        self.emit(expr, lo, hi, exact, tag)

    def _broadcasts(self, a: Val, b: Val) -> bool:
        try:
            shapes = [torch.broadcast_shapes(x.shape, y.shape) for x, y in zip(a.metas, b.metas)]
        except RuntimeError:
            return False
        return all(math.prod(s) <= self.limit for s in shapes)

    def op_scalar_or_int(self):
        """Integer/bool-specific ops and ops with scalars; float <-> int casts."""
        r = self.r
        v = self.pick(lambda v: v.exact)
        if v is None:
            return
        N, b = v.name, v.bound()
        ops = []
        if v.dtype.is_floating_point:
            ops += [("floor", f"torch.floor({N})", math.floor(v.lo), math.ceil(v.hi), True),
                    ("ceil", f"{N}.ceil()", math.floor(v.lo), math.ceil(v.hi), True),
                    ("round", f"torch.round({N})", math.floor(v.lo), math.ceil(v.hi), True),
                    ("trunc", f"torch.trunc({N})", math.floor(v.lo), math.ceil(v.hi), True),
                    ("sign", f"torch.sign({N})", -1, 1, True),
                    ("gt_scalar", f"{N} > 0.25", 0, 1, True),
                    ("to_int", f"cast({N}, {r.choice(('I32', 'I64'))})", -b, b, True),
                    ("fmod_scalar", f"torch.fmod({N}, 0.75)", -0.75, 0.75, True),
                    ("remainder_scalar", f"torch.remainder({N}, 1.5)", 0, 1.5, True)]
        elif v.dtype == torch.bool:
            ops += [("logical_not", f"~{N}", 0, 1, True),
                    ("bool_to_float", f"cast({N}, {r.choice(('F32', 'F16', 'F64'))})", 0, 1, True),
                    ("bool_to_int", f"cast({N}, I64)", 0, 1, True)]
            other = self.pick(lambda w: w.dtype == torch.bool and w is not v and self._broadcasts(v, w), recent=False)
            if other is not None:
                ops += [("logical_and", f"torch.logical_and({N}, {other.name})", 0, 1, True),
                        ("logical_or", f"{N} | {other.name}", 0, 1, True),
                        ("logical_xor", f"torch.logical_xor({N}, {other.name})", 0, 1, True)]
        else:
            ops += [("int_floordiv", f"{N} // 3", -b, b, True), ("int_mod", f"{N} % 5", 0, 5, True),
                    ("int_neg", f"-{N}", -v.hi, -v.lo, True), ("int_abs", f"torch.abs({N})", 0, b, True),
                    ("bitwise_not", f"~{N}", -b - 1, b + 1, True),
                    ("int_to_float", f"cast({N}, {r.choice(('F32', 'F64', 'F16', 'BF16'))})", v.lo, v.hi, True),
                    ("int_true_div", f"{N} / 4", v.lo / 4, v.hi / 4, False),
                    ("int_mul_scalar", f"{N} * 3", -3 * b, 3 * b, True),
                    ("int_clamp", f"torch.clamp({N}, min=-2, max=3)", -2, 3, True),
                    ("shift_left", f"torch.bitwise_left_shift({N}, 2)", -4 * b, 4 * b, True),
                    ("to_bool", f"cast({N}, BOOL)", 0, 1, True),
                    ("int_cast_other", f"cast({N}, {'I64' if v.dtype == torch.int32 else 'I32'})", v.lo, v.hi, True),
                    ("int_gt", f"{N} > 1", 0, 1, True)]
        tag, expr, lo, hi, exact = r.choice(ops)
        self.emit(expr, lo, hi, exact, tag)

    def op_where(self):
        cond = self.pick(lambda v: v.dtype == torch.bool, recent=False)
        if cond is None:
            a = self.pick(lambda v: v.exact and v.dtype != torch.bool)
            if a is None:
                return
            cond = self.emit(f"{a.name} > {0 if a.lo < 0 < a.hi else (a.lo + a.hi) / 2:.3g}", 0, 1, True, "gt_scalar")
            if cond is None:
                return
        x = self.pick(lambda v: v.dtype != torch.bool and self._broadcasts(v, cond))
        if x is None:
            return
        r = self.r
        y = self.pick(lambda v: v is not x and v.dtype != torch.bool and self._broadcasts(v, cond)
                      and self._broadcasts(v, x), recent=False)
        if y is None or r.random() < 0.3:
            c = r.choice((0.0, 1.5, -2.0)) if x.dtype.is_floating_point else r.choice((0, 3))
            if r.random() < 0.5:
                self.emit(f"torch.where({cond.name}, {x.name}, {c})", min(x.lo, c), max(x.hi, c), x.exact, "where_scalar")
            else:
                self.emit(f"{x.name}.masked_fill({cond.name}, {c})", min(x.lo, c), max(x.hi, c), x.exact, "masked_fill")
            return
        self.emit(f"torch.where({cond.name}, {x.name}, {y.name})", min(x.lo, y.lo), max(x.hi, y.hi),
                  x.exact and y.exact, "where")

    def op_view(self):
        r = self.r
        v = self.pick(lambda v: v.ndim >= 1)
        if v is None:
            return
        n, N = v.ndim, v.name
        shape = list(v.meta.shape)
        d = r.randrange(n)
        d2 = r.randrange(n)
        perm = list(range(n))
        r.shuffle(perm)
        a = r.choice((0, 1, 2, -3))
        s = r.choice((1, 2, 3))
        idx = ":, " * d
        options = [
            ("transpose", f"{N}.transpose({d}, {d2})"), ("permute", f"{N}.permute({perm})"),
            ("slice", f"{N}[{idx}{a}:{r.choice(('', '-1', '5'))}:{s}]"),
            ("narrow", f"{N}.narrow({d}, 1, {N}.shape[{d}] - 2)" if r.random() < 0.5 else f"{N}[{idx}1:]"),
            ("select", f"{N}[{idx}{r.choice((0, 1, -1))}]"), ("select_fn", f"{N}.select({d}, -1)"),
            ("flip", f"torch.flip({N}, {sorted({d, d2})})"),
            ("unsqueeze", f"{N}.unsqueeze({r.randint(-n - 1, n)})"),
            ("expand", f"{N}.unsqueeze({d}).expand({', '.join(['-1'] * d + [str(r.choice((2, 3, 5)))] + ['-1'] * (n - d))})"),
            ("expand1", f"{N}.expand({', '.join(str(r.choice((2, 3))) if x == 1 else '-1' for x in shape)})"),
            ("squeeze", f"{N}.squeeze({d})" if shape[d] == 1 else f"{N}.squeeze()"),
            ("flatten", f"{N}.flatten({min(d, d2)}, {max(d, d2)})"),
            ("reshape_minus1", f"{N}.reshape(-1)"), ("view_minus1", f"{N}.view(-1)"),
            ("unflatten", f"{N}.unflatten({d}, ({r.choice((2, 3))}, -1))"),
            ("reshape_split", f"{N}.reshape({', '.join(f'{N}.shape[{i}]' for i in range(d))}{', ' if d else ''}{r.choice((2, 3))}, -1)"),
            ("movedim", f"torch.movedim({N}, {d}, {d2})"),
            ("t", f"{N}.t()" if n <= 2 else f"{N}.mT"),
            ("contiguous", f"{N}.contiguous()" if r.random() < 0.5 else f"{N}.clone(memory_format=torch.channels_last)"),
            ("chunk", f"{N}.chunk(2, {d})[{r.choice((0, -1))}]"), ("split", f"torch.split({N}, 3, {d})[0]"),
            ("unbind", f"{N}.unbind({d})[-1]" if shape[d] <= 8 else f"{N}.select({d}, 0)"),  # 1 output per slice
            ("diagonal", f"{N}.diagonal(0, {d}, {d2})"),
            ("roll", f"torch.roll({N}, 1, {d})"),
        ]
        tag, expr = r.choice(options)
        self.emit(expr, v.lo, v.hi, v.exact, tag)

    def op_cat_pad(self):
        r = self.r
        v = self.pick(lambda v: v.ndim >= 1)
        if v is None:
            return
        d = r.randrange(v.ndim)
        N = v.name
        same = [w for w in self.vals if w is not v and w.dtype == v.dtype and w.ndim == v.ndim and all(
            self._cat_ok(x, y, d) for x, y in zip(v.metas, w.metas))]
        choice = r.random()
        if same and choice < 0.4:
            w = r.choice(same)
            self.emit(f"torch.cat([{N}, {w.name}], {d})", min(v.lo, w.lo), max(v.hi, w.hi), v.exact and w.exact, "cat")
        elif choice < 0.6:
            self.emit(f"torch.stack([{N}, {N} * 2], {d})", min(v.lo * 2, v.lo), max(v.hi * 2, v.hi), False, "stack")
        else:
            pads = [r.choice((0, 1, 2)) for _ in range(2 * min(v.ndim, 2))]
            self.emit(f"F.pad({N}, {pads}, value={r.choice((0.0, 1.0))})", min(v.lo, 0), max(v.hi, 1), v.exact,
                      "pad")

    @staticmethod
    def _cat_ok(x, y, d):
        return all(a == b for i, (a, b) in enumerate(zip(x.shape, y.shape)) if i != d)

    def op_reduce(self):
        r = self.r
        v = self.pick()
        if v is None:
            return
        n, N = v.ndim, v.name
        keep = r.random() < 0.4
        k = r.randint(1, max(1, n)) if n else 0
        dims = sorted(r.sample(range(n), k)) if n else []
        if r.random() < 0.5:
            dims = [dd - n if r.random() < 0.3 else dd for dd in dims]
        dim_arg = (str(dims[0]) if len(dims) == 1 and r.random() < 0.5 else str(tuple(dims))) if dims else "()"
        if n and r.random() < 0.15:
            dim_arg = None
        count = max((math.prod(m.shape[dd] for dd in dims) if dims and dim_arg else m.numel()) for m in v.metas)
        kw = f", keepdim={keep}" if dim_arg is not None else ""
        dpart = f"{dim_arg}{kw}" if dim_arg is not None else ""
        one = dims[0] if dims else 0
        isf = v.dtype.is_floating_point
        b = v.bound()
        ops = [("sum", f"{N}.sum({dpart})", -b * count, b * count, not isf),
               ("amax", f"{N}.amax({dpart})" if dim_arg is not None else f"{N}.amax()", v.lo, v.hi, v.exact)
               if self._kink_ok(v) else None,
               ("amin", f"torch.amin({N}, {dpart})" if dim_arg is not None else f"torch.amin({N})", v.lo, v.hi, v.exact)
               if self._kink_ok(v) else None]
        if isf:
            ops += [("mean", f"{N}.mean({dpart})", v.lo, v.hi, False),
                    ("var", f"{N}.var({dpart}{', ' if dpart else ''}correction={r.choice((0, 1))})", 0, 4 * b * b, False),
                    ("std", f"torch.std({N}, {dim_arg or 'None'}, keepdim={keep})", 0, 2 * b, False),
                    ("softmax", f"torch.softmax({N}, {one})" if n else None, 0, 1, False),
                    ("log_softmax", f"F.log_softmax({N}, {one})" if n else None, v.lo - v.hi - math.log(max(count, 1)) - 1, 0, False),
                    ("logsumexp", f"torch.logsumexp({N}, {one})" if n else None, v.lo, v.hi + math.log(max(count, 1)), False),
                    ("layer_norm", f"F.layer_norm({N}, {list(v.meta.shape[-1:])})" if n else None, -50, 50, False),
                    ("vector_norm", f"torch.linalg.vector_norm({N}, dim={dim_arg or 'None'})", 0, b * math.sqrt(count), False)]
            if count <= 24 and (0.5 <= v.lo and v.hi <= 1.5):
                ops.append(("prod", f"{N}.prod({one}{', keepdim=True' if keep else ''})" if n else f"{N}.prod()",
                            -1.5 ** count, 1.5 ** count, False))
            elif count <= 24 and not self.train:
                sq = self.squash(v, "pos")
                if sq is not None:
                    ops.append(("prod", f"{sq.name}.prod({one})" if n else f"{sq.name}.prod()", 0, 1.5 ** count, False))
        elif v.dtype != torch.bool:
            if count <= 16 and b <= 3:
                ops.append(("int_prod", f"{N}.prod({one})" if n else f"{N}.prod()", -b ** count, b ** count, True))
        else:
            ops += [("any", f"{N}.any({one})" if n else f"{N}.any()", 0, 1, True),
                    ("all", f"torch.all({N})", 0, 1, True)]
        if v.exact and v.dtype != torch.bool:
            ops += [("argmax", f"{N}.argmax({one}{', keepdim=True' if keep else ''})" if n and r.random() < 0.7
                     else f"{N}.argmax()", 0, count, True),
                    ("argmin", f"torch.argmin({N}, {one})" if n else f"torch.argmin({N})", 0, count, True),
                    ("max_dim", f"{N}.max({one}, keepdim={keep})[{r.choice((0, 1))}]" if n else f"{N}.max()",
                     min(v.lo, 0), max(v.hi, count), True)]
        ops = [o for o in ops if o is not None and o[1] is not None]
        tag, expr, lo, hi, exact = r.choice(ops)
        if tag == "argmax" or tag == "argmin" or tag == "max_dim":
            lo, hi = min(lo, 0), max(hi, count)
        self.emit(expr, lo, hi, exact, tag)

    def op_size_arith(self):
        """Sizes used as values: symbolic under dynamic shapes (issue 9 items 2 and 7)."""
        r = self.r
        v = self.pick(lambda v: v.ndim >= 1)
        if v is None:
            return
        d = r.randrange(v.ndim)
        N = v.name
        sizes = [m.shape[d] for m in v.metas]
        lo_n, hi_n = min(sizes), max(sizes)
        if v.dtype.is_floating_point:
            opts = [("size_recip", f"{N} * (1.0 / {N}.shape[{d}])", min(v.lo, 0), max(v.hi, 0), False) if lo_n > 0 else None,
                    ("size_div", f"{N} / {N}.shape[{d}]", min(v.lo, 0), max(v.hi, 0), False) if lo_n > 0 else None,
                    ("size_add", f"{N} + {N}.shape[{d}]", v.lo, v.hi + hi_n, False)]
        else:
            opts = [("size_add", f"{N} + {N}.shape[{d}]", v.lo, v.hi + hi_n, True),
                    ("size_floordiv", f"{N} * ({N}.shape[{d}] // 2)", -v.bound() * hi_n, v.bound() * hi_n, True)]
        opts.append(("arange", f"torch.arange({N}.shape[{d}])", 0, hi_n, True))
        opts = [o for o in opts if o]
        tag, expr, lo, hi, exact = r.choice(opts)
        self.emit(expr, lo, hi, exact, tag)

    # ------------------------------------------------------------------ driver
    FAMILIES = (("unary", 6), ("binary", 5), ("view", 4), ("reduce", 4), ("scalar_or_int", 2), ("where", 1),
                ("cat_pad", 1), ("size_arith", 1))

    def program(self) -> Program:
        r = self.r
        shapes = self._shape_sets(self._base_shape())
        first = self.add_input(shapes, self.main_dtype)
        if r.random() < 0.5 and not (self.huge or self.big):
            self.add_input(self._related_shapes(first), self.main_dtype if r.random() < 0.7 else r.choice(
                (torch.float32, torch.int64, torch.bool, torch.float16)))
        if self.huge:
            self.emit(f"{first.name}.sin() * 2 + {first.name}", -4, 4, False, "sin")
            self.emit(f"v0.sum({r.choice(('', '-1', '0'))})", -1e6, 1e6, False, "huge_sum")
        names, weights = zip(*self.FAMILIES)
        steps = r.randint(2, self.max_ops) if not self.huge else 1
        for _ in range(steps * 3):
            if len(self.lines) >= steps:
                break
            getattr(self, "op_" + r.choices(names, weights)[0])()
        computed = [v for v in self.vals if not v.is_input]
        if not computed:
            v = self.vals[0]
            self.emit(f"{v.name} * 2" if v.dtype != torch.bool else f"~{v.name}", -2 * v.bound(), 2 * v.bound(),
                      v.dtype != torch.bool or True, "scale")
            computed = [v for v in self.vals if not v.is_input]
        used = set()
        for _, expr, _ in self.lines:
            used.update(re.findall(r"\b[av]\d+\b", expr))
        sinks = [v for v in computed[:-1] if v.name not in used]
        outs = [computed[-1]] + r.sample(sinks, min(len(sinks), 2))
        if r.random() < 0.2 and len(computed) > 1:
            extra = r.choice(computed[:-1])
            if extra not in outs:
                outs.append(extra)
        if self.train and not any(o.dtype.is_floating_point for o in outs):
            fl = [v for v in computed if v.dtype.is_floating_point]
            if fl:
                outs.append(fl[-1])
        return Program(self.seed, self.index, self.inputs, self.lines, [o.name for o in outs],
                       dynamic=self.dynamic, train=self.train, tags=self.tags,
                       exact_names={v.name for v in self.vals if v.exact})


def generate(seed: int, index: int, **knobs) -> Program:
    return Generator(seed, index, **knobs).program()


# ---------------------------------------------------------------------- inputs
def make_input(spec: InputSpec, call: int, gen: torch.Generator) -> torch.Tensor:
    """A tensor of `spec.shapes[call]` with the spec's memory layout; values uniform in [lo, hi]."""
    shape = list(spec.shapes[call])
    n = len(shape)
    phys = [1 if d in spec.expanded else shape[d] * spec.steps[d] + (1 if spec.steps[d] > 1 else 0)
            for d in range(n)]
    base_shape = [phys[d] for d in spec.perm]
    count = math.prod(base_shape) + spec.offset
    if spec.dtype.is_floating_point:
        flat = torch.rand(count, generator=gen, dtype=torch.float64) * (spec.hi - spec.lo) + spec.lo
    elif spec.dtype == torch.bool:
        flat = torch.rand(count, generator=gen) < 0.5
    else:
        flat = torch.randint(int(spec.lo), int(spec.hi) + 1, (count,), generator=gen, dtype=torch.int64)
    flat = flat.to(spec.dtype)
    base = flat[spec.offset:].view(base_shape)
    inverse = [spec.perm.index(d) for d in range(n)]
    x = base.permute(inverse)
    for d in range(n):
        if d not in spec.expanded and spec.steps[d] > 1:
            x = x.narrow(d, 1, shape[d] * spec.steps[d] - 1 if shape[d] else 0)[(slice(None),) * d + (slice(None, None, spec.steps[d]),)]
    x = x.expand(shape)
    assert list(x.shape) == shape, (x.shape, shape)
    return x.detach().requires_grad_(spec.requires_grad)
