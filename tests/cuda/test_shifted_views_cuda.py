"""Shifted reads through a reshape of a strided input, compiled for the GPU (marker `cuda`; see conftest.py
for the command): a pad/cat/slice over `x.reshape(...)` indexes x with FloorDiv/ModularIndexing of a
numerator that is negative in masked lanes and, after FloorDiv splits off multiples of the divisor, in
reading lanes too (fuzz seed 51 index 1221: 264 of 540 elements wrong). Triton's integer `//` and `%`
truncate on the GPU, so the printer may use them only on provably non-negative numerators; the CPU suite
runs the same programs under Triton's interpreter (tests/ops/test_shifted_views.py), which emulates the
truncation, and this module checks the compiled kernels."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F

import fuse_all
import fuse_all_optest as ot

pytestmark = pytest.mark.cuda
DEVICE = "cuda"

SHIFTED = {
    "fuzz_51_1221": (lambda a: F.pad(a.contiguous().view(3, 11, 8), [2, 2, 2, 2], value=1.0),
                     lambda: torch.randn(8, 66, device=DEVICE).t()[::2]),
    "unflatten_then_pad": (lambda a: F.pad(a.unflatten(0, (3, -1)), [2, 2, 2, 2], value=1.0),
                           lambda: torch.randn(8, 66, device=DEVICE).t()[::2]),
    "pad_3d": (lambda x: F.pad(x.reshape(2, 3, 4), (1, 2, 1, 0, 1, 1)),
               lambda: torch.randn(4, 6, device=DEVICE).t()),
    "constant_pad_nd": (lambda x: torch.constant_pad_nd(x.reshape(2, 12), (5, 0, 1, 0), 0.5),
                        lambda: torch.randn(4, 6, device=DEVICE).t()),
    "negative_start_slice_then_pad": (lambda x: F.pad(x.reshape(3, 8)[:, -5:], (1, 1, 1, 1)),
                                      lambda: torch.randn(4, 6, device=DEVICE).t()),
    "cat_then_column_slice": (lambda x: torch.cat([x.reshape(3, 8) * 2, x.reshape(3, 8)], 0)[:, 1:],
                              lambda: torch.randn(4, 6, device=DEVICE).t()),
    "pad_then_reduce": (lambda x: F.pad(x.reshape(3, 8), (2, 2, 1, 1), value=1.0).sum(-1),
                        lambda: torch.randn(4, 6, device=DEVICE).t()),
    # large enough for several programs and a multi-block reduction-free kernel
    "pad_large": (lambda x: F.pad(x.reshape(96, 40, 8), (3, 2, 1, 2), value=-1.0),
                  lambda: torch.randn(8, 2 * 3840, device=DEVICE).t()[::2]),
}


def _triton_only():
    graphs = fuse_all.compiled_graphs()
    assert graphs and all(g.fallback_reason is None and g.language == "triton" for g in graphs), \
        [(g.graph_id, g.language, g.fallback_reason) for g in graphs]


@pytest.mark.parametrize("name", sorted(SHIFTED))
def test_shifted_read_through_a_reshape(name):
    fn, make_input = SHIFTED[name]
    ot.check(fn, make_input(), codegen="triton")
    _triton_only()


@pytest.mark.parametrize("dynamic", [False, True])
def test_pad_of_a_reshaped_strided_input_dynamic(dynamic):
    def fn(a):
        return F.pad(a.reshape(-1, 3, 8), [2, 1, 3, 2], value=1.0)
    compiled = ot.compile_fn(fn, "triton", dynamic=dynamic)
    for n in (66, 90, 126):
        a = torch.randn(8, n, device=DEVICE).t()[::2]
        torch.testing.assert_close(compiled(a), fn(a), rtol=0, atol=0)
    _triton_only()


def test_compiled_floordiv_and_modular_indexing_of_negative_numerators(tmp_path):
    """The printer's output for the IR's FloorDiv/ModularIndexing over a block of lanes whose numerators
    run from negative to positive, compiled for the GPU, against Python's floor semantics."""
    from fuse_all_codegen_triton.indexing import triton_index
    from fuse_all_ir.symbolic import FloorDiv, ModularIndexing, size_symbol, xvar
    x, s = xvar(0), size_symbol("s0")
    exprs = [FloorDiv(x - 18, 8), ModularIndexing(x - 18, 1, 8), ModularIndexing(3 * x - 40, 2, 5),
             FloorDiv(x - 7, s), ModularIndexing(x - 7, 1, s), FloorDiv(x + 6, 8) - 3]
    lines = [f"    tl.store(out + {i} * 64 + x0, ({triton_index(e)}).to(tl.int64))" for i, e in enumerate(exprs)]
    source = ("import triton\nimport triton.language as tl\n"
              "from fuse_all_codegen_triton import helpers as fa\n\n\n@triton.jit\n"
              "def probe(out, s0):\n    x0 = tl.arange(0, 64)\n" + "\n".join(lines) + "\n")
    path = tmp_path / "negative_numerators.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("negative_numerators", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for size in (3, 8):
        out = torch.empty(len(exprs) * 64, dtype=torch.int64, device=DEVICE)
        module.probe[(1,)](out, size)
        got = out.view(len(exprs), 64).cpu()
        for i, e in enumerate(exprs):
            want = [int(e.xreplace({x: v, s: size})) for v in range(64)]
            assert got[i].tolist() == want, f"{e} -> {triton_index(e)}"
