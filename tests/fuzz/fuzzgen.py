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

The generator is split in three: this module (the driver: inputs, validation of each statement, outputs),
`fuzzgen_pointwise` and `fuzzgen_shape_ops` (the op families, mixed into `Generator`); the data types and
`make_input` are in `fuzzgen_types` and re-exported here.
"""
from __future__ import annotations

import math
import random
import re

import torch

from fuzzgen_pointwise import PointwiseOps
from fuzzgen_shape_ops import ShapeOps
from fuzzgen_types import (BIG_NUMEL, BIG_ROWS, DTYPE_NAMES, FLOAT_LIMIT, FLOATS, HUGE_SUM, INTS, LOW,  # noqa: F401
                           MAX_NUMEL, SIZES, InputSpec, Program, Val, cast, make_input, namespace)


class Generator(PointwiseOps, ShapeOps):
    def __init__(self, seed, index, *, dynamic_frac=0.15, train_frac=0.15, big_frac=0.02, huge_frac=0.0,
                 half_frac=0.0, max_ops=10, max_numel=MAX_NUMEL):
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
        self.limit = HUGE_SUM * 4 if self.huge else BIG_NUMEL if self.big else max_numel  # as _base_shape
        dts = [torch.float32] * 8 + [torch.float64] * 2 + [torch.float16] * 2 + [torch.bfloat16] * 2 + \
              [torch.int32, torch.int64]
        if self.train:   # low precision too: CPU keeps some saved tensors in it (layer_norm's mean and rstd)
            dts = [torch.float32] * 6 + [torch.float64] * 2 + [torch.float16, torch.bfloat16]
        self.main_dtype = r.choice(dts)
        # `half_frac`: a share of programs made float16/bfloat16 (a stream of its own: without it, programs
        # are what they always were). A seventh of the default mix is low precision.
        half = random.Random(f"fuse-all-fuzz-half:{seed}:{index}")
        if half.random() < half_frac:
            self.main_dtype = half.choice((torch.float16, torch.bfloat16))

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
            other = [s if s < 2 else max(2, s + self.r.choice((-3, -1, 1, 2, 5))) for s in shape]
            # a big program's (70001, 2) may not grow to (70003, 7): every statement would be refused
            # for its size and the program left without one (seed 46 index 310 --max-numel 3000)
            sets.append(other if math.prod(other) <= self.limit else list(shape))
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

    def _view_of_an_input(self) -> Val | None:
        """A view of an input, preferably one with a storage offset, to return: under dynamic shapes
        AOTAutograd rebuilds an output that aliases an input from the returned tensor's own storage offset
        (a copy returned in its place read the wrong elements: fuzz seed 13 index 336)."""
        inputs = [v for v in self.vals if v.is_input and v.ndim >= 1]
        if not inputs:
            return None
        specs = {s.name: s for s in self.inputs}
        offset = [v for v in inputs if specs[v.name].offset or any(step > 1 for step in specs[v.name].steps)]
        count = len(self.vals)
        self.op_view(self.r.choice(offset or inputs))
        return self.vals[-1] if len(self.vals) > count else None

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
        if r.random() < (0.5 if self.dynamic else 0.1):
            view = self._view_of_an_input()
            if view is not None:
                outs.append(view)
        shifted = self.shifted_read_output()   # last: draws from a stream of its own
        if shifted is not None:
            outs.append(shifted)
        broadcast_view = self.broadcast_view_output()   # after it: adds a value that it would draw from
        if broadcast_view is not None:
            outs.append(broadcast_view)
        clamped_slice = self.clamped_slice_output()   # after both, for the same reason
        if clamped_slice is not None:
            outs.append(clamped_slice)
        broadcast_sum = self.broadcast_sum_output()   # after those, for the same reason
        if broadcast_sum is not None:
            outs.append(broadcast_sum)
        gathered = self.gather_output()   # after those, for the same reason
        if gathered is not None:
            outs.append(gathered)
        product = self.matmul_output()   # after those, for the same reason
        if product is not None:
            outs.append(product)
        convolved = self.grouped_conv_output()   # last of all, for the same reason
        if convolved is not None:
            outs.append(convolved)
        return Program(self.seed, self.index, self.inputs, self.lines, [o.name for o in outs],
                       dynamic=self.dynamic, train=self.train, tags=self.tags,
                       exact_names={v.name for v in self.vals if v.exact})


def generate(seed: int, index: int, **knobs) -> Program:
    return Generator(seed, index, **knobs).program()
