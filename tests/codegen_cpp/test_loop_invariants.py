"""Values that do not move with an inner loop are computed before it (fuse_all_codegen_cpp.hoist).

GCC 12 left the last phase of add + LayerNorm + GELU scalar ("latch block not empty") while it read the
row's first element of `x + y` (the two-pass variance's shift) inside the loop: a scalar libm `erff` per
element, 7.6x Inductor's CPU time. These tests check the results against a float64 reference (relative to
eager's own error) and, with GCC, that its vectorisation report names every simd loop of the kernel.

BatchNorm + ReLU + 3x3 stride-2 max-pool over channels-last (resnet50's stem) stayed scalar for another
reason: GCC's PRE threaded the pool's NaN test of each ReLU output through ReLU's select, a select of masks
that GCC 12 cannot vectorise (compiler.gcc_flags turns PRE off).
"""
from __future__ import annotations

import copy
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F



def _error(result: torch.Tensor, reference: torch.Tensor) -> float:
    return (result.double() - reference).abs().max().item()


def _check_against_float64(fn, args, compiled):
    ours, eager = compiled(*args), fn(*args)
    reference = fn(*[a.double() for a in args])
    scale = reference.abs().max().item()
    assert _error(ours, reference) <= max(4 * _error(eager, reference), 1e-6 * scale), (
        _error(ours, reference), _error(eager, reference))


def _last_graph_source() -> str:
    """The C++ translation unit the last compiled graph's host program embeds (`_fa_cpp_source`)."""
    import ast

    import fuse_all
    tree = ast.parse(Path(fuse_all.compiled_graphs()[-1].output_code).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_fa_cpp_source":
            return ast.literal_eval(node.value)
    raise AssertionError("no _fa_cpp_source in the last graph's host program")


def _unvectorised_simd_loops(tu: str) -> list[int]:
    """Line numbers of `omp simd` loops of the translation unit's kernels that GCC did not vectorise."""
    from fuse_all_codegen_cpp import compiler
    cxx = compiler.find_compiler()
    if "g++" not in cxx[-1]:
        pytest.skip(f"the vectorisation report checked here is GCC's, the compiler is {cxx[-1]}")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tu.cpp"
        src.write_text(tu)
        flags = [f for f in compiler.compile_flags() if f not in ("-shared", "-fPIC")]
        report = subprocess.run([*cxx, *flags, "-c", "-o", str(Path(tmp) / "tu.o"), str(src),
                                 "-fopt-info-vec-optimized"], capture_output=True, text=True, check=True).stderr
    vectorised = {int(line.split(":")[1]) for line in report.splitlines() if "loop vectorized" in line}
    lines = tu.splitlines()
    first_kernel = next(i for i, line in enumerate(lines) if line.startswith('extern "C" void kernel_'))
    # GCC names a loop by its `for` line or its body's first line: 1-based, the pragma's line + 1 or + 2
    simd_loops = [i + 2 for i in range(first_kernel, len(lines) - 1)
                  if lines[i].strip().startswith("#pragma omp simd")]
    assert simd_loops, tu
    return [n for n in simd_loops if not {n, n + 1} & vectorised]


def test_add_layernorm_gelu_vectorises_every_phase():
    ln = torch.nn.LayerNorm(768)
    with torch.no_grad():
        ln.weight.normal_(), ln.bias.normal_()

    def add_ln_gelu(x, y):
        return F.gelu(F.layer_norm(x + y, (768,), ln.weight.to(x.dtype), ln.bias.to(x.dtype)))
    x, y = torch.randn(64, 768) * 3 + 1, torch.randn(64, 768)
    compiled = torch.compile(add_ln_gelu, backend="fuse_all", options={"fallback": False}, dynamic=False)
    with torch.no_grad():
        _check_against_float64(add_ln_gelu, (x, y), compiled)
    tu = _last_graph_source()
    assert "erff(" in tu
    assert _unvectorised_simd_loops(tu) == []


def test_hoisted_loads_are_guarded_when_the_loop_length_is_symbolic():
    """With a symbolic row length a hoisted load reads only when the loop runs at least once."""
    def add_ln_gelu(x, y):
        return F.gelu(F.layer_norm(x + y, x.shape[-1:]))
    compiled = torch.compile(add_ln_gelu, backend="fuse_all", options={"fallback": False}, dynamic=True)
    for rows, cols in [(5, 37), (3, 130), (17, 9)]:
        x, y = torch.randn(rows, cols) * 2 - 1, torch.randn(rows, cols)
        _check_against_float64(add_ln_gelu, (x, y), compiled)
    tu = _last_graph_source()
    assert ") > 0) ? (" in tu, tu[tu.index('extern "C" void kernel_'):]


def test_pointwise_row_values_are_read_once_per_row():
    """A pointwise kernel over (rows, cols) with per-row operands (a broadcast scale and shift, a row's
    exp): they are computed before the simd loop over the columns, and every simd loop vectorises."""
    def scale_shift(x, w, b):
        return torch.tanh(x * w[:, None] + torch.exp(b)[:, None])
    x, w, b = torch.randn(33, 1000), torch.randn(33), torch.randn(33)
    compiled = torch.compile(scale_shift, backend="fuse_all", options={"fallback": False}, dynamic=False)
    _check_against_float64(scale_shift, (x, w, b), compiled)
    tu = _last_graph_source()
    kernel = tu[tu.index('extern "C" void kernel_'):]
    before_inner_loop = kernel[: kernel.index("#pragma omp simd")]
    assert "fa_exp" in before_inner_loop and "[x0]" in before_inner_loop, kernel
    assert _unvectorised_simd_loops(tu) == []


def _bn_relu_maxpool():
    m = torch.nn.Sequential(torch.nn.BatchNorm2d(64), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1)).eval()
    with torch.no_grad():
        m[0].running_mean.normal_(), m[0].running_var.uniform_(0.5, 2.0)
        m[0].weight.normal_(), m[0].bias.normal_()
    return m


def test_batchnorm_relu_maxpool_channels_last_vectorises():
    """resnet50's stem after the convolution, channels-last: the simd loop over the channels reads the nine
    window positions (edge ones behind a loop-invariant window test) and vectorises."""
    m = _bn_relu_maxpool()
    x = (torch.randn(1, 64, 32, 32) * 2).to(memory_format=torch.channels_last)
    compiled = torch.compile(m, backend="fuse_all", options={"fallback": False}, dynamic=False)
    with torch.no_grad():
        ours, eager, reference = compiled(x), m(x), copy.deepcopy(m).double()(x.double())
        assert _error(ours, reference) <= max(4 * _error(eager, reference), 1e-6), (
            _error(ours, reference), _error(eager, reference))
        x[0, 3, 0, 0] = x[0, 5, 7, 9] = float("nan")       # max-pool propagates NaN like eager
        torch.testing.assert_close(compiled(x), m(x), rtol=0, atol=1e-5, equal_nan=True)
    tu = _last_graph_source()
    kernel = tu[tu.index('extern "C" void kernel_'):]
    assert kernel.count("fa_max(") >= 9 and " ? arg" in kernel, kernel
    assert _unvectorised_simd_loops(tu) == []


@pytest.mark.parametrize("size", [32, 33, 12])
def test_batchnorm_relu_maxpool_nchw_vectorises(size):
    """The same over NCHW: the simd loop runs along the output row and reads the input at stride 2; the
    window tests (left edge: the first output, right edge: the last when the row is odd, top row: an
    outer counter) are taken out of the loop (index_split.py) so no strided load is masked, and every
    simd loop vectorises. Results against float64, NaN at the edges and inside."""
    m = _bn_relu_maxpool()
    x = torch.randn(2, 64, size, size) * 2
    compiled = torch.compile(m, backend="fuse_all", options={"fallback": False}, dynamic=False)
    with torch.no_grad():
        ours, eager, reference = compiled(x), m(x), copy.deepcopy(m).double()(x.double())
        assert _error(ours, reference) <= max(4 * _error(eager, reference), 1e-6), (
            _error(ours, reference), _error(eager, reference))
        for where in [(0, 3, 0, 0), (1, 5, 7, 9), (0, 7, size - 1, size - 1), (1, 9, 0, size - 1)]:
            x[where] = float("nan")
        torch.testing.assert_close(compiled(x), m(x), rtol=0, atol=1e-5, equal_nan=True)
    tu = _last_graph_source()
    kernel = tu[tu.index('extern "C" void kernel_'):]
    inner = "x3"                               # (batch, channel, output row, output column)
    assert f"2*{inner}" in kernel and f"{inner} in [1, " in kernel, kernel    # strided; the left edge split off
    last = (size - 1) // 2
    assert (f"{inner} in [{last}, {last + 1})" in kernel) == (size % 2 == 1), kernel
    assert _unvectorised_simd_loops(tu) == []


def test_float16_row_vectors_are_converted_once_with_the_same_results(monkeypatch, fresh_cache):
    """A float16 LayerNorm's weight and bias are the same elements in every row: converted to float once
    before the rows (hoist.row_invariant_half_loads), not again in each row. Same bits as converting them
    in every row, on the F16C path and the portable one."""
    from fuse_all_codegen_cpp import compiler, hoist
    gen = torch.Generator().manual_seed(11)
    ln = torch.nn.LayerNorm(771, dtype=torch.float16).requires_grad_(False)
    ln.weight.copy_(torch.randn(771, generator=gen) + 1)
    ln.bias.copy_(torch.randn(771, generator=gen))
    x, y = (torch.randn(65, 771, generator=gen).half() for _ in range(2))

    def fn(x, y):
        return F.gelu(ln(x + y))

    sources = []
    real = compiler.compile_library

    def spy(source, so, compiler_cmd=None, flags=None):
        sources.append(source)
        return real(source, so, compiler_cmd, flags)
    monkeypatch.setattr(compiler, "compile_library", spy)
    for flags in ("", "-DFA_NO_VEC"):
        monkeypatch.setenv("FUSE_ALL_CXXFLAGS", flags)
        outs = []
        for limit in (hoist.ROW_CONVERT_MAX, 0):      # 0: every row converts them, as before
            monkeypatch.setattr(hoist, "ROW_CONVERT_MAX", limit)
            torch._dynamo.reset()
            sources.clear()
            outs.append(torch.compile(fn, backend="fuse_all", options={"fallback": False})(x, y))
            converted_once = "converted once" in "".join(sources)
            assert converted_once == bool(limit), (flags, limit)
        assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), flags
    torch.testing.assert_close(outs[0], fn(x, y), atol=2e-2, rtol=1e-2)
