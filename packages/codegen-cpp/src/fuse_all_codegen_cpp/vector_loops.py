"""float16 loops written with explicit vectors, for F16C's conversions (vec.h).

GCC 12 vectorises no float <-> float16 conversion in an `omp simd` loop, so the prelude emulates them with
integer ops: ~11 vector ops per load and ~8 per rounding, and a float16 pointwise chain rounds after every
ATen op (half_chain_f16_4e6: 6 roundings, 1.58x Inductor's time with eager's rounding, which converts with
`vcvtps2ph`/`vcvtph2ps`). A loop whose statements are all of a small set (contiguous float16/float32 loads and
stores, + - * /, neg, abs, exp, sigmoid, the libm functions libmvec vectorises, roundings to float16) is
written a second time with GCC vector types: `FA_VEC` lanes per step (vec.h: 16 with AVX-512, 8 with AVX2,
0 without F16C), the same expressions (the helpers are overloaded for vectors), the leftover elements by the
scalar statements. Pointwise kernels' innermost loops, and the phases of row reductions over one dim whose
accumulators are float sums (without SUM_BLOCK blocks), max or min: each lane accumulates apart, the lanes
combine after the loop (sums pairwise). The portable `omp simd` loop stays in the source, in the `#else`
branch: the compiler's target macros (`-march=native`, whose CPU is part of the cache key) choose, so a host
without F16C compiles the loop it always had. Both paths give the same values, except for sums (lanes
combined in another order than GCC's; add + LayerNorm + GELU: 450 of 3.1M float16 results 1 ulp apart, and as
close to eager as before); a stored NaN keeps its payload's top bits (F16C, as torch's vector kernels) where
the portable conversion writes 0x7E00. tests/codegen_cpp/test_vec_half.py.

Anything else in the loop (a mask, an integer, a strided load, another libm call) keeps the portable loop
only; so do loops of bfloat16 and float32 alone, which GCC vectorises well as they are.
"""
from __future__ import annotations

import functools
from pathlib import Path

import sympy

from fuse_all_ir.program import Compute, Const, Load, Reduce, Store

from . import rules
from .choices import size_hint
from .index_printer import c_name, cpp_index

VECTOR_LANES = 16      # a loop shorter than this (by its size hint) keeps the portable loop only

# float ops whose renderer template reads the same on vectors (vec.h overloads fa_expf and fa_round_h), or
# whose vector form differs (abs: no __builtin_fabsf on vectors)
VECTOR_TEMPLATES = {"add": None, "sub": None, "mul": None, "truediv": None, "neg": None, "reciprocal": None,
                    "exp": None, "sigmoid": None, "abs": "fa_vabs({a})"}
# libm functions called through their libmvec vector variant (vec.h overloads them; only those libmvec has)
VECTOR_LIBM = frozenset(f"{name}f" for name in ("erf", "tanh", "log", "sin", "cos", "expm1", "log1p"))
VECTOR_DTYPES = ("float16", "float32")       # loaded, stored and computed in float
LOAD = {"float16": "fa_vload_h(&{})", "float32": "fa_vload_f(&{})"}
STORE = {"float16": "fa_vstore_h(&{}, {})", "float32": "fa_vstore_f(&{}, {})"}
# accumulators: a vector of partials per accumulator (its lanes start at the identity), the update of one
# step, and how the lanes join the scalar accumulator after the loop (pairwise sum; max/min keep NaN)
VECTOR_REDUCTIONS = {"sum": ("{acc} + {v}", "{acc} + fa_vsum({v})"),
                     "max": ("fa_max({acc}, {v})", "fa_max({acc}, fa_vmax({v}))"),
                     "min": ("fa_min({acc}, {v})", "fa_min({acc}, fa_vmin({v}))")}


def _contiguous(index, counter: sympy.Symbol) -> bool:
    """`index` moves by exactly one element per step of `counter` (the rest does not depend on it)."""
    index = sympy.sympify(index)
    return sympy.expand(index - counter).free_symbols.isdisjoint({counter})


def vector_values(body, counter: sympy.Symbol, buffers: dict[str, str], dtypes: dict[str, str],
                  libmvec: set[str] = frozenset()) -> set[str] | None:
    """The values of `body` (a loop over `counter`) that are vectors when the loop is written with explicit
    vectors, or None when it cannot be (or has no float16 in it: float32 loops vectorise well as they are).
    Values not depending on `counter` (constants, values defined before the loop) stay scalars; GCC
    broadcasts them where they meet a vector. `buffers`: buffer -> dtype; `dtypes`: value -> dtype;
    `libmvec`: the float libm functions libmvec vectorises here (rules.libmvec_functions)."""
    vectors: set[str] = set()
    has_half = False
    for st in body:
        if isinstance(st, Load):
            buf_dtype = buffers[st.buffer]
            if st.mask is not None or buf_dtype not in VECTOR_DTYPES or st.dtype not in VECTOR_DTYPES:
                return None
            if counter not in sympy.sympify(st.index).free_symbols:
                continue                                          # the same element every step: a scalar
            if not _contiguous(st.index, counter):
                return None
            has_half |= buf_dtype == "float16"
            vectors.add(st.name)
        elif isinstance(st, Const):
            if st.dtype not in VECTOR_DTYPES:
                return None
        elif isinstance(st, Compute):
            if st.dtype not in VECTOR_DTYPES or any(dtypes[a] not in VECTOR_DTYPES for a in st.args):
                return None
            if st.op == "cast":
                has_half |= st.dtype == "float16"
            elif st.op not in VECTOR_TEMPLATES and st.op + "f" not in VECTOR_LIBM & set(libmvec):
                return None
            if any(a in vectors for a in st.args):
                vectors.add(st.name)
        elif isinstance(st, Store):
            buf_dtype = buffers[st.buffer]
            if buf_dtype not in VECTOR_DTYPES or st.value not in vectors or not _contiguous(st.index, counter):
                return None
            has_half |= buf_dtype == "float16"
        elif isinstance(st, Reduce):      # lanes accumulate apart, then combine (vector_loop)
            if st.op not in VECTOR_REDUCTIONS or st.dtype not in VECTOR_DTYPES or st.arg not in vectors:
                return None
        else:                                                     # IndexValue
            return None
    return vectors if has_half else None


def loop_vectors(r, body, counter: sympy.Symbol, trip_count) -> set[str] | None:
    """`vector_values` for a loop of the renderer `r` (render.KernelRenderer): None also when the loop is
    shorter than the vectors (by its size hint) or writes scratch that a later phase reads (reuse.py)."""
    if not any(getattr(st, "dtype", None) == "float16" or r.buffers.get(getattr(st, "buffer", None)) == "float16"
               for st in body):
        return None                       # no float16 here: skip the index analysis (compile time)
    hints = {**{s: VECTOR_LANES for s in sympy.sympify(trip_count).free_symbols}, **r.size_hints}
    if size_hint(sympy.sympify(trip_count), hints) < VECTOR_LANES:
        return None
    return vector_values(body, counter, r.buffers, r.dtypes, rules.libmvec_functions())


@functools.lru_cache(None)
def vector_helpers() -> str:
    """vec.h, and the float functions libmvec vectorises overloaded for vectors (its AVX-512 or AVX2
    variant by FA_VEC): what explicit-vector loops call."""
    names = sorted(rules.libmvec_functions() & VECTOR_LIBM)
    lines = []
    for lanes, variant in ((16, "_ZGVeN16v_"), (8, "_ZGVdN8v_")):
        lines.append(f"#{'if' if lanes == 16 else 'elif'} FA_VEC == {lanes}")
        for name in names:
            lines.append(f'extern "C" fa_vf {variant}{name}(fa_vf);')
            lines.append(f"static inline fa_vf {name}(fa_vf x) {{ return {variant}{name}(x); }}")
    lines.append("#endif")
    return Path(__file__).with_name("vec.h").read_text() + "\n".join(lines) + "\n"


def vector_statement(r, stmt, vectors: set[str]) -> None:
    """`stmt` of an explicit-vector loop body, emitted through the renderer `r` (render.KernelRenderer)."""
    if isinstance(stmt, Reduce):
        acc = f"{r.ref(stmt.name)}_lanes"
        r.emit(f"{acc} = {VECTOR_REDUCTIONS[stmt.op][0].format(acc=acc, v=r.ref(stmt.arg))};")
        return
    if getattr(stmt, "name", None) in r.reused and stmt.name in vectors:
        scratch = f"fa_scratch_{r.reused[stmt.name][0]}[{cpp_index(r.reduction_position())}]"
        r.emit(f"const fa_vf {r.ref(stmt.name)} = fa_vload_f(&{scratch});")   # computed by an earlier phase
    elif isinstance(stmt, Load) and stmt.name in vectors:
        if stmt.name in r.converted:                              # converted once before the rows
            load = LOAD["float32"].format(r.converted[stmt.name])
        else:
            load = LOAD[r.buffers[stmt.buffer]].format(f"{c_name(stmt.buffer)}[{cpp_index(stmt.index)}]")
        if r.buffers[stmt.buffer] == "float32" and stmt.dtype == "float16":    # read as float16: rounds
            load = rules.ROUND["float16"].format(load)
        r.emit(f"const fa_vf {r.ref(stmt.name)} = {load};")
    elif isinstance(stmt, Compute) and stmt.name in vectors:
        args = [r.ref(a) for a in stmt.args]
        if stmt.op == "cast":       # float16/float32 -> float16 rounds, -> float32 is the value itself
            expr = rules.ROUND["float16"].format(args[0]) if stmt.dtype == "float16" else args[0]
        elif VECTOR_TEMPLATES.get(stmt.op) is not None:
            expr = VECTOR_TEMPLATES[stmt.op].format(**dict(zip("abc", args)))
        else:
            expr = rules.render_op(stmt.op, args, [r.dtypes[a] for a in stmt.args], stmt.dtype)
        r.emit(f"const fa_vf {r.ref(stmt.name)} = {expr};")
    elif isinstance(stmt, Store):
        buf_dtype = r.buffers[stmt.buffer]
        # as the scalar store: a float16 store of a rounded value converts the unrounded one (same bits)
        unrounded = r.rounded_from.get(stmt.value) if r.dtypes[stmt.value] == buf_dtype else None
        value = r.ref(unrounded if unrounded in vectors else stmt.value)
        r.emit(STORE[buf_dtype].format(f"{c_name(stmt.buffer)}[{cpp_index(stmt.index)}]", value) + ";")
    else:                                                         # scalars: constants, invariant loads
        r.statement(stmt)
        return
    for scratch, earlier in set(r.reused.values()):
        if earlier == getattr(stmt, "name", None):    # a later phase reads this value back (reuse.py)
            r.emit(f"fa_vstore_f(&fa_scratch_{scratch}[{cpp_index(r.reduction_position())}], {r.ref(earlier)});")


def vector_loop(r, body, counter: sympy.Symbol, lo, hi, vectors: set[str], pragma: str | None) -> None:
    """`for counter in [lo, hi)` over `body`: FA_VEC lanes per step, then the leftover steps one by one
    (the scalar statements). `pragma` goes on the vector loop (`omp parallel for` of a 1-D kernel)."""
    lo, hi = cpp_index(sympy.sympify(lo)), cpp_index(sympy.sympify(hi))
    r.open(comment="FA_VEC lanes per step (vec.h)")
    count = hi if lo == "0" else f"({hi}) - ({lo})"
    r.emit(f"const int64_t fa_vend = {'' if lo == '0' else f'({lo}) + '}({count}) / FA_VEC * FA_VEC;")
    reduces = [st for st in body if isinstance(st, Reduce)]
    for st in reduces:
        identity = rules.reduction_init(st.op, st.dtype)
        r.emit(f"fa_vf {r.ref(st.name)}_lanes = fa_vsplat({identity});")
    if pragma:
        r.emit(pragma)
    r.open(f"for (int64_t {counter} = {lo}; {counter} < fa_vend; {counter} += FA_VEC)")
    for stmt in body:
        vector_statement(r, stmt, vectors)
    r.close()
    for st in reduces:
        acc = r.ref(st.name)
        r.emit(f"{acc} = {VECTOR_REDUCTIONS[st.op][1].format(acc=acc, v=acc + '_lanes')};")
    r.open(f"for (int64_t {counter} = fa_vend; {counter} < {hi}; ++{counter})")
    for stmt in body:
        r.statement(stmt)
    r.close()
    r.close()
