"""fuse_all_ir: the loop-level IR. ATen graph -> lower -> fuse -> schedule -> `Program`.

Codegens consume `Program`/`Kernel` (see `program.py` for the exact semantics), plug into the host
program renderer through `KernelTarget`, into scheduling and kernel shapes through `FusionChoices`, and
into fuse-all through one `TargetSpec` registration (`targets.py`).
"""
from .__about__ import __version__
from .api import Compiled, lower, lowered_ops, sized_ops
from .choices import FusionChoices, KernelShape
from .targets import (TargetSpec, TargetUnavailable, get_target, register_target, registered_targets,
                      select_target, target_names, unregister_target)
from .printing import format_kernel, format_lowered, format_program
from .dtypes import UnsupportedDtype, dtype_name, torch_dtype
from . import vocabulary
from .vocabulary import (
    DTYPE_INFO, OP_INFO, REDUCTION_INFO, DType, DTypeClass, ExprKind, KernelKind, NodeKind, NonFinite, Op, OpResult,
    ReductionOp, compute_dtype, dtype_class, is_float, is_positional, is_welford, non_finite, reduction_identity,
)
from .welford import has_welford, two_pass_form, welford_groups
from .cache_dirs import (
    UnsafeDirectory, LockWaitAbandoned, atomic_write, cache_root, caches_disabled, check_private, exclusive_lock, make_private, private_dir,
    read_regular_file, sweep_stale_temps, temp_file, user_cache_dir,
)
from . import compile_timing, gc_pause, kernel_sharing
from . import portable_caches   # registers fuse-all's entries with torch.compiler.save_cache_artifacts
from .host import (HostProgramError, KernelTarget, extern_range_name, graph_range_name, kernel_range_name,
                   load_host_program, render_host_program, unresolved_names)
from .sympy_functions import FUNCTIONS as SYMPY_FUNCTIONS, UnsupportedSymbolic
from .program import (
    BINARY_OPS, DTYPES, OP_ARITY, REDUCTION_OPS, TERNARY_OPS, UNARY_OPS,
    Alloc, BufferRef, Compute, Const, ExternCall, Free, GraphInput, IndexValue, Kernel, KernelCall, Load, Loop,
    Origin, Program, Reduce, Store, TensorSpec,
)
from .lowering import contiguous_strides
from .layout import adopt_input_strides, prefer_channels_last
from .conv_as_matmul import convs_as_matmuls
from .layout_decision import LayoutDecision, convolutions, decide_channels_last
from .column_split import choose_column_splits, choose_row_splits, split_reductions
from .validate import InvalidProgram, validate_kernel, validate_program
from .symbolic import FloorDiv, ModularIndexing, rvar, size_symbol, xvar

__all__ = [
    "__version__", "vocabulary", "DTYPE_INFO", "OP_INFO", "REDUCTION_INFO", "DType", "DTypeClass", "ExprKind",
    "KernelKind", "NodeKind", "NonFinite", "Op", "OpResult", "ReductionOp", "compute_dtype", "dtype_class", "is_float",
    "is_positional", "is_welford", "has_welford", "two_pass_form", "welford_groups", "non_finite", "reduction_identity", "FusionChoices", "KernelShape",
    "TargetSpec", "TargetUnavailable", "get_target", "register_target", "registered_targets", "select_target",
    "target_names", "unregister_target", "Compiled", "lower", "lowered_ops", "sized_ops", "format_kernel", "format_lowered", "format_program", "UnsupportedDtype", "dtype_name", "torch_dtype", "KernelTarget", "load_host_program",
    "HostProgramError", "unresolved_names", "SYMPY_FUNCTIONS", "UnsupportedSymbolic",
    "render_host_program", "BINARY_OPS", "DTYPES", "OP_ARITY", "REDUCTION_OPS", "TERNARY_OPS", "UNARY_OPS",
    "Alloc", "BufferRef", "Compute", "Const", "ExternCall", "Free", "GraphInput", "IndexValue", "Kernel",
    "KernelCall", "Load", "Loop", "Origin", "Program", "Reduce", "Store", "TensorSpec", "FloorDiv",
    "ModularIndexing", "rvar", "size_symbol", "xvar", "contiguous_strides", "prefer_channels_last", "convs_as_matmuls", "adopt_input_strides", "decide_channels_last", "LayoutDecision", "convolutions", "choose_column_splits", "choose_row_splits", "split_reductions", "graph_range_name", "kernel_range_name",
    "extern_range_name", "InvalidProgram", "validate_kernel", "validate_program",
    "UnsafeDirectory", "LockWaitAbandoned", "atomic_write", "cache_root", "caches_disabled", "check_private", "exclusive_lock", "make_private",
    "private_dir", "portable_caches", "compile_timing", "gc_pause", "kernel_sharing", "read_regular_file", "sweep_stale_temps", "temp_file", "user_cache_dir",
]
