"""Helpers of the IR unit tests."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import fuse_all_ir as ir


def lower(fn, *inputs) -> ir.Compiled:
    """Trace `fn` to ATen and lower, fuse and schedule it (validated: the contract must hold)."""
    return ir.lower(make_fx(fn)(*inputs), list(inputs), "g", validate=True)
