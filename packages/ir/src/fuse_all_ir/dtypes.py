"""Element types: the IR names them by `vocabulary.DType`; this maps them to and from torch."""
from __future__ import annotations

import torch

from .vocabulary import DType, UnsupportedDtype, is_float  # noqa: F401  (is_float: the lowerings' import)

_TORCH_BY_DTYPE = {d: getattr(torch, d.value) for d in DType}
_DTYPE_BY_TORCH = {v: k for k, v in _TORCH_BY_DTYPE.items()}


def dtype_name(dtype: torch.dtype) -> DType:
    try:
        return _DTYPE_BY_TORCH[dtype]
    except KeyError:
        raise UnsupportedDtype(f"dtype {dtype} has no fused codegen") from None


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH_BY_DTYPE[name]


def is_supported(dtype: torch.dtype) -> bool:
    return dtype in _DTYPE_BY_TORCH
