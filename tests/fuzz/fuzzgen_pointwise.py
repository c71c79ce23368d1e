"""Op families of the generator that compute element by element: unary math (with safe domains), binary
ops with broadcasting, integer/bool/scalar ops and float<->int casts, and `where`/`masked_fill`."""
from __future__ import annotations

import math

import torch

from fuzzgen_types import Val


class PointwiseOps:
    """Mixed into `fuzzgen.Generator` (uses its `r`, `vals`, `pick`, `emit`, `squash`, `add_input`)."""

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
