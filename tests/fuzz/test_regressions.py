"""Every bug class the differential fuzzer found, as a named test (minimised by hand from its reproducer).

Each test names the fuzz program it came from (`python tests/fuzz/fuzz.py --seed S --only I --codegen C`).
Classes known from issue 9 that other changes are fixing are marked xfail(strict=True) while they still
fail on this branch, so the mark must be dropped once they are fixed.
"""
import pytest
import torch

from fuse_all_optest import BOTH, assert_same, compile_fn, make


def _run_calls(fn, calls, codegen, dynamic=None, check_strides=True):
    """Compile `fn` once (no fallback allowed) and compare to eager on each set of inputs in turn."""
    compiled = compile_fn(fn, codegen, dynamic=dynamic)
    for inputs in calls:
        expected = fn(*[x.clone() for x in inputs])
        actual = compiled(*inputs)
        assert_same(actual, expected, atol=1e-5, rtol=1e-5, check_strides=check_strides)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
def test_dynamic_3d_pointwise_index_decomposition(codegen, layout):
    """Triton: the flat index of a 3-D dynamic-shape kernel was split as `xindex // s1*s2` (read as
    `(xindex // s1) * s2`): wrong values and out-of-bounds stores that corrupted the heap (segfaults in
    later programs). Fuzz: seed 0 index 11/16 (triton, dynamic=True)."""
    def fn(x):
        return x.cos() * 2
    calls = [[make((5, 3, 7), layout=layout)], [make((10, 8, 12), layout=layout)]]
    _run_calls(fn, calls, codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_view_of_empty_tensor_with_zero_stride_dims(codegen):
    """C++: `x.view(-1)` of a (31, 0, 13) tensor indexed the source with FloorDiv(flat, 0) -> `zoo` in
    the generated C++ (CppCompileError, the graph ran in ATen). Fuzz: seed 0 index 31 (cpp)."""
    def fn(x, y):
        return x.view(-1) == y, x.reshape(13, 0, 31) + 1
    _run_calls(fn, [[torch.randn(31, 0, 13), torch.randn(0)]], codegen)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_minimum_maximum_of_a_broadcast_scalar(codegen, dtype):
    """Triton: torch.minimum/maximum of a 0-d (or size-1) input and a block crashed the interpreter
    (`(a < b) | (a != a)`: "ufunc 'bitwise_or' not supported"). NaN still wins on either side.
    Fuzz: seed 9 index 16 (triton)."""
    def fn(a, b):
        return torch.minimum(a, b), torch.maximum(b, a), torch.maximum(a, b)
    b = torch.randn(32, dtype=dtype)
    b[3] = float("nan")
    _run_calls(fn, [[torch.randn((), dtype=dtype), b], [torch.tensor([float("nan")], dtype=dtype), b]], codegen)
