"""Every bug class the differential fuzzer found, as a named test (minimised by hand from its reproducer).

Each test names the fuzz program it came from (`python tests/fuzz/fuzz.py --seed S --only I --codegen C`).
Classes known from issue 9 that other changes are fixing are marked xfail(strict=True) while they still
fail on this branch, so the mark must be dropped once they are fixed.
"""
import pytest
import torch

from fuse_all_optest import BOTH, assert_same, compile_fn, make
from regression_helpers import run_calls


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "expanded"])
def test_dynamic_3d_pointwise_index_decomposition(codegen, layout):
    """Triton: the flat index of a 3-D dynamic-shape kernel was split as `xindex // s1*s2` (read as
    `(xindex // s1) * s2`): wrong values and out-of-bounds stores that corrupted the heap (segfaults in
    later programs). Fuzz: seed 0 index 11/16 (triton, dynamic=True)."""
    def fn(x):
        return x.cos() * 2
    calls = [[make((5, 3, 7), layout=layout)], [make((10, 8, 12), layout=layout)]]
    run_calls(fn, calls, codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_view_of_empty_tensor_with_zero_stride_dims(codegen):
    """C++: `x.view(-1)` of a (31, 0, 13) tensor indexed the source with FloorDiv(flat, 0) -> `zoo` in
    the generated C++ (CppCompileError, the graph ran in ATen). Fuzz: seed 0 index 31 (cpp)."""
    def fn(x, y):
        return x.view(-1) == y, x.reshape(13, 0, 31) + 1
    run_calls(fn, [[torch.randn(31, 0, 13), torch.randn(0)]], codegen)


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
    run_calls(fn, [[torch.randn((), dtype=dtype), b], [torch.tensor([float("nan")], dtype=dtype), b]], codegen)


@pytest.mark.triton
def test_any_and_all_of_a_loop_invariant_bool_in_a_looped_reduction():
    """Triton: `all`/`amax` of `v1 < a0`, `v1` a one-element buffer and `a0` an expanded (stride-0) input,
    under dynamic shapes: every step of the looped reduction ORs the same scalar load into its accumulator,
    and the interpreter computed the scalar comparison as float32 data ("ufunc 'bitwise_or' not
    supported"; such loads are [1, 1] blocks now). Fuzz: seed 132 index 1068 (triton), replayed whole; the
    GPU twin is tests/cuda/test_fuzz_regressions_cuda.py."""
    import fuzzcheck
    import fuzzgen
    fuzzcheck.quiet()
    prog = fuzzgen.generate(132, 1068, max_numel=1500, dynamic_frac=0.5, half_frac=0.3, train_frac=0.5)
    assert "amax" in prog.describe() and "torch.all" in prog.describe()
    res = fuzzcheck.run_program(prog, "triton")
    assert res.invalid is None and res.kernels > 0
    assert not res.findings, [f"{f.kind}: {f.detail}" for f in res.findings]


@pytest.mark.parametrize("codegen", BOTH)
def test_squeeze_of_a_size_that_only_a_guard_makes_one(codegen):
    """`x.chunk(2, 1)[-1]` of a (rows, s) input under dynamic shapes has width s - (s + 1)//2, which a guard
    makes 1 for s in {2, 3}; `.squeeze()` drops that dim in torch, the lowering kept it (it only knew
    literal 1s), and the output read the wrong elements (29 of 65 wrong for s = 3). Fuzz: seed 133 index
    1292 (cpp)."""
    def fn(a0):
        v3 = torch.floor(a0.chunk(2, 1)[-1]).unsqueeze(1).expand(-1, 5, -1)
        return torch.round(v3.squeeze())
    calls = [[make((cols, rows), torch.float16, low=-3, high=3).t()] for rows, cols in ((11, 2), (13, 3))]
    run_calls(fn, calls, codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_unbind_of_a_dim_whose_size_a_guard_fixed(codegen):
    """`a.unflatten(0, (2, -1)).unbind(1)` under dynamic shapes: the unbound dim is s // 2, a symbol that a
    guard fixed, and int() of it sent the graph to ATen. Fuzz: seed 133 index 602 (cpp)."""
    def fn(a0):
        return a0.unflatten(0, (2, -1)).unbind(1)[-1] * 2
    calls = [[make((1, cols)).expand(rows, cols)[:, 1:]] for rows, cols in ((2, 34), (4, 36))]
    run_calls(fn, calls, codegen, dynamic=True)


def _automatic_dynamic(fn, shapes, codegen, make_inputs):
    """Three calls with changing sizes under automatic dynamic shapes (the third reuses the dynamic graph)."""
    run_calls(fn, [make_inputs(s) for s in shapes], codegen, dynamic=None)


@pytest.mark.parametrize("codegen", BOTH)
def test_slice_end_beyond_symbolic_size(codegen):
    """`v[1:5:2]` of a dim that became dynamic (size 2 on the second call): the slice length was computed
    as if the dim had >= 5 elements -> as_strided out of bounds (or reads past the buffer).
    Fuzz: seed 2 index 255 (triton; cpp too)."""
    def fn(a, b):
        return ((a == b.to(torch.int64)).sum(0)[1:5:2],)
    _automatic_dynamic(fn, [(8, 5), (9, 2), (10, 4)], codegen,
                       lambda s: [torch.randn(s).to(torch.bfloat16), torch.tensor([True])])


@pytest.mark.parametrize("codegen", BOTH)
def test_reshape_flat_of_dynamic_permuted_input(codegen):
    """`x.reshape(-1)` of a permuted input whose sizes became dynamic, then stacked: TypeError
    "unsupported operand type(s) for *: 'One' and 'NoneType'" in contiguous_strides (graph runs in ATen).
    Fuzz: seed 1 index 175 (cpp)."""
    def fn(x):
        flat = x.reshape(-1)
        return (torch.stack([flat, flat * 2], 0),)
    _automatic_dynamic(fn, [(32, 11, 1), (31, 12, 1), (29, 16, 1)], codegen,
                       lambda s: [torch.randn(s[2], s[0], s[1]).permute(1, 2, 0)])


@pytest.mark.parametrize("codegen,n", [("cpp", 4 * 1009), ("cpp", 4 * 1_000_003),
                                       pytest.param("triton", 4 * 1009, marks=pytest.mark.triton)])


def test_view_by_a_symbolic_divisor(codegen, n):
    """`x.view(4, -1)` under dynamic=True inferred the -1 dim as `s77/4` (a Rational coefficient):
    "index expression r0 + r1*s77/4 is not integer arithmetic" (the graph could not compile). torch guards
    the divisibility, so the size is FloorDiv(s77, 4)."""
    def fn(x):
        return (x.view(4, -1).t() * 2 + 1).sum(), x.view(-1, 4)[1:].t() - 1
    run_calls(fn, [[torch.randn(n)], [torch.randn(n + 8)]], codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_sum_over_an_empty_dim(codegen):
    """`stack([x, 2x]).sum((1, 2))` of a (0, 31) tensor is zeros(2); the Triton kernel failed with
    "Mask argument cannot be block type if pointer argument is not a block". Fuzz: seed 0 index 10."""
    def fn(x):
        return (torch.stack([x, x * 2], 0).sum((1, 2)),)
    run_calls(fn, [[torch.randn(0, 31)]], codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_reductions_over_an_empty_dim_give_the_identity(codegen):
    """Every reduction eager accepts over zero elements, fused with pointwise work before and after."""
    def fn(x, y):
        return ((x * 2).prod(0) + y, (x > 0).any(0), (x < 0).all(0), x.mean(0), x.sum(0, keepdim=True) + y,
                x.to(torch.int32).sum(0))
    run_calls(fn, [[torch.randn(0, 31), torch.randn(31)]], codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_select_and_leading_slice_of_a_dynamic_dim_keep_size_one(codegen):
    """`a[:, 1]` of a dim that became dynamic: once slice ends were clamped with Min, select's inner slice
    had size Min(2, s) - 1, which neither squeezed nor broadcast as 1 ("output with shape [1] doesn't
    match the broadcast shape [10, 1]" at run time). Select's bounds are in range; a slice's length is
    the traced one. Fuzz (long mode): seed 7 index 29."""
    def fn(a, y):
        v = torch.roll(a[:, 1].diagonal(0, 0, 1), 1, 0)
        return torch.softmax(torch.nn.functional.layer_norm(v, [1]), 0), a[:, :1] + y, a[:, 1:5:2] * 2
    _automatic_dynamic(fn, [(1, 4, 8), (1, 2, 10), (1, 6, 7)], codegen,
                       lambda s: [torch.randn(s), torch.randn(s[0], 1, s[2])])


@pytest.mark.parametrize("codegen", BOTH)
def test_no_load_from_an_empty_tensor_whose_index_a_reshape_dropped(codegen):
    """Triton: `softmax(((x + y).reshape(-1)), 0)` of a (64, 32, 13, 0) sum is a persistent reduction over
    () x (0,). The reshape of an empty value loads index 0 whatever the index, so the load no longer
    depended on the reduction index, was hoisted out of the rmask and read element 0 of a zero-byte
    (null) buffer: the interpreter segfaulted, a GPU faults the same way. A zero-element buffer is now
    never read (its loads are a constant no output can see). Fuzz: seed 31 index 455 (triton)."""
    def fn(x, y, z):
        v = (torch.nn.functional.mish(x) + y.clamp(-1, 1)).reshape(-1)
        return torch.softmax(-v, 0), torch.nn.functional.pad(x, [1, 2], value=0.5) + 1, v.sum() + z.sum()
    inputs = [torch.randn(64, 32, 13, 0), torch.randn(64, 32, 13, 1), torch.randn(8)]
    run_calls(fn, [inputs], codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_a_failing_aot_autograd_trace_falls_back_instead_of_crashing(codegen, caplog):
    """Training + dynamic shapes: the std of one element (N - correction == 0) raised ZeroDivisionError
    "float division by zero" out of torch.compile. The cause is torch's own: AOTAutograd traces autograd's
    std/var backward, `2.0 / (N - correction)` as a SymFloat, whose hint Python divides by 0 (aot_eager
    and inductor raise the same). It escaped the fallback because it happens while AOTAutograd traces,
    before any ATen graph reaches compile_graph's guard; now that graph runs as Dynamo's (eager) graph
    with a one-line reason. Fuzz: seed 31 index 73 --dynamic-frac 0.5 (cpp and triton)."""
    import fuse_all

    def fn(x):
        return torch.std(x.sum(1).chunk(2, 0)[-1], (0,), keepdim=True), (x * 2).sin()
    fuse_all.backend.reset()
    compiled = torch.compile(fn, backend="fuse_all", options={"codegen": codegen}, dynamic=True)
    x = torch.randn(3, 4, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    with caplog.at_level("WARNING", logger="fuse_all"):
        got, want = compiled(x), fn(x_eager)
    assert_same(got, want, atol=1e-6, rtol=1e-6)   # [nan] and the sines
    sum(t.sum() for t in got).backward()
    sum(t.sum() for t in want).backward()
    assert_same(x.grad, x_eager.grad, atol=1e-6, rtol=1e-6)   # nan rows like eager's
    reasons = [r.fallback_reason for r in fuse_all.compiled_graphs() if r.fallback_reason]
    assert reasons == ["AOTAutograd tracing failed: ZeroDivisionError: float division by zero"]
    assert "ZeroDivisionError" in fuse_all.compiled_graphs()[-1].fallback_traceback
    assert any("runs uncompiled" in r.getMessage() for r in caplog.records)
    strict = torch.compile(fn, backend="fuse_all", options={"codegen": codegen, "fallback": False}, dynamic=True)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="float division by zero"):
        strict(torch.randn(3, 4, requires_grad=True))


@pytest.mark.parametrize("codegen", BOTH)
def test_merged_dims_with_a_symbolic_inner_size_are_expanded(codegen):
    """C++, dynamic shapes: `amax(1, keepdim=True)` of an (s, 32, s) tensor then `narrow(0, 1, s - 2)`
    copies the (s - 2, 1, s) view; merging its two dims substituted x0 -> x0/s into `s*(x0 + 1) + x1`,
    which sympy leaves as `s*(1 + x0/s)` (not integer arithmetic: UnsupportedSymbolic, the graph ran in
    ATen). Merged indices are expanded. Fuzz: seed 41 index 206 (cpp)."""
    def fn(a):
        v = (a * 3).amax(1, keepdim=True)
        return v.narrow(0, 1, v.shape[0] - 2), v + 1
    calls = [[torch.randint(-8, 8, (n, 32, n))] for n in (4, 6)]
    run_calls(fn, calls, codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_a_symbolic_size_that_broadcasts_as_one(codegen):
    """Dynamic shapes, both codegens: `a.chunk(2, 1)[-1]` of an (n, s) input has size s - (s + 1)//2, which
    torch broadcast against s under a guard that it is 1 (s in {2, 3}); the IR compared it to 1 by form,
    so it was not broadcast and the load walked the columns past the chunk: wrong values at s = 3,
    silently. Sizes are now told apart by the example sizes. Fuzz: seed 42 index 108 (triton)."""
    def fn(a):
        v = a.chunk(2, 1)[-1]
        return torch.minimum(v, a), torch.where(v > 0, a, v), a.masked_fill(v > 0, 0.5)
    run_calls(fn, [[torch.randn(7, 2)], [torch.randn(6, 3)], [torch.randn(5, 2)]], codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_argmin_argmax_of_an_expanded_input_in_a_looped_reduction(codegen):
    """Triton interpreter, dynamic shapes: argmin over dim 0 of a stride-0 (expanded) input loads one
    scalar per step, and `fa.argmin_combine`'s `(a_nan & b_nan)` of a block and that scalar failed
    ("ufunc 'bitwise_and' not supported"). The combine is nested wheres now; NaN still wins and the
    first index on ties. Fuzz: seed 42 index 0 (triton)."""
    def fn(a, b):
        return torch.argmin(a, 0), a.argmax(0), torch.argmin(a + b, 0), (a + b).argmax(0)
    nan = torch.tensor([[float("nan")]])
    calls = [[torch.randn(1, 1).expand(4, 5), torch.randn(4, 5)],
             [torch.randn(1, 1).expand(6, 2), torch.randn(6, 2)],
             [nan.expand(5, 3), torch.randn(5, 3)]]
    run_calls(fn, calls, codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
def test_pad_of_a_reshaped_strided_input_reads_the_right_elements(codegen):
    """`F.pad(a.unflatten(0, (3, -1)), [2, 2, 2, 2])` of a (33, 8) input with strides (2, 66): the reshape
    read the input at FloorDiv(x2 - 18, 8), which index simplification rewrote to 0 (upper bound -7 < 8,
    the numerator's sign unchecked) and the codegens printed with truncating division: 264 of 540 elements
    wrong. Fuzz: seed 51 index 1221 (both codegens); more of the class in tests/ops/test_shifted_views.py."""
    def fn(a):
        return torch.nn.functional.pad(a.unflatten(0, (3, -1)), [2, 2, 2, 2], value=1.0)
    run_calls(fn, [[torch.randn(8, 66).t()[::2]]], codegen)


@pytest.mark.parametrize("codegen", BOTH)
def test_merged_dims_with_a_constant_inner_size_and_a_symbolic_stride_are_expanded(codegen):
    """C++, dynamic shapes: `atan2(pad(a), b)` with b of shape (s0, 12, 1, s1 + 3) reads b at
    `x0*(12*s1 + 36) + x1*(s1 + 3)`; merging the (s0, 12) dims substituted x0 -> x0/12, which sympy leaves
    as `x0*(12*s1 + 36)/12` (a rational factor is not a power, so the merged index was not expanded:
    UnsupportedSymbolic, the graph ran in ATen). Fuzz: seed 51 index 789 (cpp)."""
    def fn(a, b):
        return (torch.atan2(torch.nn.functional.pad(a, [1, 2, 1, 2], value=1.0), b),)
    compiled = compile_fn(fn, codegen)
    for c, h, w in [(3, 5, 4), (4, 6, 7)]:
        a, b = torch.randn(c, 12, h, w), torch.rand(c, 12, 1, w + 3) + 0.5
        torch._dynamo.mark_dynamic(a, [0, 2, 3])
        torch._dynamo.mark_dynamic(b, [0, 3])
        assert_same(compiled(a, b), fn(a, b), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("codegen", BOTH)
def test_a_gradient_that_is_a_reshaped_tangent_keeps_the_tangents_layout(codegen):
    """`a1.unsqueeze(0) + a0` with a0 transposed: the output, and so the tangent the backward gets, has
    strides (128, 1, 2); a0's gradient is `sum(tangent, 0, keepdim).view(2, 64)`, a sum over a size-1 dim,
    which lowers to the tangent itself. The output path that returns a traced view of a graph input took
    the view's traced (contiguous) strides on the tangent's storage: the gradient read the tangent
    transposed. Fuzz: seed 88 index 1462 (cpp)."""
    def fn(a0, a1):
        return (a1.unsqueeze(-3) + a0,)
    a0 = torch.randn(64, 2).t().requires_grad_()
    a1 = torch.randn(1, 64).requires_grad_()
    cotangent = torch.randn(1, 2, 64)
    expected = torch.autograd.grad(fn(a0, a1), [a0, a1], cotangent)
    actual = torch.autograd.grad(compile_fn(fn, codegen)(a0, a1), [a0, a1], cotangent)
    assert_same(actual, expected, atol=1e-6, rtol=1e-6, what="gradient")


@pytest.mark.parametrize("codegen", BOTH)
def test_sibling_merge_keeps_members_after_what_they_read(codegen):
    """Sibling fusion sorted a merged group's members by graph position, but a node's position need not
    follow its reads (here buf5 read buf8): the probe kernel build raised KeyError and the forward graph ran
    in ATen. Fuzz: seed 99 index 794 (cpp)."""
    def fn(a0):
        v0 = a0.var(correction=1)
        v2 = torch.cosh(a0)
        v4 = torch.nn.functional.log_softmax(torch.amin(a0, 0, keepdim=True), 0)
        return torch.hypot(v0, v2), torch.add(v0, a0, alpha=2), v4
    run_calls(fn, [[make((4, 2, 13)).requires_grad_()]], codegen)   # the training forward graph


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("op", [torch.logical_and, torch.logical_or, torch.logical_xor], ids=lambda f: f.__name__)
def test_logical_ops_of_a_comparison_of_broadcast_scalars(codegen, op):
    """Triton interpreter: `logical_xor(a2 != a4, x >= a2)` with 0-d float16 a2, a4 raised "ufunc
    'bitwise_xor' not supported" (the comparison of two scalars was a float there; `&` and `|` too).
    Fuzz: seed 116 index 275 (triton)."""
    def fn(a, c, x):
        return op(a != c, x >= a), op(x >= a, a != c), op(a != c, a > c)
    a, c = torch.tensor(0.5, dtype=torch.float16), torch.tensor(0.25, dtype=torch.float16)
    run_calls(fn, [[a, c, torch.randn(8)], [c, c, torch.randn(8)]], codegen)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("case", ["to_end", "step", "negative_end", "padded_view_of_strided"])
def test_a_negative_slice_start_beyond_a_symbolic_size_is_clamped_to_zero(codegen, case):
    """`x[..., -5:]` of a dim that became dynamic and is 4 on a later call (the graph traced for sizes < 5
    has the slice's size s1): the start was lowered as s1 - 5, unclamped, so the slice began one element
    before the row (wrong values, a read before the buffer for the first row). Fuzz: seed 120 index 838
    (triton and cpp: `F.pad(a0.flatten(0, 1)[..., -5:], [1, 0, 1, 5])` of a permuted, sliced float16 a0)."""
    slicer = {"to_end": lambda a: a[..., -5:], "step": lambda a: a[..., -5::2], "negative_end": lambda a: a[..., -7:-1],
              "padded_view_of_strided": lambda a: torch.nn.functional.pad(a.flatten(0, 1)[..., -5:], [1, 0, 1, 5])}[case]

    def fn(a):
        return (slicer(a) * 2, slicer(a))
    strided = case == "padded_view_of_strided"

    def inputs(shape):
        if strided:   # a permuted input with a step, as the fuzz program's a0
            return [torch.randn(shape[2] * 3, shape[1], shape[0]).permute(2, 1, 0)[:, :, ::3]]
        return [torch.randn(shape)]
    shapes = [(3, 33, 5), (2, 32, 6), (8, 34, 4), (4, 31, 2)] if strided else [(3, 5), (2, 6), (8, 4), (5, 2)]
    _automatic_dynamic(fn, shapes, codegen, inputs)


PADDED_BACKWARD = r"""
import sys, torch, fuse_all
sys.path[:0] = sys.argv[2:]
from fuse_all_optest import compile_fn, make


def fn(a0, a1):
    v0 = torch.ge(a0, a1)
    v2 = torch.sigmoid(torch.nn.functional.pad(a0, [1, 1, 2, 0])) * 2 - 1
    return torch.atan(v2 ** 2), torch.nn.functional.logsigmoid(v2), v0, a1.squeeze(), a1[-9:-1]

compiled = compile_fn(fn, sys.argv[1], dynamic=True, allow_fallback=True)   # a failure is a recorded fallback
for shape in ((13, 8, 3), (18, 9, 2)):
    a0 = make(shape[1:] + shape[:1]).permute(2, 0, 1).requires_grad_(True)
    a1 = make(shape[1:]).requires_grad_(True)
    got, want = compiled(a0, a1), fn(a0, a1)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
fallbacks = [r.fallback_reason for r in fuse_all.compiled_graphs() if r.fallback_reason]
assert not fallbacks, fallbacks
print("@@ok")
"""


@pytest.mark.parametrize("codegen", BOTH)
def test_a_backward_whose_sizes_hold_symbols_only_inside_sums_defines_them(codegen):
    """Under dynamic shapes, the recompiled graph's backward (compiled ahead, with the forward) gets the
    padded tangents of size (s62, s74 + 2, s19 + 2) and no input whose size is s74 itself: the host program
    read s74 without defining it (HostProgramError: the backward ran in ATen). Such symbols are now computed
    back from the sizes: s74 = arg.size(1) - 2. Fuzz: seed 131 index 480 (Triton). Run in a new process, as
    the fuzzer runs programs: inside this suite's process the failure did not show (not understood)."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", PADDED_BACKWARD, codegen, os.path.join(os.path.dirname(here), "ops"),
                           here], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRITON_INTERPRET": "1"})
    assert "@@ok" in proc.stdout and "HostProgramError" not in proc.stderr, proc.stderr[-3000:]
