"""float16 loops with explicit vectors and F16C conversions (codegen-cpp vector_loops.py, vec.h).

The helpers against torch's own conversions (all 65536 float16 values; every float16 value, the float32
midpoints between them and their neighbours, overflow and subnormal edges, random floats) and against the
portable helpers on all 2^32 floats; which loops take the vector form; and whole float16 programs through
both paths, the F16C one and the portable one (forced with -DFA_NO_VEC), bit for bit the same."""
from __future__ import annotations

import ctypes
import re

import pytest
import sympy
import torch

from fuse_all_codegen_cpp import compiler, render_kernel
from fuse_all_codegen_cpp.compiler import load_library
from fuse_all_codegen_cpp.render import prelude, vector_helpers
from fuse_all_ir import Compute, Const, Load, Loop, Store
from fuse_all_ir.program import Kernel
from fuse_all_ir.symbolic import xvar

_FLAGS = compiler._cpu_flags()
F16C = "f16c" in _FLAGS and bool({"avx2", "avx512f"} & _FLAGS)
needs_f16c = pytest.mark.skipif(not F16C, reason="the host CPU has no F16C: only the portable path exists")
# the AVX-512 path (16 lanes) and, on the same host, the AVX2 one (8 lanes)
WIDTHS = [pytest.param("", id="native")] + \
    ([pytest.param("-mno-avx512f", id="avx2")] if {"avx512f", "avx2"} <= _FLAGS else [])


@pytest.fixture(params=WIDTHS)
def width(request, monkeypatch):
    monkeypatch.setenv("FUSE_ALL_CXXFLAGS", request.param)
    return 8 if request.param or "avx512f" not in _FLAGS else 16

TESTS = r"""
extern "C" int64_t fa_test_lanes() { return FA_VEC; }
#if FA_VEC
// n: a multiple of FA_VEC
extern "C" void fa_test_vload_h(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += FA_VEC) fa_vstore_f(out + i, fa_vload_h(h + i));
}
extern "C" void fa_test_vstore_h(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; i += FA_VEC) fa_vstore_h(out + i, fa_vload_f(x + i));
}
extern "C" void fa_test_vround_h(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += FA_VEC) fa_vstore_f(out + i, fa_round_h(fa_vload_f(x + i)));
}
static inline bool fa_test_half_nan(uint16_t h) { return (h & 0x7FFFu) > 0x7C00u; }
// Mismatches with the portable helpers (tested against the FP16 library's formulas on every input,
// test_half_round.py) over all 2^32 floats: [store, round_h, expf]. A NaN must give a NaN of its sign:
// F16C keeps the payload's top bits, the portable conversion does not (torch's vector kernels: as F16C).
extern "C" void fa_test_all_floats(int64_t* out) {
  int64_t store = 0, round_h = 0, expf_ = 0;
  #pragma omp parallel for reduction(+:store, round_h, expf_)
  for (int64_t hi = 0; hi < (1ll << 32); hi += 4096) {
    float x[4096], r[4096], e[4096], ref_r[4096], ref_e[4096];
    uint16_t h[4096], ref_h[4096];
    #pragma omp simd
    for (int j = 0; j < 4096; ++j) {          // the portable helpers, vectorised by GCC as in kernels
      x[j] = fa_bits_f((uint32_t)(hi + j));
      ref_h[j] = fa_f2h(x[j]); ref_r[j] = fa_round_h(x[j]); ref_e[j] = fa_expf(x[j]);
    }
    for (int j = 0; j < 4096; j += FA_VEC) {
      const fa_vf v = fa_vload_f(x + j);
      fa_vstore_h(h + j, v);
      fa_vstore_f(r + j, fa_round_h(v));
      fa_vstore_f(e + j, fa_expf(v));
    }
    #pragma omp simd reduction(+:store, round_h, expf_)
    for (int j = 0; j < 4096; ++j) {
      store += fa_test_half_nan(ref_h[j]) ? !(fa_test_half_nan(h[j]) && (h[j] >> 15) == (ref_h[j] >> 15))
                                          : h[j] != ref_h[j];
      round_h += ref_r[j] != ref_r[j] ? !(r[j] != r[j] && (fa_f_bits(r[j]) >> 31) == (fa_f_bits(ref_r[j]) >> 31))
                                      : fa_f_bits(r[j]) != fa_f_bits(ref_r[j]);
      expf_ += ref_e[j] != ref_e[j] ? !(e[j] != e[j]) : fa_f_bits(e[j]) != fa_f_bits(ref_e[j]);
    }
  }
  out[0] = store; out[1] = round_h; out[2] = expf_;
}
#endif
"""


def _library():
    return load_library(prelude() + vector_helpers() + TESTS)


def _call(name, *tensors):
    fn = getattr(_library().cdll, name)
    fn.argtypes, fn.restype = [ctypes.c_void_p] * len(tensors) + [ctypes.c_int64], None
    fn(*(t.data_ptr() for t in tensors), tensors[0].numel())


def _boundaries() -> torch.Tensor:
    """Every finite float16 as a float32, the midpoints between neighbours (ties: to even) and the floats
    either side of each, overflow (65504 .. 65536) and subnormal edges, float32 extremes and subnormals,
    inf, NaN, and random floats of every magnitude; a multiple of 16 long."""
    halves = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.float16)
    finite = halves[halves.isfinite()].float().unique()
    mids = ((finite[1:].double() + finite[:-1].double()) / 2).float()
    up, down = torch.nextafter(mids, torch.tensor(torch.inf)), torch.nextafter(mids, torch.tensor(-torch.inf))
    edges = torch.tensor([0.0, 65504.0, 65519.99, 65520.0, 65536.0, 1e5, 3.4e38, 2.0 ** -24, 2.0 ** -25,
                          2.0 ** -26, 3 * 2.0 ** -26, 2.0 ** -14, 1e-30, 1e-40, 1e-45, torch.inf, torch.nan])
    gen = torch.Generator().manual_seed(5)
    wide = torch.randn(1 << 16, generator=gen) * 10.0 ** torch.randint(-12, 12, (1 << 16,), generator=gen)
    x = torch.cat([finite, mids, up, down, edges, -edges, wide])
    return torch.cat([x, torch.zeros(-x.numel() % 16)])


def _same_or_both_nan(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Equal bits, or NaN on both sides with the same sign (payload bits: see fa_test_all_floats)."""
    same = actual.view(torch.int32 if actual.dtype == torch.float32 else torch.int16) == \
        expected.view(torch.int32 if expected.dtype == torch.float32 else torch.int16)
    return same | (actual.isnan() & expected.isnan() & (actual.signbit() == expected.signbit()))


@needs_f16c
def test_the_vector_path_is_compiled_on_a_host_with_f16c(width):
    fn = _library().cdll.fa_test_lanes
    fn.restype = ctypes.c_int64
    assert fn() == width


@needs_f16c
def test_every_float16_loads_as_torchs_float(width):
    halves = torch.arange(65536, dtype=torch.int32).to(torch.uint16)
    out = torch.empty(65536, dtype=torch.float32)
    _call("fa_test_vload_h", halves, out)
    expected = halves.view(torch.float16).float()
    assert bool(_same_or_both_nan(out, expected).all())
    finite = ~expected.isnan()
    assert torch.equal(out[finite].view(torch.int32), expected[finite].view(torch.int32))


@needs_f16c
def test_stores_and_roundings_equal_torchs_conversion_on_edges_and_random_floats(width):
    x = _boundaries()
    h, r = torch.empty(x.numel(), dtype=torch.int16), torch.empty_like(x)
    _call("fa_test_vstore_h", x, h)
    _call("fa_test_vround_h", x, r)
    expected = x.half()
    same = _same_or_both_nan(h.view(torch.float16), expected)
    assert bool(same.all()), (x[~same][:8], h[~same][:8], expected.view(torch.int16)[~same][:8])
    same = _same_or_both_nan(r, expected.float())
    assert bool(same.all()), (x[~same][:8], r[~same][:8])


@needs_f16c
def test_vector_helpers_equal_the_portable_ones_on_every_float(width):
    counts = (ctypes.c_int64 * 3)()
    fn = _library().cdll.fa_test_all_floats
    fn.argtypes, fn.restype = [ctypes.c_void_p], None
    fn(ctypes.addressof(counts))
    assert dict(zip(["store", "round_h", "expf"], counts)) == {"store": 0, "round_h": 0, "expf": 0}


def test_without_f16c_the_vector_path_compiles_out(monkeypatch):
    monkeypatch.setenv("FUSE_ALL_CXXFLAGS", "-DFA_NO_VEC")
    fn = _library().cdll.fa_test_lanes
    fn.restype = ctypes.c_int64
    assert fn() == 0


# ---- which loops are written with vectors --------------------------------------------------------------

def _kernel(body, n=4096, dtype="float16") -> Kernel:
    return Kernel("kernel_0", (sympy.Integer(n),), (), [Loop(False, body)], ("arg0",), ("buf0",), ())


def _chain(dtype="float16", index=None):
    index = xvar(0) if index is None else index
    return [Load("x", "arg0", index, dtype), Const("h", 0.5, dtype), Compute("m", "mul", ("x", "h"), dtype),
            Compute("mr", "cast", ("m",), dtype), Compute("s", "sigmoid", ("mr",), dtype),
            Compute("sr", "cast", ("s",), dtype), Store("buf0", xvar(0), "sr")]


def test_a_float16_chain_gets_a_vector_loop_and_keeps_the_portable_one():
    source = render_kernel(_kernel(_chain(), n=1 << 20))
    assert "#if FA_VEC" in source and "#else" in source and "#endif" in source
    assert "fa_vload_h(&arg0[x0])" in source and "fa_vstore_h(&buf0[x0], v_s)" in source
    assert "#pragma omp parallel for\n" in source                # the vector loop: threads over its steps
    assert "#pragma omp parallel for simd\n" in source           # the portable loop, unchanged


def test_a_float32_buffer_read_as_float16_rounds_on_both_paths():
    body = [Load("x", "arg0", xvar(0), "float16"), Compute("a", "abs", ("x",), "float16"),
            Store("buf0", xvar(0), "a")]
    source = render_kernel(_kernel(body, n=1 << 20), {"arg0": "float32", "buf0": "float16"})
    assert "fa_round_h(fa_vload_f(&arg0[x0]))" in source and "fa_round_h((float)arg0[x0])" in source


def test_loops_the_vector_form_does_not_cover_stay_portable():
    strided = _chain(index=2 * xvar(0))
    masked = [Load("k", "arg0", xvar(0), "float16", mask="b")]
    float32 = _chain("float32")
    integer = _chain() + [Compute("i", "cast", ("x",), "int32")]
    short = _kernel(_chain(), n=7)
    for kernel in (_kernel(strided, n=2048), _kernel(float32, dtype="float32"), _kernel(integer), short):
        assert "FA_VEC" not in render_kernel(kernel)
    from fuse_all_codegen_cpp.vector_loops import vector_values
    assert vector_values(masked, xvar(0), {"arg0": "float16"}, {"k": "float16"}) is None


# ---- whole programs: the F16C path and the portable one ------------------------------------------------

def _programs():
    """(function, inputs, whether both paths give the same bits): pointwise programs do; programs with
    sums do not quite (the vector path adds each lane's partial sums, then the lanes pairwise; GCC's
    `omp simd reduction` combines its lanes in another order): within eager's tolerance."""
    gen = torch.Generator().manual_seed(3)
    ln = torch.nn.LayerNorm(771, dtype=torch.float16).requires_grad_(False)
    ln.weight.copy_(torch.rand(771, generator=gen) + 0.5)
    ln.bias.copy_(torch.rand(771, generator=gen) * 2 - 1)

    def chain(x, y):
        return (torch.sigmoid(x * y + x) * (x - y).abs() + 1) * 0.5

    def layer_norm_gelu(x, y):
        return torch.nn.functional.gelu(ln(x + y))

    def mixed(x, y):     # float16 * float32 -> float32; a row broadcast; 2-D rows with a remainder
        return x.float()[:, :, None] * y.float()[:, None, :], (x + y[0]).half() * 3

    def softmax_and_max(x):   # max and sum accumulators; rows with NaN, inf and -inf
        return torch.softmax(x * 0.5 + 1, dim=-1), torch.amax(x * 1.5, dim=-1), torch.amin(x - 1, dim=-1)

    a = torch.randn(100003, generator=gen).half()
    b = torch.randn(100003, generator=gen).half()
    c = torch.randn(37, 771, generator=gen).half()
    d = torch.randn(37, 771, generator=gen).half()
    e = (torch.randn(9, 21, generator=gen) * 100).half()
    f = (torch.randn(23, 1000, generator=gen) * 4).half()
    f[3, 17], f[5, 999], f[7, 40], f[7, 41], f[9, 0] = torch.nan, torch.nan, torch.inf, -torch.inf, -torch.inf
    return [(chain, (a, b), True), (mixed, (e, e[:, :1].expand(9, 21).contiguous()), True),
            (layer_norm_gelu, (c, d), False), (softmax_and_max, (f,), False)]


def _run_all(monkeypatch, flags: str):
    """Every program compiled afresh with `flags`; the flags of each compiler call are recorded."""
    monkeypatch.setenv("FUSE_ALL_CXXFLAGS", flags)
    seen = []
    real = compiler.compile_library

    def spy(source, so, compiler_cmd=None, flags=None):
        seen.append((flags, source))
        return real(source, so, compiler_cmd, flags)
    monkeypatch.setattr(compiler, "compile_library", spy)
    outs = []
    for fn, args, exact in _programs():
        torch._dynamo.reset()
        out = torch.compile(fn, backend="fuse_all", options={"fallback": False})(*args)
        expected = fn(*args)
        outs.append((out if isinstance(out, tuple) else (out,),
                     expected if isinstance(expected, tuple) else (expected,), exact))
    monkeypatch.undo()
    return outs, seen


@needs_f16c
@pytest.mark.parametrize("vector_flags", [p.values[0] for p in WIDTHS], ids=[p.id for p in WIDTHS])
def test_float16_programs_give_the_same_bits_on_both_paths(monkeypatch, vector_flags):
    vec, vec_compiles = _run_all(monkeypatch, vector_flags)
    portable, portable_compiles = _run_all(monkeypatch, vector_flags + " -DFA_NO_VEC")
    # each path compiled its own libraries, with vector loops in them (the flag picks the branch)
    sources = "".join(source for _, source in vec_compiles)
    for used in ("fa_vload_h(", "fa_vstore_h(", "fa_vsum(", "fa_vmax(", "fa_vmin("):
        assert used in sources, used
    assert re.search(r"const fa_vf \w+ = erff\(", sources)      # gelu: libmvec's vector erff
    assert portable_compiles and all("-DFA_NO_VEC" in flags for flags, _ in portable_compiles)
    for (ours_v, eager, exact), (ours_p, _, _) in zip(vec, portable):
        for v, p, e in zip(ours_v, ours_p, eager):
            if exact:
                assert torch.equal(v.view(torch.int16 if v.dtype == torch.float16 else torch.int32),
                                   p.view(torch.int16 if p.dtype == torch.float16 else torch.int32))
            torch.testing.assert_close(v, p, atol=2e-3, rtol=2e-3, equal_nan=True)
            torch.testing.assert_close(v, e, atol=2e-2, rtol=1e-2, equal_nan=True)
