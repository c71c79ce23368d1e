"""One implementation per libm function in a translation unit: every call, vector or scalar, computes through
the same libmvec variant.

GCC calls a vectorised loop's math through libmvec (`omp declare simd`), but picks the variant per loop part:
the 16-lane AVX-512 one in the main loop, the 8-lane AVX2 one in the vectorised epilogue, scalar libm in the
scalar remainder and in code outside loops (a row's shift for a variance). They round differently (tanf(1):
1 ulp between libm and `_ZGVeN16v_tanf`), so equal inputs gave unequal results in one row, and LayerNorm
amplified that ulp by 1/sqrt(eps) to 3.8e-5 where eager gives exactly 0 (eager and Inductor compute a
loop's tail with the vector function too, padded). glibc has no masked variants to give GCC instead.

So the renderer declares each function libmvec vectorises under an assembler name of ours (`tanf` calls
`fa_tanf`, rules.math_declarations); GCC then calls `fa_tanf` for scalars and `_ZGV<isa>N<lanes>v_fa_tanf`
for vectors. `math_definitions` defines all of them in the translation unit: each pads its lanes into the
widest variant the compile target has (its "canonical" one: AVX-512's 16 float lanes, else AVX2's or AVX's 8,
else SSE's 4; the same vec.h's explicit-vector loops call), calls it and keeps its own lanes. Lanes of a
vector function are independent (a lane's result depends on its input only; special inputs go to the
scalar fallback lane by lane), so a value computes the same bits in any lane of any call. The padding is a
constant every function takes its fast path for, so a NaN or huge input pays no extra slow-path lanes.

Costs: a call in the main loop is one extra jump (the wrapper tail-calls libmvec); a remainder element or a
scalar call computes a whole vector: per scalar call tanf 6.3 ns instead of libm's 9.9, logf 5.3 instead of
2.4 (Intel Xeon, AVX-512, 1 thread). Compile time: ~1.5 ms per entry point, 5 per function a translation
unit calls (only those are defined). Hosts other than x86-64 Linux with libmvec have no vectorised functions
(rules.libmvec_functions): nothing changes there. Not covered: GCC merges sinf(x) and cosf(x) of one x
into libm's sincosf (and then leaves the loop scalar), as before.
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from . import rules

# x86-64 vector function ABI: ISA letter, the target macro that enables it, lanes of a float and a double
# vector. Ordered narrowest first; the last one the target enables is the canonical one.
ISAS = (("b", "__SSE2__", 4, 2), ("c", "__AVX__", 8, 4), ("d", "__AVX2__", 8, 4), ("e", "__AVX512F__", 16, 8))
# padding lanes: an input with a finite, normal result (fast path) for every function; acosh needs >= 1
PAD = {"acosh": "1.5"}
DEFAULT_PAD = "0.5"

_HELPERS = """\
// ---- libm through one libmvec variant per function (libm_variants.py) ----
typedef float fa_mvf4 __attribute__((vector_size(16)));
typedef float fa_mvf8 __attribute__((vector_size(32)));
typedef float fa_mvf16 __attribute__((vector_size(64)));
typedef double fa_mvd2 __attribute__((vector_size(16)));
typedef double fa_mvd4 __attribute__((vector_size(32)));
typedef double fa_mvd8 __attribute__((vector_size(64)));
// x (a scalar or a narrower vector) in the first lanes of a W, `pad` in the others
template <class W, class V, class T> static inline W fa_mv_widen(V x, T pad) {
  W w = (W){} + pad;
  __builtin_memcpy(&w, &x, sizeof x);
  return w;
}
template <class V, class W> static inline V fa_mv_narrow(W w) { V v; __builtin_memcpy(&v, &w, sizeof v); return v; }
"""


def symbol(fname: str) -> str:
    """The assembler name a kernel's call to libm's `fname` goes to."""
    return f"fa_{fname}"


def _vtype(ctype: str, lanes: int) -> str:
    return f"fa_mv{ctype[0]}{lanes}" if lanes > 1 else ctype


def _definitions(fname: str, ctype: str, arity: int, canonical: int) -> list[str]:
    """`fname`'s scalar and vector entry points for a target whose widest ISA is ISAS[canonical]."""
    isa, _, f_lanes, d_lanes = ISAS[canonical]
    lanes = f_lanes if ctype == "float" else d_lanes
    wide = _vtype(ctype, lanes)
    params = "v" * arity
    target = f"_ZGV{isa}N{lanes}{params}_{fname}"
    base = fname[:-1] if ctype == "float" else fname
    pad = PAD.get(base, DEFAULT_PAD) + ("f" if ctype == "float" else "")
    lines = [f'extern "C" {wide} {target}({", ".join([wide] * arity)});']
    variants = [("s", 1, symbol(fname))] + [
        (letter, f if ctype == "float" else d, f"_ZGV{letter}N{f if ctype == 'float' else d}{params}_{symbol(fname)}")
        for letter, _, f, d in ISAS[: canonical + 1]]
    names = "xyz"[:arity]
    for letter, n, asm in variants:
        vt = _vtype(ctype, n)
        own = f"fa_mv_{fname}_{letter}"
        args = ", ".join(f"{vt} {a}" for a in names)
        if n == lanes:
            body = f"return {target}({', '.join(names)});"
        else:
            call = f"{target}({', '.join(f'fa_mv_widen<{wide}>({a}, {pad})' for a in names)})"
            body = f"return fa_mv_narrow<{vt}>({call});"
        lines.append(f'extern "C" __attribute__((visibility("hidden"))) {vt} {own}({args}) __asm__("{asm}");')
        lines.append(f"{vt} {own}({args}) {{ {body} }}")
    return lines


def _code(text: str) -> str:
    """`text` without comments and without rules.math_declarations' lines."""
    return re.sub(r"//[^\n]*|^.*__asm__\(\"fa_.*$", "", text, flags=re.MULTILINE)


def _called(code: str) -> set[str]:
    # `__builtin_pow(` calls `pow` too: GCC binds the builtin to the declared (renamed) symbol; the index
    # printer writes symbolic float math that way
    return set(re.findall(r"\b(?:__builtin_)?([A-Za-z_][A-Za-z0-9_]*)\s*\(", code))


@functools.lru_cache(None)
def _prelude_calls() -> dict[str, frozenset[str]]:
    """prelude.h's helpers -> the names they call (a helper's text runs to the next helper's start)."""
    text = _code(Path(__file__).with_name("prelude.h").read_text())
    starts = list(re.finditer(r"^(?:template <[^>]*> )?static inline [^(]*?\b(fa_\w+)\(", text, re.MULTILINE))
    calls: dict[str, set[str]] = {}
    for m, after in zip(starts, [*starts[1:], None]):
        calls.setdefault(m.group(1), set()).update(_called(text[m.end(): after.start() if after else None]))
    return {name: frozenset(names) for name, names in calls.items()}


def used_functions(code: str, vectorised: frozenset[str]) -> list[tuple[str, str, int]]:
    """(name, C type, arity) of each vectorised libm function that `code` (the translation unit without the
    prelude) calls, directly or through the prelude's helpers. A superset: a name in an unused helper
    counts too, and costs only the compile time of its definitions."""
    called, todo = set(), _called(_code(code))
    helpers = _prelude_calls()
    while todo:
        name = todo.pop()
        if name not in called:
            called.add(name)
            todo |= helpers.get(name, frozenset())
    found = []
    for name in rules.UNARY_LIBM + rules.BINARY_LIBM:
        arity = 1 if name in rules.UNARY_LIBM else 2
        for fname, ctype in ((name + "f", "float"), (name, "double")):
            if fname in vectorised and fname in called:
                found.append((fname, ctype, arity))
    return found


def math_definitions(code: str, vectorised: frozenset[str] | None = None) -> str:
    """The scalar and vector entry points (`fa_tanf`, `_ZGVeN16v_fa_tanf`, ...) of the libm functions
    `code` (a translation unit but its prelude) calls, for whichever ISA the compiler targets (its
    macros choose); "" when it calls none."""
    vectorised = rules.libmvec_functions() if vectorised is None else vectorised
    functions = used_functions(code, vectorised)
    if not functions:
        return ""
    lines = [_HELPERS]
    for canonical in reversed(range(len(ISAS))):
        lines.append(f"#{'if' if canonical == len(ISAS) - 1 else 'elif'} defined({ISAS[canonical][1]})")
        for fname, ctype, arity in functions:
            lines.extend(_definitions(fname, ctype, arity, canonical))
    lines.append("#else\n#error libmvec functions need an x86-64 target (SSE2)\n#endif")
    return "\n".join(lines) + "\n"
