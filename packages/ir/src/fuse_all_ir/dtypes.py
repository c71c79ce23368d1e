"""Element types: the IR names them by string; this maps them to and from torch."""
from __future__ import annotations

import torch

_TORCH_BY_NAME = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
_NAME_BY_TORCH = {v: k for k, v in _TORCH_BY_NAME.items()}


class UnsupportedDtype(Exception):
    pass


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return _NAME_BY_TORCH[dtype]
    except KeyError:
        raise UnsupportedDtype(f"dtype {dtype} has no fused codegen") from None


def torch_dtype(name: str) -> torch.dtype:
    return _TORCH_BY_NAME[name]


def is_float(name: str) -> bool:
    return name in ("float16", "bfloat16", "float32", "float64")


def is_supported(dtype: torch.dtype) -> bool:
    return dtype in _NAME_BY_TORCH
