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
