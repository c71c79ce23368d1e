"""The IR's vocabulary: element types, `Compute` ops and reductions, each with ONE table of its properties.

Everything the lowering, the validator and the codegens must agree on about a dtype or an op lives here:

* `DTYPE_INFO`: per dtype its class (float / int / bool: which rule table of a codegen applies), the type
  values are *computed* in (float16 and bfloat16 in float32) and its range (the identities of max/min).
* `OP_INFO`: per op its arity, the dtype of its result (the arguments', bool, or any for ``cast``) and the
  dtype classes the IR emits it on. The classes it is never emitted on carry the reason (the lowering
  rewrites the op, or torch refuses it), so a codegen needs rules exactly for the declared classes and
  `tests/ir/test_vocabulary.py` can check every codegen's rule table against this one.
* `REDUCTION_INFO`: per reduction its result dtype, what it takes, its bool form (max of bools is any) and
  whether it is positional (argmax/argmin give the int64 position of an extreme value, not a value);
  `reduction_identity` gives the value an accumulator starts from, per dtype.

Values here are Python values (`math.inf`, `math.nan`, ints, bools); each codegen spells them in its
language (`non_finite` names the special float values so that a table of spellings is enough).

The names are `str` enums whose members compare, hash, format, ``repr`` and serialize exactly as their
plain strings ("float32", "add"), so Programs built with plain strings (tests, older artifacts) and the
string comparisons of existing code keep working; `dtype()`, `op()` and `reduction()` turn either into a
member and reject unknown names with a clear error.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from types import MappingProxyType


class UnsupportedDtype(NotImplementedError):
    """A dtype outside the IR's vocabulary (complex, float8, ...): no codegen has rules for it."""


class _Name(str, enum.Enum):
    """A name of the vocabulary: a str in every respect but its type (``str(m)``, f-strings, ``repr(m)``,
    ``json.dumps(m)``, ``m == "name"`` and ``hash(m)`` all behave as for the plain string)."""
    __str__ = str.__str__
    __format__ = str.__format__

    def __repr__(self) -> str:
        return str.__repr__(self)


# ---- element types -----------------------------------------------------------------------------------

class DTypeClass(_Name):
    FLOAT = "float"
    INT = "int"
    BOOL = "bool"


class DType(_Name):
    BOOL = "bool"
    UINT8 = "uint8"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT32 = "float32"
    FLOAT64 = "float64"


@dataclass(frozen=True)
class DTypeInfo:
    cls: DTypeClass
    compute: DType                 # the type values live in while computed (loads widen, stores narrow)
    bits: int
    lowest: int | float | bool     # the smallest and largest values (-inf/inf for floats)
    highest: int | float | bool


def _int(bits: int, signed: bool = True) -> tuple:
    lo, hi = (-2 ** (bits - 1), 2 ** (bits - 1) - 1) if signed else (0, 2 ** bits - 1)
    return DTypeClass.INT, bits, lo, hi


def _float(bits: int) -> tuple:
    return DTypeClass.FLOAT, bits, -math.inf, math.inf


_SHAPES = {
    DType.BOOL: (DTypeClass.BOOL, 8, False, True),
    DType.UINT8: _int(8, signed=False), DType.INT8: _int(8), DType.INT16: _int(16), DType.INT32: _int(32),
    DType.INT64: _int(64),
    DType.FLOAT16: _float(16), DType.BFLOAT16: _float(16), DType.FLOAT32: _float(32), DType.FLOAT64: _float(64),
}
# float16 and bfloat16 are computed in float32 (as eager does on CPU and every codegen does): the
# narrow types exist only in memory and in the rounding of a `cast` to them. A cast to the value's own
# narrow dtype rounds too: a float16 expression may hold an unrounded float32 intermediate, and the
# lowering rounds every ATen op's result so (`rounding.py`), as eager's float16 tensors do.
_COMPUTED_AS = {DType.FLOAT16: DType.FLOAT32, DType.BFLOAT16: DType.FLOAT32}

DTYPE_INFO: MappingProxyType = MappingProxyType({
    d: DTypeInfo(cls, _COMPUTED_AS.get(d, d), bits, lo, hi) for d, (cls, bits, lo, hi) in _SHAPES.items()
})
DTYPES: tuple[DType, ...] = tuple(DType)
FLOAT_DTYPES: tuple[DType, ...] = tuple(d for d in DType if DTYPE_INFO[d].cls is DTypeClass.FLOAT)
INT_DTYPES: tuple[DType, ...] = tuple(d for d in DType if DTYPE_INFO[d].cls is DTypeClass.INT)


def dtype(name) -> DType:
    """`name` (a string or a `DType`) as a `DType`; `UnsupportedDtype` for anything else."""
    try:
        return DType(name)
    except ValueError:
        raise UnsupportedDtype(f"dtype {name!r} is not in the IR's vocabulary {[d.value for d in DType]}") \
            from None


def dtype_info(name) -> DTypeInfo:
    return DTYPE_INFO[dtype(name)]


def dtype_class(name) -> DTypeClass:
    """Which rule table of a codegen applies to values of `name`: float, int or bool."""
    return DTYPE_INFO[dtype(name)].cls


def is_float(name) -> bool:
    return dtype_class(name) is DTypeClass.FLOAT


def compute_dtype(name) -> DType:
    """The dtype values of `name` are computed in (float16/bfloat16 -> float32, others themselves)."""
    return DTYPE_INFO[dtype(name)].compute


def scalar_value(value, dtype_name):
    """A Python scalar as the value of its dtype's class: bool, int or float (inf/nan stay floats)."""
    cls = dtype_class(dtype_name)
    if cls is DTypeClass.BOOL:
        return bool(value)
    if cls is DTypeClass.INT:
        return int(value)
    return float(value)


class NonFinite(_Name):
    NAN = "nan"
    INF = "inf"
    NEG_INF = "-inf"


def non_finite(value: float) -> NonFinite | None:
    """Which special float `value` is (each codegen has a spelling for each), None for a finite one."""
    if math.isnan(value):
        return NonFinite.NAN
    if math.isinf(value):
        return NonFinite.INF if value > 0 else NonFinite.NEG_INF
    return None


# ---- compute ops ---------------------------------------------------------------------------------------

class Op(_Name):
    NEG = "neg"; ABS = "abs"; EXP = "exp"; EXP2 = "exp2"; EXPM1 = "expm1"; LOG = "log"; LOG2 = "log2"  # noqa: E702
    LOG10 = "log10"; LOG1P = "log1p"; SQRT = "sqrt"; RSQRT = "rsqrt"; SIN = "sin"; COS = "cos"  # noqa: E702
    TAN = "tan"; ASIN = "asin"; ACOS = "acos"; ATAN = "atan"; SINH = "sinh"; COSH = "cosh"  # noqa: E702
    TANH = "tanh"; ASINH = "asinh"; ACOSH = "acosh"; ATANH = "atanh"; ERF = "erf"; ERFC = "erfc"  # noqa: E702
    ERFINV = "erfinv"; SIGMOID = "sigmoid"; FLOOR = "floor"; CEIL = "ceil"; ROUND = "round"  # noqa: E702
    TRUNC = "trunc"; RECIPROCAL = "reciprocal"; SIGN = "sign"; ISNAN = "isnan"; ISINF = "isinf"  # noqa: E702
    ISFINITE = "isfinite"; LOGICAL_NOT = "logical_not"; BITWISE_NOT = "bitwise_not"; CAST = "cast"  # noqa: E702
    LGAMMA = "lgamma"
    ADD = "add"; SUB = "sub"; MUL = "mul"; TRUEDIV = "truediv"; FLOORDIV = "floordiv"  # noqa: E702
    REMAINDER = "remainder"; FMOD = "fmod"; POW = "pow"; MAXIMUM = "maximum"; MINIMUM = "minimum"  # noqa: E702
    ATAN2 = "atan2"; EQ = "eq"; NE = "ne"; LT = "lt"; LE = "le"; GT = "gt"; GE = "ge"  # noqa: E702
    LOGICAL_AND = "logical_and"; LOGICAL_OR = "logical_or"; LOGICAL_XOR = "logical_xor"  # noqa: E702
    BITWISE_AND = "bitwise_and"; BITWISE_OR = "bitwise_or"; BITWISE_XOR = "bitwise_xor"  # noqa: E702
    LSHIFT = "lshift"; RSHIFT = "rshift"; COPYSIGN = "copysign"; HYPOT = "hypot"  # noqa: E702
    WHERE = "where"
    # in-kernel random numbers: (seed, offset) -> a float32 of the counter-based generator (Philox4x32-10
    # of the offset under the seed; every codegen computes the same bits), uniform in [0, 1) or normal
    RAND = "rand"; RANDN = "randn"  # noqa: E702


class OpResult(_Name):
    SAME = "same"        # the dtype of every argument (the lowering casts the arguments first)
    BOOL = "bool"        # comparisons, logical ops and predicates: bool, arguments of one dtype
    ANY = "any"          # cast: the statement's dtype, from any argument dtype
    SELECT = "select"    # where: a bool condition, then two values of the result's dtype
    RANDOM = "random"    # rand/randn: float32, from an integer seed and offset (of one dtype)


@dataclass(frozen=True)
class OpInfo:
    arity: int
    result: OpResult
    # dtype classes of the operands the IR emits the op on ("operand" of `where`: its values), and why it is
    # never emitted on the others: every codegen needs a rule for each emitted class, and only those
    operands: frozenset
    not_emitted: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self):
        missing = set(DTypeClass) - self.operands - set(self.not_emitted)
        assert not missing, f"no reason given why the IR never emits the op on {sorted(missing)}"


F, I, B = DTypeClass.FLOAT, DTypeClass.INT, DTypeClass.BOOL
_ALL = frozenset((F, I, B))
_IN_FLOAT = "the lowering computes it in floating point (integer and bool operands are cast first)"
_ROUNDING_IS_IDENTITY = "the lowering turns rounding of an integer or bool into the identity"
_BOOL_AS_LOGICAL = "the lowering writes it on bools as the logical op (and -> logical_and, ...)"


def _info(arity: int, result: OpResult, operands, **not_emitted: str) -> OpInfo:
    by_class = {DTypeClass(k): reason for k, reason in not_emitted.items()}
    return OpInfo(arity, result, frozenset(operands), MappingProxyType(by_class))


def _float_only(arity: int, result: OpResult = OpResult.SAME, why: str = _IN_FLOAT) -> OpInfo:
    return _info(arity, result, {F}, int=why, bool=why)


_FLOAT_MATH = (Op.EXP, Op.EXP2, Op.EXPM1, Op.LOG, Op.LOG2, Op.LOG10, Op.LOG1P, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS,
               Op.TAN, Op.ASIN, Op.ACOS, Op.ATAN, Op.SINH, Op.COSH, Op.TANH, Op.ASINH, Op.ACOSH, Op.ATANH,
               Op.ERF, Op.ERFC, Op.ERFINV, Op.SIGMOID, Op.RECIPROCAL, Op.LGAMMA)
_COMPARISONS = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
_LOGICAL = (Op.LOGICAL_AND, Op.LOGICAL_OR, Op.LOGICAL_XOR)

OP_INFO: MappingProxyType = MappingProxyType({
    **{o: _float_only(1) for o in _FLOAT_MATH},
    **{o: _float_only(2) for o in (Op.ATAN2, Op.COPYSIGN, Op.HYPOT)},
    **{o: _float_only(1, why=_ROUNDING_IS_IDENTITY) for o in (Op.FLOOR, Op.CEIL, Op.ROUND, Op.TRUNC)},
    Op.TRUEDIV: _float_only(2, why="truediv is on floating values only: the lowering casts integers first"),
    Op.NEG: _info(1, OpResult.SAME, {F, I}, bool="torch refuses negation of bool tensors"),
    Op.ABS: _info(1, OpResult.SAME, _ALL),
    Op.SIGN: _info(1, OpResult.SAME, _ALL),
    Op.ISNAN: _info(1, OpResult.BOOL, _ALL),
    Op.ISINF: _info(1, OpResult.BOOL, _ALL),
    Op.ISFINITE: _info(1, OpResult.BOOL, _ALL),
    Op.LOGICAL_NOT: _info(1, OpResult.BOOL, _ALL),
    Op.BITWISE_NOT: _info(1, OpResult.SAME, {I, B}, float="torch has no bitwise ops on floating tensors"),
    Op.CAST: _info(1, OpResult.ANY, _ALL),
    **{o: _info(2, OpResult.SAME, _ALL) for o in (Op.ADD, Op.MUL, Op.MAXIMUM, Op.MINIMUM)},
    Op.SUB: _info(2, OpResult.SAME, {F, I}, bool="torch refuses subtraction of bool tensors"),
    **{o: _info(2, OpResult.SAME, {F, I}, bool="torch refuses it on bool tensors (the lowering too)")
       for o in (Op.FLOORDIV, Op.REMAINDER, Op.FMOD, Op.POW)},
    **{o: _info(2, OpResult.BOOL, _ALL) for o in (*_COMPARISONS, *_LOGICAL)},
    **{o: _info(2, OpResult.SAME, {I, B}, float="torch has no bitwise ops on floating tensors")
       for o in (Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR)},
    **{o: _info(2, OpResult.SAME, {I}, float="torch has no shifts of floating tensors",
                bool="torch refuses shifts of bool tensors") for o in (Op.LSHIFT, Op.RSHIFT)},
    Op.WHERE: _info(3, OpResult.SELECT, _ALL),
    **{o: _info(2, OpResult.RANDOM, {I}, float="seed and offset are integers (the lowering makes them int64)",
                bool="seed and offset are integers (the lowering makes them int64)") for o in (Op.RAND, Op.RANDN)},
})
assert set(OP_INFO) == set(Op), f"ops without properties: {set(Op) - set(OP_INFO)}"


def op(name) -> Op:
    """`name` (a string or an `Op`) as an `Op`; ValueError naming the vocabulary for anything else."""
    try:
        return Op(name)
    except ValueError:
        raise ValueError(f"{name!r} is not an op of the IR's vocabulary") from None


def op_info(name) -> OpInfo:
    return OP_INFO[op(name)]


def ops_with_arity(arity: int) -> tuple[Op, ...]:
    return tuple(o for o in Op if OP_INFO[o].arity == arity)


def ops_with_result(result: OpResult) -> tuple[Op, ...]:
    return tuple(o for o in Op if OP_INFO[o].result is result)


def operand_dtype(name, arg_dtypes) -> str:
    """The dtype a codegen dispatches `name` on: its values' for `where`, its first argument's otherwise."""
    return arg_dtypes[1] if op(name) is Op.WHERE else arg_dtypes[0]


# ---- reductions ----------------------------------------------------------------------------------------

class ReductionOp(_Name):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    ANY = "any"
    ALL = "all"
    # one-pass variance (Welford, combined by Chan's formula): the mean of the values and the sum of their
    # squared deviations from it (M2). Reduces of both on one argument (and mask) share one accumulator;
    # see welford.py
    WELFORD_MEAN = "welford_mean"
    WELFORD_M2 = "welford_m2"


@dataclass(frozen=True)
class ReductionInfo:
    result: DType | None           # the result's dtype; None: the argument's
    takes: frozenset               # dtype classes of the argument the IR emits it on
    # argmax/argmin: the int64 flat position of the first extreme value (NaN counts as the extreme); a
    # positional reduction keeps a value accumulator ordered like `extreme` beside the position
    extreme: ReductionOp | None = None
    on_bool: ReductionOp | None = None   # the same reduction when argument and result are bool (max -> any)
    empty_is_identity: bool = False      # over no element the result is the identity (eager refuses max/min)
    welford: bool = False                # a statistic of the one-pass variance (may carry a `Reduce.mask`)

    @property
    def positional(self) -> bool:
        return self.extreme is not None


REDUCTION_INFO: MappingProxyType = MappingProxyType({
    ReductionOp.SUM: ReductionInfo(None, _ALL, on_bool=ReductionOp.ANY, empty_is_identity=True),
    ReductionOp.PROD: ReductionInfo(None, _ALL, on_bool=ReductionOp.ALL, empty_is_identity=True),
    ReductionOp.MAX: ReductionInfo(None, _ALL, on_bool=ReductionOp.ANY),
    ReductionOp.MIN: ReductionInfo(None, _ALL, on_bool=ReductionOp.ALL),
    # torch refuses argmax/argmin of bool tensors
    ReductionOp.ARGMAX: ReductionInfo(DType.INT64, frozenset((F, I)), extreme=ReductionOp.MAX),
    ReductionOp.ARGMIN: ReductionInfo(DType.INT64, frozenset((F, I)), extreme=ReductionOp.MIN),
    ReductionOp.ANY: ReductionInfo(DType.BOOL, frozenset((B,)), empty_is_identity=True),
    ReductionOp.ALL: ReductionInfo(DType.BOOL, frozenset((B,)), empty_is_identity=True),
    # the lowering computes variance in floating point (var of integer tensors is refused by torch)
    ReductionOp.WELFORD_MEAN: ReductionInfo(None, frozenset((F,)), welford=True),
    ReductionOp.WELFORD_M2: ReductionInfo(None, frozenset((F,)), welford=True),
})
assert set(REDUCTION_INFO) == set(ReductionOp)


def reduction(name) -> ReductionOp:
    try:
        return ReductionOp(name)
    except ValueError:
        raise ValueError(f"{name!r} is not a reduction of the IR's vocabulary") from None


def reduction_info(name) -> ReductionInfo:
    return REDUCTION_INFO[reduction(name)]


def is_positional(name) -> bool:
    """argmax/argmin: the result is a position, and the accumulator a (value, position) pair."""
    return REDUCTION_INFO[reduction(name)].positional


def is_welford(name) -> bool:
    """welford_mean/welford_m2: statistics of one accumulator (mean, M2, count) per argument."""
    return REDUCTION_INFO[reduction(name)].welford


def reduction_result_dtype(name, arg_dtype) -> DType:
    return reduction_info(name).result or dtype(arg_dtype)


def bool_form(name, arg_dtype, result_dtype) -> ReductionOp:
    """The reduction as written on bools: max/sum of bools into a bool are any, min/prod are all."""
    info = reduction_info(name)
    if info.on_bool is not None and dtype(arg_dtype) is DType.BOOL and dtype(result_dtype) is DType.BOOL:
        return info.on_bool
    return reduction(name)


_IDENTITY = {ReductionOp.SUM: 0, ReductionOp.PROD: 1, ReductionOp.ANY: False, ReductionOp.ALL: True,
             # where a Welford accumulator starts (count 0); over no element the mean is NaN (0 / 0)
             ReductionOp.WELFORD_MEAN: 0, ReductionOp.WELFORD_M2: 0}


def reduction_identity(name, dtype_name):
    """The value an accumulator of reduction `name` over `dtype_name` values starts from (and masked lanes
    hold): as a Python value of the dtype's class. A positional reduction's value accumulator starts
    from its extreme's identity; max/min start from the dtype's lowest/highest value (-inf/inf)."""
    op_ = reduction(name)
    op_ = REDUCTION_INFO[op_].extreme or op_
    if op_ in _IDENTITY:
        return scalar_value(_IDENTITY[op_], dtype_name)
    info = dtype_info(dtype_name)
    return info.lowest if op_ is ReductionOp.MAX else info.highest


# ---- kinds of the IR's objects -------------------------------------------------------------------------

class ExprKind(_Name):
    """`nodes.E.kind`."""
    LOAD = "load"
    CONST = "const"
    INDEX = "index"
    OP = "op"


class NodeKind(_Name):
    """`nodes.Node.kind`: a graph input, a fused computation, or the result of an ATen call."""
    INPUT = "input"
    POINTWISE = "pointwise"
    REDUCTION = "reduction"
    EXTERN = "extern"


class KernelKind(_Name):
    """`program.Kernel.kind`."""
    POINTWISE = "pointwise"
    REDUCTION = "reduction"
