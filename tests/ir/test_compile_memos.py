"""The compile-time memos (issue 12) give what the uncached computation gives: a node's expression per
index, simplified indices per (expression, loop ranges), strides per (expression, variable, index
variables), printed indices per expression."""
from __future__ import annotations

import sympy

import fuse_all_ir as ir
from fuse_all_ir.host import py_index
from fuse_all_ir.indexing import simplify_index
from fuse_all_ir.nodes import Node, load
from fuse_all_ir.normalize import affine_stride

x0, x1 = ir.xvar(0), ir.xvar(1)


def test_a_nodes_expression_is_its_body_once_per_index():
    calls = []

    def body(index):
        calls.append(list(index))
        return load("buf0", index[0] * 3 + index[1], "float32")

    spec = ir.TensorSpec("float32", (sympy.Integer(2), sympy.Integer(3)), (sympy.Integer(3), sympy.Integer(1)),
                         sympy.Integer(0))
    node = Node("buf1", "pointwise", spec, body=body)
    first = node.expression([x0, x1])
    assert node.expression([x0, x1]) is first and calls == [[x0, x1]]
    other = node.expression([x1, x0])
    assert other is not first and other.index == x1 * 3 + x0 and len(calls) == 2


def test_simplified_indices_depend_on_the_loop_ranges():
    expr = ir.FloorDiv(x0, 8)
    assert simplify_index(expr, {x0: sympy.Integer(4)}) == 0          # x0 < 8: the quotient is 0
    assert simplify_index(expr, {x0: sympy.Integer(16)}) == expr      # not when x0 reaches 8
    assert simplify_index(expr, {x0: sympy.Integer(4)}) == 0


def test_strides_depend_on_which_variables_are_indices():
    expr = x0 * x1 + 5 * x0
    assert affine_stride(expr, x0) == x1 + 5
    assert affine_stride(expr, x0, {x1}) is None                     # x1 is a loop variable: not constant
    assert affine_stride(expr, x0) == x1 + 5
    assert affine_stride(ir.FloorDiv(x0, 2), x0) is None
    assert affine_stride(7 * x1, x0) == 0


def test_printed_indices_keep_integers_and_floats_apart():
    assert py_index(sympy.Integer(1)) != py_index(sympy.Float(1.0))   # equal hashes, different values
    assert py_index(x0 + 1) == py_index(x0 + 1)


# ---- the memos and fast paths of the fusion-cost work (issue 12): same answers as the plain computation

def test_type_promotion_memo_agrees_with_torch():
    import torch

    from fuse_all_ir.lowerings_pointwise import _result_dtype, result_dtype
    from fuse_all_ir.nodes import Value

    def tensor(dtype, ndim):
        return Value(tuple(sympy.Integer(2) for _ in range(ndim)), dtype, lambda index: None)
    operands = [tensor("float32", 2), tensor("float16", 2), tensor("float64", 0), tensor("int64", 1),
                tensor("int32", 0), tensor("bool", 3), tensor("bfloat16", 1), 2, 2.5, True,
                sympy.Integer(3), sympy.Float(0.5), sympy.Symbol("s0", integer=True)]
    for a in operands:
        for b in operands:
            for c in (None, tensor("float16", 0), 1):
                args = (a, b) if c is None else (a, b, c)
                first, again = result_dtype(*args), result_dtype(*args)
                assert first == again == _result_dtype(args), args
    # 0-dim tensors promote weakly, python scalars by kind only
    assert result_dtype(tensor("float16", 2), tensor("float64", 0)) == "float16"
    assert result_dtype(tensor("float16", 0), tensor("float64", 0)) == "float64"
    assert result_dtype(tensor("int32", 1), 2.5) == ir.dtype_name(torch.get_default_dtype())
    assert result_dtype(tensor("int32", 1), 7) == "int32"


def test_linear_index_is_the_sum_term_by_term():
    from fuse_all_ir.symbolic import linear_index
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    cases = [
        (sympy.Integer(0), [x0, x1], [sympy.Integer(3), sympy.Integer(1)]),
        (sympy.Integer(5), [sympy.Integer(0), x1, x0], [s0, sympy.Integer(0), 2 * s0]),
        (s0, [x0 + 1, ir.FloorDiv(x1, 4)], [sympy.Integer(1), s0 + 1]),
        (0, [x0, 0], [2, 7]),
        (sympy.Integer(0), [], []),
    ]
    for offset, index, stride in cases:
        plain = offset + sum((i * s for i, s in zip(index, stride)), sympy.Integer(0))
        assert linear_index(offset, index, stride) == plain


def test_size_symbol_memo_hands_out_fresh_sets():
    from fuse_all_ir.symbolic import free_size_symbols
    s0, s1 = sympy.Symbol("s0", integer=True), sympy.Symbol("s1", integer=True)
    expr = x0 * s0 + x1 * s1 + 3
    first = free_size_symbols(expr)
    assert first == {s0, s1}
    first.add(sympy.Symbol("s9"))                 # a caller that grows its result
    assert free_size_symbols(expr) == {s0, s1}


def test_node_index_memo_follows_the_groups_space():
    from fuse_all_ir.kernelgen import Group, node_index
    n, c = sympy.Integer(4), sympy.Integer(8)
    spec = ir.TensorSpec("float32", (n, c), (c, sympy.Integer(1)), sympy.Integer(0))
    node = Node("buf1", "pointwise", spec, body=lambda index: load("buf0", index[0] * 8 + index[1], "float32"),
                iter_order=(0, 1))
    pointwise = Group((n, c), (), [node])
    # over a reduction's full space, walked in another order (full_vars): other loop variables
    reduction = Group((c,), (n,), [node], full_vars=(ir.rvar(0), ir.xvar(0)))
    assert node_index(pointwise, node) == ([x0, x1], None)
    assert node_index(reduction, node) == ([ir.rvar(0), x0], None)
    assert node_index(pointwise, node) == ([x0, x1], None)
    index, _ = node_index(pointwise, node)
    index.append("changed by a caller")
    assert node_index(pointwise, node) == ([x0, x1], None)


def test_kernel_sharing_renames_whole_words_only():
    import re

    from fuse_all_ir.kernel_sharing import normalized

    def word_by_word(source, name, params, prefix):   # the renaming before the one-pattern version
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(prefix)]
        renames = {p: f"__p{i}__" for i, p in enumerate(params)}
        renames[name] = "__kernel__"
        return re.sub(r"\b\w+\b", lambda m: renames.get(m.group(0), m.group(0)), "\n".join(lines))
    source = ("// kernel_1 reads buf1\nvoid kernel_1(float* buf1, float* buf12, long ks0) {\n"
              "  buf12[x0] = buf1[x0] + buf1x + xbuf1 + kernel_12 + ks0*ks01; // buf1\n}\n")
    for params in (["buf1", "buf12", "ks0"], ["buf12", "buf1"], [], ["ks0"]):
        assert normalized(source, "kernel_1", params, "//") == word_by_word(source, "kernel_1", params, "//")


def test_sizes_equal_is_expanded_equality():
    from fuse_all_ir.symbolic import sizes_equal
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    assert sizes_equal(s0 * (s0 + 1), s0**2 + s0)
    assert sizes_equal(s0 * (s0 + 1), s0**2 + s0)            # again, from the memo
    assert not sizes_equal(2 * s0, s0 + 2)
    assert sizes_equal(6, sympy.Integer(6)) and not sizes_equal(sympy.Integer(6), 7)
    # Integers and Floats hash alike: the memo keeps them apart and answers as the plain computation does
    pairs = [(sympy.Integer(2), sympy.Float(2.0)), (sympy.Float(2.0), sympy.Integer(2)), (sympy.Integer(2), 2),
             (sympy.Float(0.5) * s0, s0 / 2), (s0 / 2, sympy.Rational(1, 2) * s0)]
    for x, y in pairs + pairs[::-1]:
        assert sizes_equal(x, y) == (sympy.expand(sympy.sympify(x) - sympy.sympify(y)) == 0), (x, y)


# ---- fake-CUDA compile-time work (session 9): memos and a fast path with the plain computation's answers

def test_affine_stride_fast_path_is_what_diff_gives():
    from fuse_all_ir.normalize import _affine_stride, _linear_step
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    x2 = ir.xvar(2)
    exprs = [x0, 3 * x0 + x1, 200704 * x0 + 64 * x1 + x2 + 7, s0 * x0 + 2 * s0 * x1, (s0 + 1) * x0 + x1,
             sympy.Rational(1, 2) * x0, 2 * (s0 + 3) * x0 * x1 + x0, x0 * x0 + x1, x0**2, ir.FloorDiv(x0, 4) + x1,
             ir.ModularIndexing(x0, 1, 8) * 3 + x0, 5 + s0, sympy.Float(0.5) * x0 + 1]
    for expr in exprs:
        for var in (x0, x1, x2):
            step = _linear_step(expr, var)
            if step is not None:     # where it answers, it is diff's expression, term for term
                assert sympy.srepr(step) == sympy.srepr(sympy.diff(expr, var)), (expr, var)
    assert _linear_step(x0 * x0 + x1, x0) is None and _linear_step(ir.FloorDiv(x0, 4), x0) is None
    _affine_stride.cache_clear()
    assert affine_stride(ir.FloorDiv(x0, 4) + x1, x0) is None       # diff's route: x0 inside a function
    assert affine_stride(x0 * x0 + x1, x0, {x0}) is None
    assert affine_stride(s0 * x0 + 2 * s0 * x1, x1) == 2 * s0


def _index_bounds_uncached(kernel):
    """The bounds as computed before the memo (codegen-triton indexing.index_bounds of 4ae0bf6)."""
    from fuse_all_codegen_triton.indexing import _abs_bound
    from fuse_all_ir.program import IndexValue, Load, Store
    var_max = {ir.xvar(i): n - 1 for i, n in enumerate(kernel.outer)}
    var_max.update({ir.rvar(i): n - 1 for i, n in enumerate(kernel.reduction)})
    exprs = [sympy.Mul(*kernel.outer), sympy.Mul(*kernel.reduction), *kernel.size_symbols]
    for st in kernel.statements():
        if isinstance(st, (Load, Store)):
            exprs.append(st.index)
        elif isinstance(st, IndexValue):
            expr = sympy.sympify(st.expr)
            exprs += list(expr.args) if isinstance(expr, sympy.core.relational.Relational) else [expr]
    seen: list = []
    for e in exprs:
        seen.append(_abs_bound(sympy.expand(sympy.sympify(e)), var_max, seen))
    unique = []
    for b in seen:
        b = sympy.expand(b)
        if b not in unique:
            unique.append(b)
    return unique


def test_index_bounds_memo_gives_the_uncached_bounds():
    from fuse_all_codegen_triton.indexing import index_bounds
    from fuse_all_ir.program import Kernel, Load, Loop, Store
    from fuse_all_ir.symbolic import free_size_symbols
    s0 = sympy.Symbol("s0", integer=True, positive=True)

    def kernel(outer, index, reduction=()):
        body = [Load("t0", "buf0", index, "float32"), Store("buf1", x0, "t0")]
        return Kernel("k", outer, reduction, [Loop(False, body)], ("buf0",), ("buf1",),
                      tuple(sorted(free_size_symbols(sympy.Mul(*outer, index)), key=str)))
    cases = [kernel((sympy.Integer(8), sympy.Integer(64)), 64 * x0 + x1),
             kernel((s0, sympy.Integer(64)), 64 * x0 + x1),                      # same index, other ranges
             kernel((sympy.Integer(8), s0), s0 * x0 + x1 - 1),
             kernel((sympy.Integer(4), sympy.Integer(4)), ir.FloorDiv(x0 * 4 + x1, 3) * 2),
             kernel((sympy.Integer(8), sympy.Integer(64)), 64 * x0 + x1)]        # again: from the memo
    for k in cases:
        assert index_bounds(k) == _index_bounds_uncached(k)


def test_injectivity_memo_answers_per_space_and_hints():
    from fuse_all_ir import in_place
    s0, s1 = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True, positive=True)
    cases = [(4 * x0 + x1, (x0, x1), (4, 4), {}), (4 * x0 + x1, (x0, x1), (4, 5), {}),
             (s0 * x0 + s1 * x1, (x0, x1), (3, 3), {s0: 2, s1: 100}),
             (s0 * x0 + s1 * x1, (x0, x1), (3, 3), {s0: 100, s1: 2})]   # hints order the strides differently
    for index, variables, extents, hints in cases + cases:
        memo = in_place._not_injective_memo(index, variables, extents, tuple(hints.items()))
        assert memo == in_place._not_injective(index, list(variables), list(extents), hints), (index, extents, hints)


def test_storage_elements_memo_and_pool_match_by_expanded_size():
    from fuse_all_ir import memory
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    spec = ir.TensorSpec("float32", (s0, sympy.Integer(3)), (sympy.Integer(3), sympy.Integer(1)), sympy.Integer(0))
    flat = ir.TensorSpec("float32", (3 * s0,), (sympy.Integer(1),), sympy.Integer(0))
    assert memory.storage_elements(spec) == memory._storage_elements(spec) == 3 * s0
    assert memory.storage_elements(spec) == 3 * s0                                   # again, from the memo
    listed = ir.TensorSpec("float32", [sympy.Integer(2)], [sympy.Integer(1)], sympy.Integer(0))   # unhashable
    assert memory.storage_elements(listed) == 2
    pool = [("buf1", flat)]
    assert memory._pick(pool, spec, {"buf1"}, as_output=False) == "buf1" and pool == []


def test_memoised_index_queries_of_tiling_and_rendering():
    from fuse_all_codegen_triton.indexing import families, symbol_names
    from fuse_all_ir.normalize import _has_division
    from fuse_all_ir.tiling import contiguous_dim
    s0 = sympy.Symbol("s0", integer=True, positive=True)
    r0 = ir.rvar(0)
    for expr, names, fams in [(64 * x0 + x1, {"x0", "x1"}, {"x"}), (s0 * r0 + x0, {"s0", "r0", "x0"}, {"x", "r"}),
                              (sympy.Integer(3), set(), set()), (sympy.Symbol("xs") + x1, {"xs", "x1"}, {"x"})]:
        for _ in range(2):                                  # computed, then from the memo
            assert symbol_names(expr) == names and families(expr) == fams
    assert families(7) == frozenset()
    for _ in range(2):
        assert contiguous_dim(64 * x0 + x1, 2) == 1 and contiguous_dim(x0 + 64 * x1, 2) == 0
        assert contiguous_dim(2 * x0 + 64 * x1, 2) is None and contiguous_dim(x0 + 64 * x1, 1) == 0
        assert _has_division(x0 / 2 + x1) and not _has_division(x0 * 2 + x1)
