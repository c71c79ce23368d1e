"""Hand-built `Program`s that exercise the codegen contract (`fuse_all_ir.program`), shared by the C++ and
Triton codegen tests.

Each entry of `EXAMPLES` maps a name to a function `make(device) -> Example`. An `Example` is a tuple
``(program, inputs, expected)``: run ``render_host_program(program, target)`` through `load_host_program`,
call ``module.call(list(inputs))`` and compare with ``expected(inputs)`` (a tuple of tensors, one per
program output) using `assert_outputs_match`, which applies dtype-appropriate tolerances.

Inputs are random and never zero (a kernel that writes nothing or reads the wrong element does not pass by
accident); sizes are odd so that vector remainders and partial tiles are exercised.

The examples are grouped by kernel family (`elementwise`, `reductions`, `dtype_ops`, `multi_kernel`); this
module is their index, and re-exports the builders of `kernel_program_builders` for `ke.<name>` use.
"""
from __future__ import annotations

from typing import Callable

from kernel_program_builders import (  # noqa: F401 - re-exported for the tests that use `ke.<name>`
    Example, assert_outputs_match, contiguous_strides, nonzero_randn, pointwise, program, r0, r1, s0, s1, spec,
    uniform, x0, x1, x2,
)

from .dtype_ops import (  # noqa: F401
    COMPARE_OPS, FLOAT_BINARY, FLOAT_UNARY_DOMAINS, INT_BINARY, INT_UNARY, casts, float_binary, float_unary, int_ops,
)
from .multi_kernel import in_place, twenty_kernels, two_kernels
from .random import random_numbers
from .elementwise import arange, bool_where, broadcast_add_transposed, cos_sin, masked_pad
from .reductions import (  # noqa: F401
    arg_reductions_nan, column_reductions, full_reduction, mean_var, misc_reductions, softmax, softmax_kernel,
    unit_and_mergeable_dims, welford,
)


EXAMPLES: dict[str, Callable[[str], Example]] = {
    "cos_sin": cos_sin,
    "broadcast_add_transposed": broadcast_add_transposed,
    "softmax": softmax,
    "softmax_float16": lambda d: softmax(d, "float16", 13, 515),
    "softmax_bfloat16": lambda d: softmax(d, "bfloat16", 13, 515),
    "mean_var": mean_var,
    "welford": welford,
    "arg_reductions_nan": arg_reductions_nan,
    "masked_pad": masked_pad,
    "int_ops_int32": int_ops,
    "int_ops_int64": lambda d: int_ops(d, "int64"),
    "int_ops_int16": lambda d: int_ops(d, "int16"),
    "int_ops_int8": lambda d: int_ops(d, "int8"),
    "int_ops_uint8": lambda d: int_ops(d, "uint8"),
    "float_unary_float32": float_unary,
    "float_unary_float64": lambda d: float_unary(d, "float64"),
    "float_unary_float16": lambda d: float_unary(d, "float16"),
    "float_unary_bfloat16": lambda d: float_unary(d, "bfloat16"),
    "float_unary_special": lambda d: float_unary(d, "float32", special=True),
    "float_binary_float32": float_binary,
    "float_binary_float64": lambda d: float_binary(d, "float64"),
    "bool_where": bool_where,
    "casts": casts,
    "full_reduction": full_reduction,
    "misc_reductions": misc_reductions,
    "arange": arange,
    "two_kernels": two_kernels,
    "column_reductions": column_reductions,
    "unit_and_mergeable_dims": unit_and_mergeable_dims,
    "twenty_kernels": twenty_kernels,
    "in_place": in_place,
    "random_numbers": random_numbers,
}
