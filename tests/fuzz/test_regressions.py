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
def test_layer_norm_of_constant_rows_is_zero(codegen):
    """layer_norm of rows whose elements are all equal (an expanded input, padding rows) is exactly 0 in
    eager (and in float64); fuse_all gave ~2e-5. Fuzz: seed 1 index 347 (cpp)."""
    def fn(x):
        return (torch.nn.functional.layer_norm(-x, [64]),)
    x = (torch.rand(64, 1, 1) * 1.5 + 0.5).expand(64, 17, 64)
    assert fn(x)[0].abs().max() == 0          # eager: exactly zero
    got = compile_fn(fn, codegen)(x)[0]
    assert got.abs().max() == 0, f"layer_norm of constant rows: max |out| {got.abs().max():.2e}, eager 0"


@pytest.mark.parametrize("codegen", BOTH)
def test_var_mean_of_constant_rows_is_exact(codegen):
    """The mean of a constant row is its value and its variance 0, as eager's Welford gives (sum / n of n
    equal values is not exact): var_mean and the mean/rstd layer_norm saves for the backward."""
    def fn(x):
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [37], None, None, 1e-5)
        var, m = torch.var_mean(x, -1)
        return mean, var, m, rstd
    x = (torch.rand(9, 1) * 3 + 0.1).expand(9, 37).contiguous()
    got, want = compile_fn(fn, codegen)(x), fn(x)
    for g_, w_ in zip(got[:3], want[:3]):
        assert torch.equal(g_, w_), (g_, w_)
    torch.testing.assert_close(got[3], want[3], rtol=1e-6, atol=0)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("what", ["std", "var", "std_mean"])
def test_std_var_of_constant_rows_of_large_values(codegen, what):
    """`torch.std(v, -2)` over 13 equal values of ~200 (an expanded input, cubed) is exactly 0 in eager and
    float64; the capture decomposition's plain two-pass variance gave 3e-5 (the first mean's rounding in
    every deviation), > 10x eager's error. Now the corrected two-pass algorithm, as the IR's own var
    lowering. Rows that are not constant keep float32 accuracy against float64. Fuzz: seed 13 index 133."""
    reduce = {"std": lambda v: torch.std(v, -2, keepdim=True), "var": lambda v: v.var(-2, correction=0),
              "std_mean": lambda v: torch.std_mean(v, -2)[0]}[what]

    def fn(x):
        return (reduce(torch.pow(x, 3)),)
    constant = (torch.rand(17, 1, 4, dtype=torch.float64) * 4 + 2).expand(17, 13, 4)
    mixed = constant.clone()
    mixed[::2] += torch.rand(9, 13, 4, dtype=torch.float64)
    compiled = compile_fn(fn, codegen)
    for x64 in (constant, mixed):
        x = x64.float()
        got, eager, reference = compiled(x)[0], fn(x)[0], fn(x64)[0]
        if x64 is constant:
            assert eager.abs().max() == 0 and reference.abs().max() == 0
        error = (got.double() - reference).abs().max().item()
        eager_error = (eager.double() - reference).abs().max().item()
        assert error <= 10 * eager_error + 1e-6 * reference.abs().max().item() + 1e-9, (error, eager_error)


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
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("width", [1, 37])
def test_layer_norm_saves_mean_and_rstd_in_the_traced_dtype(codegen, dtype, width):
    """CPU's native_layer_norm keeps a float16/bfloat16 input's mean and rstd in that dtype (CUDA's in
    float32); the lowering wrote them as float32 buffers, which the backward graph, traced with float16
    tensors, read as float16 bits: the gradient of layer_norm over one element was 150 instead of 0, and
    every low-precision layer_norm backward on CPU was garbage. Fuzz: seed 51 index 1496 (cpp)."""
    def forward(x):
        return torch.ops.aten.native_layer_norm(x, [width], None, None, 1e-5)

    def loss(x):
        return (torch.log(torch.sin(torch.nn.functional.layer_norm(x, [width])) * 0.5 + 1.0),)
    x = (torch.rand(3, width) * 4 - 2).to(dtype)
    assert_same(compile_fn(forward, codegen)(x), forward(x))     # the saved statistics' dtypes among them
    cotangent = torch.randn(3, width).to(dtype)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected = torch.autograd.grad(loss(xe), xe, cotangent)[0]
    actual = torch.autograd.grad(compile_fn(loss, codegen)(xc), xc, cotangent)[0]
    if width == 1:
        assert expected.abs().max() == 0
    assert_same(actual, expected, atol=2e-2, rtol=2e-2, what="gradient")


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
def test_float32_variance_added_to_a_float64_value_keeps_eagers_accuracy(codegen):
    """A float32 var over 2108 elements added to a float64 value: eager's CPU var accumulates in double
    (ATen's WelfordOps<float, double>) and rounds once, fuse_all's float32 two-pass was ~12 float32 ulps
    off, 20x eager's error in the float64 result. On CPU the variance family is now computed in double.
    Fuzz: seed 88 index 1974 (cpp)."""
    def fn(a0, a1, a2):
        v1 = torch.sub(a0, a1).var((-3, -2, -1), keepdim=True, correction=1)
        return torch.add(v1, a2, alpha=2), v1
    compiled = compile_fn(fn, codegen)
    for seed in range(8):
        torch.manual_seed(seed)
        inputs = [make((17, 4, 31), layout="permuted", low=-2, high=2), make((), low=-2, high=2),
                  make((1, 1, 1), dtype=torch.float64, layout="expanded", low=-4, high=4)]
        (total, var), (eager_total, eager_var) = compiled(*inputs), fn(*inputs)
        assert total.dtype == torch.float64 and var.dtype == torch.float32
        # eager's var is (almost always) the float64 variance of the same float32 values rounded once
        ulp = (torch.nextafter(eager_var, torch.tensor(float("inf"))) - eager_var).double()
        assert ((var.double() - eager_var.double()).abs() <= ulp).all(), (seed, var.item(), eager_var.item())
        assert ((total - eager_total).abs() <= 2 * ulp).all(), (seed, total.item(), eager_total.item())


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_layer_norm_gradient_over_one_element_of_a_fused_half_value(codegen, dtype):
    """layer_norm over one element (or a constant row) in float16 training: its output is 0 whatever the
    input, so is its input gradient in eager (x - mean is exactly 0: one rounded value). fuse_all's forward
    computed x = a + (hypot(b, s) + 2 s) in float32 without rounding the float16 intermediates and saved
    mean = round(x) in float16 (CPU's native_layer_norm keeps a float16 input's statistics in float16);
    the min-cut partitioner recomputes x in the backward (from the stored, rounded hypot), so
    x - mean was ~1 float16 ulp instead of 0 and rstd = 1/sqrt(eps) = 316 blew it up: gradients of 7, 128,
    -inf for an exact 0. Every ATen op's float16/bfloat16 result is now rounded (fuse_all_ir.rounding).
    Fuzz: seed 102 index 476 and 427 (cpp and triton)."""
    def fn(a1, a2):
        s = torch.sinh(a1 * a1)
        x = a1 + torch.add(torch.hypot(a2, s), s, alpha=2)
        return torch.nn.functional.layer_norm(x, [1])
    compiled = compile_fn(fn, codegen)
    for seed in range(4):
        torch.manual_seed(seed)
        a1, a2 = make((1,), dtype, low=-2, high=2), make((1,), dtype, low=-2, high=2)
        a1.requires_grad_(), a2.requires_grad_()
        cotangent = torch.randn(1, dtype=dtype)
        expected = torch.autograd.grad(fn(a1, a2), [a1, a2], cotangent)
        actual = torch.autograd.grad(compiled(a1, a2), [a1, a2], cotangent)
        assert_same(actual, expected, atol=1e-2, rtol=1e-2, what="gradient")


@pytest.mark.parametrize("codegen", BOTH)
def test_var_gradient_of_one_fused_half_element_is_nan_as_in_eager(codegen):
    """var of one element with correction=1 (no degree of freedom): eager's backward gives grad *
    where(x == x.mean(), nan, inf), NaN here. fuse_all recomputed x = a * 2 + 0.5 unrounded in float32 while
    x.mean() was rounded to float16, so x != mean and the gradient was inf. Fuzz: seed 104 index 206 (cpp,
    triton); seed 104 index 610 (a var's gradient 8e-3 off: x - mean with the mean rounded) and index 334
    (triton: instance_norm of constant bfloat16 rows) and seed 105 index 534 (a float32 gradient through
    float16 values, 5.8e-2 off) are the same class, fixed by rounding every ATen op's float16/bfloat16
    result (fuse_all_ir.rounding)."""
    def fn(a):
        x = a * 2 + 0.5
        return x.var((), keepdim=True, correction=1), x * 3
    a = torch.tensor(0.3, dtype=torch.float16, requires_grad=True)
    cotangents = (torch.tensor(0.7, dtype=torch.float16), torch.tensor(0.2, dtype=torch.float16))
    (expected,) = torch.autograd.grad(fn(a), a, cotangents)
    (actual,) = torch.autograd.grad(compile_fn(fn, codegen)(a), a, cotangents)
    assert expected.isnan() and actual.isnan(), (actual, expected)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_an_integer_cast_of_a_small_negative_float_is_positive_zero(codegen, dtype):
    """C++: under -fno-trapping-math GCC folded `(float)(int64_t)x` into `truncf(x)`, so the int64 cast of
    -0.5 read back as a float was -0.0: `copysign(a1, a0.long())` flipped a1's sign, and 1 / it gave -inf
    where eager has +inf. Fuzz: seed 106 index 201 (cpp)."""
    def fn(a0, a1):
        whole = a0.to(torch.int64)
        return torch.copysign(a1, whole), 1 / whole.to(dtype), torch.copysign(a1, a0.to(torch.int32).to(dtype))
    a0 = torch.linspace(-0.99, 0.99, 64, dtype=dtype)
    run_calls(fn, [[a0, torch.rand(64, dtype=dtype) + 0.5]], codegen)


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
def test_float16_logsumexp_over_more_rows_than_float16_can_count_is_finite(codegen):
    """logsumexp of 65537 equal float16 rows: eager sums the exps into a float16 tensor (65537 > 65504, so
    inf) and returns inf; the graph PyTorch traces for it (its decomposition) sums in float32 and casts the
    result once, as Inductor does: x + log(65537), finite. fuse_all computes that graph, which is the float64
    result rounded to float16; the oracle accepts it where eager overflowed (fuzzcheck.compare_float).
    Fuzz: seed 114 index 83 (cpp, dynamic shapes)."""
    def fn(a):
        return (torch.logsumexp(a, 0), torch.logsumexp(a * 0.5, 0, keepdim=True))
    a = (torch.rand(3, 1, dtype=torch.float16) * 4 - 2).expand(3, 65537).t()
    assert fn(a)[0].isinf().all()     # eager's own overflow
    got = compile_fn(fn, codegen)(a)
    for g_, want in zip(got, fn(a.double())):
        assert g_.dtype == torch.float16 and g_.isfinite().all(), g_
        torch.testing.assert_close(g_.double(), want.half().double(), rtol=1e-3, atol=0)


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




def _errors(results, want):
    """Per result, its largest error against float64 relative to the result's largest element."""
    return [((g.double() - w).abs().max() / w.abs().max()).item() for g, w in zip(results, want)]


def _assert_sums_as_accurate_as_eager(fn, inputs, codegen, dynamic=False):
    want = fn(*[x.double() for x in inputs])
    got, eager = _errors(compile_fn(fn, codegen, dynamic=dynamic)(*inputs), want), _errors(fn(*inputs), want)
    assert all(g <= max(5 * e, 1e-7) for g, e in zip(got, eager)), (got, eager)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_sum_of_a_broadcast_value_is_as_accurate_as_eager(codegen, dynamic):
    """C++: a float sum along dims where the summand does not move (an expanded input; the backward of a
    broadcast sums an expanded gradient) added the same values in chains of 1024-2048 per vector lane, all
    rounding alike: a float32 scalar expanded to (70001, 1) summed 1.2e-5 off (eager 3.5e-7), (3, 1)
    expanded to (3, 20001) 6e-5. Now the sum over the other dims times the fixed dims' count (lowering).
    Fuzz: seed 125 index 93 (cpp, --dynamic-frac 0.5: `a0.sum((0, 1))` of a0 (1, 1) expanded to (70001, 1),
    dynamic shapes, training), seed 3 index 332 (cpp: `a1.flatten()[:3].unsqueeze(1).expand(-1, 20001).sum((0, 1))`)."""
    def fn(a, b, c, d):
        return a.sum((0, 1)), b.sum(0), c.sum(1), (a + 1).mean(), c.sum((0, 1)), d.sum(), (d * 2).mean((0, 1))
    torch.manual_seed(0)
    n = 70001 if not dynamic else 69998
    inputs = [torch.randn(1, 1).expand(n, 1), torch.randn(1, 3).expand(n, 3), (torch.rand(5, 1) + 0.5).expand(5, n),
              (torch.rand(100, 1, 4) + 0.5).expand(100, 700, 4)]
    _assert_sums_as_accurate_as_eager(fn, inputs, codegen, dynamic)   # C++ was 2e-6 to 1.2e-5; eager 2e-8 to 3e-7


@pytest.mark.parametrize("codegen", BOTH)
def test_the_gradient_of_a_broadcast_bias_is_as_accurate_as_eager(codegen):
    """The same in a backward graph: the bias's gradient sums the expanded gradient of `mean` over 70001 rows."""
    def fn(x, b):
        return (x + b).mean()
    x = torch.randn(70001, 3)
    grads = []
    for run, dtype in ((compile_fn(fn, codegen), torch.float32), (fn, torch.float32), (fn, torch.float64)):
        b = torch.randn(3, generator=torch.Generator().manual_seed(0), dtype=dtype, requires_grad=True)
        run(x.to(dtype), b).backward()
        grads.append(b.grad)
    got, eager = _errors([grads[0]], [grads[2]]), _errors([grads[1]], [grads[2]])
    assert got[0] <= max(5 * eager[0], 1e-7), (got, eager)


@pytest.mark.parametrize("codegen", BOTH)
def test_an_empty_sum_of_an_infinite_broadcast_value_is_zero(codegen):
    """sum x count must not be inf x 0 (NaN) where the reduction is empty."""
    def fn(a, b):
        return (1 / a).expand(b.shape[0], 3).sum(0) + b.sum()
    run_calls(fn, [[torch.zeros(1, 3), torch.zeros(0)], [torch.zeros(1, 3), torch.zeros(2)]], codegen, dynamic=True)


@pytest.mark.parametrize("codegen", BOTH)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_rounded_value_computed_once_per_column_is_stored_from_its_array(codegen, dtype):
    """C++ column tiles: log_softmax along a float16 dim that is expanded computes its result once per
    column (it does not move along the reduction) into a per-column array; the store of its float16
    rounding converts the float it rounds, which was no array, so the loop named an undeclared variable
    (CppCompileError, the graph ran in ATen). Fuzz: seed 126 index 692 (cpp, --half-frac 0.5)."""
    def fn(a, b):
        return torch.nn.functional.log_softmax(b, 0), torch.ge(a, b)

    def inputs(shape):
        return [torch.randn(shape).to(dtype), torch.randn(1, *shape[1:]).to(dtype).expand(shape)]
    run_calls(fn, [inputs((11, 3, 31)), inputs((12, 8, 36))], codegen, dynamic=False)


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
