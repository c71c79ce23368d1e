"""Every function of the shared list (`fuse_all_ir.sympy_functions`) printed by each printer (host Python,
C++, Triton under the interpreter) and EVALUATED there, on negative and positive values, against the
list's reference semantics; the reference itself is checked against torch's own evaluation of the sympy
function. An unknown function is a compile-time `UnsupportedSymbolic`, never a name in generated code."""
from __future__ import annotations

import importlib.util
import math

import pytest
import sympy
import torch
import torch.utils._sympy.functions as tf

from fuse_all_ir import sympy_functions as sf
from fuse_all_ir.host import py_index, unresolved_names
from fuse_all_ir.symbolic import FloorDiv as IrFloorDiv, ModularIndexing as IrModularIndexing

a, b = sympy.symbols("a b", integer=True)          # any sign: the Python-semantics paths
n, m = sympy.symbols("n m", integer=True, positive=True)
SYMBOLS = (a, b, n, m)
VALUES = [dict(zip(SYMBOLS, v)) for v in
          [(-7, -3, 3, 2), (-7, 2, 1, 5), (5, -3, 8, 3), (12, 5, 3, 7), (0, 7, 2, 1), (-1, 4, 5, 4), (9, -2, 7, 6)]]


def _t(name):
    return getattr(tf, name, None)


def _cases():
    """(function name, expression); each function appears at least once. A class this torch lacks drops
    its case (the list skips it too)."""
    lazy = [
        ("floordiv", lambda: _t("FloorDiv")(a, b)), ("floordiv", lambda: _t("FloorDiv")(a * n + 3, m)),
        ("floordiv", lambda: IrFloorDiv(n * 5 + m, 3)),
        ("modular_indexing", lambda: _t("ModularIndexing")(n * 7 + m, 2, 3)),
        ("modular_indexing", lambda: IrModularIndexing(n * 13 + m, 3, 4)),
        # the IR's own functions with a numerator of either sign (a pad's shifted index): they floor, so a
        # printer may use its truncating division only where the numerator is provably non-negative
        ("floordiv", lambda: IrFloorDiv(a - 18, 8)), ("floordiv", lambda: IrFloorDiv(n - 6, 4)),
        ("floordiv", lambda: IrFloorDiv(3 * a + b, m + 1)),
        ("modular_indexing", lambda: IrModularIndexing(a - 18, 1, 8)),
        ("modular_indexing", lambda: IrModularIndexing(n * 3 - 11, 2, 4)),
        ("modular_indexing", lambda: IrModularIndexing(IrFloorDiv(a - 5, 3), 1, 5)),
        ("mod", lambda: _t("PythonMod")(a, b)), ("mod", lambda: sympy.Mod(a, b)),
        ("mod", lambda: _t("Mod")(n * 3 + m, m + 1)),
        ("int_truediv", lambda: _t("IntTrueDiv")(a, b)), ("int_truediv", lambda: _t("IntTrueDiv")(1, n)),
        ("float_truediv", lambda: _t("FloatTrueDiv")(_t("ToFloat")(a), _t("ToFloat")(n))),
        ("max", lambda: _t("Max")(a, b, 1)), ("max", lambda: sympy.Max(a, n - 4)),
        ("min", lambda: _t("Min")(a, b)),
        ("min", lambda: sympy.Min(a, m)),
        ("max", lambda: _t("Max")(_t("IntTrueDiv")(a, n), b)),
        ("pow_natural", lambda: _t("PowByNatural")(a, m)), ("pow_natural", lambda: _t("PowByNatural")(b, 3)),
        ("float_pow", lambda: _t("FloatPow")(_t("ToFloat")(n), _t("IntTrueDiv")(1, m))),
        ("trunc_to_int", lambda: _t("TruncToInt")(_t("IntTrueDiv")(a, n))),
        ("trunc_to_float", lambda: _t("TruncToFloat")(_t("IntTrueDiv")(a, n))),
        ("round_to_int", lambda: _t("RoundToInt")(_t("IntTrueDiv")(a, 2))),   # ties: -3.5 -> -4, 2.5 -> 2
        ("round_to_int", lambda: _t("RoundToInt")(_t("IntTrueDiv")(a * 7, n))),
        ("floor_to_int", lambda: _t("FloorToInt")(_t("IntTrueDiv")(a, n))),
        ("ceil_to_int", lambda: _t("CeilToInt")(_t("IntTrueDiv")(a, n))),
        ("floor_to_int", lambda: sympy.floor(_t("IntTrueDiv")(a, n))),
        ("ceil_to_int", lambda: sympy.ceiling(_t("IntTrueDiv")(a, m))),
        ("to_float", lambda: _t("ToFloat")(a) * sympy.Float(0.1)),
        ("identity", lambda: _t("Identity")(a + n)),
        ("abs", lambda: sympy.Abs(a - b)),
        ("where", lambda: _t("Where")(a < b, a, b + n)),
        ("where", lambda: _t("Where")(sympy.And(a >= 0, sympy.Not(sympy.Eq(b, 2))), n, m)),
        ("bitwise_and", lambda: _t("BitwiseFn_bitwise_and")(a, b)),
        ("bitwise_or", lambda: _t("BitwiseFn_bitwise_or")(a, n)),
        ("bitwise_xor", lambda: _t("BitwiseFn_bitwise_xor")(a, b)),
        ("rshift", lambda: _rshift()),
        ("lshift", lambda: _lshift()),
        ("ceildiv", lambda: _ceildiv()),
        ("round_decimal", lambda: _t("RoundDecimal")(_t("IntTrueDiv")(a, m), 1)),
        ("is_non_overlapping_and_dense", lambda: _t("IsNonOverlappingAndDenseIndicator")(n, m, m, 1)),
        ("arith", lambda: a * n - 3 * b + n ** 2),
        ("arith", lambda: sympy.Rational(1, 3) * _t("ToFloat")(a) + _t("IntTrueDiv")(a, n) / m + 2 ** (-n)),
    ]
    cases = []
    for name, build in lazy:
        try:
            cases.append((name, build()))
        except TypeError:   # _t() gave None: the class is missing in this torch version
            continue
    for name in sf.FUNCTIONS:
        if name.startswith("opaque_"):
            cls = _t("OpaqueUnaryFn_" + name.removeprefix("opaque_"))
            arg = {"sqrt": n, "log": n, "log2": m, "asin": _t("IntTrueDiv")(1, m + 1),
                   "acos": _t("IntTrueDiv")(1, n + 1)}.get(name.removeprefix("opaque_"), _t("IntTrueDiv")(a, 4))
            if cls is not None:
                cases.append((name, cls(arg)))
    return [(name, e) for name, e in cases if e is not None]


def _rshift():
    # torch's RShift evaluates to FloorDiv(a, 2**s) when built; construct the unevaluated node
    return sympy.Function.__new__(_t("RShift"), a, n, evaluate=False) if _t("RShift") else None


def _lshift():
    return sympy.Function.__new__(_t("LShift"), a, n, evaluate=False) if _t("LShift") else None


def _ceildiv():
    return sympy.Function.__new__(_t("CeilDiv"), a, m, evaluate=False) if _t("CeilDiv") else None


CASES = _cases()
KERNEL_CASES = [(nm, e) for nm, e in CASES if nm == "arith" or sf.FUNCTIONS[nm].in_kernels]
IDS = [f"{nm}-{i}" for i, (nm, _) in enumerate(CASES)]
KERNEL_IDS = [f"{nm}-{i}" for i, (nm, _) in enumerate(KERNEL_CASES)]


def _close(actual, expected) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return bool(actual) == bool(expected)
    if isinstance(expected, int) and isinstance(actual, int):
        return actual == expected
    return math.isclose(float(actual), float(expected), rel_tol=1e-12, abs_tol=1e-12)


def test_every_function_has_a_case_and_every_printer_a_rule():
    from fuse_all_codegen_cpp.index_printer import CppIndexPrinter
    from fuse_all_codegen_triton.indexing import TritonIndexPrinter

    from fuse_all_ir.host import PythonIndexPrinter
    covered = {nm for nm, _ in CASES}
    present = {nm for nm, fn in sf.FUNCTIONS.items() if fn.classes}
    assert present - covered == set()
    assert set(sf.FUNCTIONS) - set(PythonIndexPrinter.RULES) == set()
    kernel_fns = {nm for nm, fn in sf.FUNCTIONS.items() if fn.in_kernels}
    assert kernel_fns - set(CppIndexPrinter.RULES) == set()
    assert kernel_fns - set(TritonIndexPrinter.RULES) == set()


def test_torch_classes_are_all_listed():
    """A function torch adds later (or 2.11 has) must not go unnoticed: every sympy class torch's module
    defines is in the list."""
    listed = {c for fn in sf.FUNCTIONS.values() for c in fn.classes}
    for name in dir(tf):
        obj = getattr(tf, name)
        if (isinstance(obj, type) and issubclass(obj, sympy.Basic) and obj.__module__ == tf.__name__
                and not name.startswith("_") and name not in ("MinMaxBase",)):
            assert obj in listed, f"torch.utils._sympy.functions.{name} is not in fuse_all_ir.sympy_functions"


@pytest.mark.parametrize("name,expr", CASES, ids=IDS)
def test_reference_matches_torch(name, expr):
    """The list's semantics equal what torch's sympy functions evaluate to on the same numbers."""
    for values in VALUES:
        ref = sf.evaluate(expr, values)
        subbed = expr.xreplace({s: sympy.Integer(v) for s, v in values.items()})
        if name == "is_non_overlapping_and_dense":
            continue   # torch evaluates it only with concrete args, through the same helper
        got = subbed if not isinstance(subbed, sympy.Basic) else \
            (bool(subbed) if subbed.is_Boolean else (int(subbed) if subbed.is_Integer else float(subbed)))
        assert _close(ref, got), f"{expr} at {values}: reference {ref}, torch {got}"


@pytest.mark.parametrize("name,expr", CASES, ids=IDS)
def test_python_printer(name, expr):
    code = py_index(expr)
    assert not unresolved_names(f"import math\nimport torch\n{','.join(map(str, SYMBOLS))} = 0\nv = {code}\n")
    for values in VALUES:
        env = {"math": math, "torch": torch, **{str(s): v for s, v in values.items()}}
        got = eval(code, env)
        ref = sf.evaluate(expr, values)
        assert _close(got, ref), f"{expr} -> {code} at {values}: {got} != {ref}"
        assert type(got) is type(ref) or not isinstance(ref, int), f"{code}: {type(got)} vs {type(ref)}"


def test_cpp_printer(tmp_path):
    from fuse_all_codegen_cpp import compiler
    from fuse_all_codegen_cpp.index_printer import cpp_index
    from fuse_all_codegen_cpp.render import translation_unit

    body = [f"  out[{i}] = (double)({cpp_index(e, value=True)});" for i, (_, e) in enumerate(KERNEL_CASES)]
    params = ", ".join(f"int64_t {s}" for s in SYMBOLS)
    code = f'extern "C" void probe(double* out, {params}) {{\n' + "\n".join(body) + "\n}\n"
    source = translation_unit("probe", code)   # with the libm entry points the code calls
    lib = compiler.load_library(source)
    fn = lib.kernel("probe", 1, len(SYMBOLS))
    for values in VALUES:
        out = torch.zeros(len(KERNEL_CASES), dtype=torch.float64)
        fn(out.data_ptr(), *[values[s] for s in SYMBOLS])
        for i, (name, e) in enumerate(KERNEL_CASES):
            ref = sf.evaluate(e, values)
            code = cpp_index(e, value=True)
            assert _close(out[i].item(), ref), f"{name}: {e} -> {code} at {values}: {out[i].item()} != {ref}"


@pytest.mark.triton
def test_triton_printer(tmp_path):
    import os
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 (set by tests/ops/conftest.py) or a GPU")
    from fuse_all_codegen_triton.indexing import triton_index

    lines = [f"    tl.store(out + {i} + tl.zeros([1], tl.int32), "
             f"tl.cast({triton_index(e, value=True)}, tl.float64) + tl.zeros([1], tl.float64))"
             for i, (_, e) in enumerate(KERNEL_CASES)]
    source = ("import triton\nimport triton.language as tl\n"
              "from fuse_all_codegen_triton.runtime import libdevice\n"
              "from fuse_all_codegen_triton import helpers as fa\n\n\n@triton.jit\n"
              f"def probe(out, {', '.join(map(str, SYMBOLS))}):\n" + "\n".join(lines) + "\n")
    path = tmp_path / "probe_kernel.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("probe_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    device = "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"
    for values in VALUES:
        out = torch.zeros(len(KERNEL_CASES), dtype=torch.float64, device=device)
        module.probe[(1,)](out, *[values[s] for s in SYMBOLS])
        for i, (name, e) in enumerate(KERNEL_CASES):
            ref = sf.evaluate(e, values)
            code = triton_index(e, value=True)
            assert _close(out[i].item(), ref), f"{name}: {e} -> {code} at {values}: {out[i].item()} != {ref}"


@pytest.mark.parametrize("printer", ["python", "cpp", "triton"])
def test_unknown_function_is_a_compile_time_error(printer):
    from fuse_all_codegen_cpp.index_printer import cpp_index
    from fuse_all_codegen_triton.indexing import triton_index
    fn = {"python": py_index, "cpp": cpp_index, "triton": triton_index}[printer]
    with pytest.raises(sf.UnsupportedSymbolic, match="Mystery"):
        fn(sympy.Function("Mystery")(n) + 1)
    with pytest.raises(sf.UnsupportedSymbolic):
        fn(n + sympy.oo)


@pytest.mark.parametrize("printer", ["cpp", "triton"])
def test_float_expression_as_an_address_is_an_error(printer):
    from fuse_all_codegen_cpp.index_printer import cpp_index
    from fuse_all_codegen_triton.indexing import triton_index
    fn = {"cpp": cpp_index, "triton": triton_index}[printer]
    with pytest.raises(sf.UnsupportedSymbolic, match="not integer"):
        fn(n / 2 + 1)
    assert fn(n / 2 + 1, value=True)


def test_host_only_function_in_a_kernel_is_an_error():
    from fuse_all_codegen_cpp.index_printer import cpp_index
    with pytest.raises(sf.UnsupportedSymbolic, match="RoundDecimal"):
        cpp_index(_t("RoundDecimal")(_t("IntTrueDiv")(a, m), 1), value=True)
    assert sf.unsupported_in_kernels(_t("RoundDecimal")(_t("IntTrueDiv")(a, m), 1) + n) == ["RoundDecimal"]


def test_host_program_names_are_checked_at_compile_time():
    """A generated host program reading a name nothing defines (what `Max(...)` was) is refused while
    compiling (HostProgramError -> the graph runs in ATen), not at the user's call."""
    import fuse_all_ir as ir
    from fuse_all_ir.host import HostProgramError, render_host_program

    source = "import torch\nx = 1\ndef call(args):\n    a, = args\n    return Max(a, x) + torch.zeros(1) + len(args)\n"
    assert unresolved_names(source) == {"Max"}
    assert unresolved_names("import math\ndef call(args):\n    return [math.floor(v) for v in args]\n") == set()

    class UndefinedPrelude:
        language = "cpp"

        def render_prelude(self, program):
            return "launcher = undefined_helper"

        def render_launch(self, kernel, buffer_args, size_args):
            return "launcher()"

        def kernel_source(self, kernel):
            return ""

    from torch.fx.experimental.proxy_tensor import make_fx
    x = torch.randn(3)
    program = ir.lower(make_fx(lambda x: (x.exp() + 1,))(x), [x], "g_names").program
    with pytest.raises(HostProgramError, match="undefined_helper"):
        render_host_program(program, UndefinedPrelude())
