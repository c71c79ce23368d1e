"""The torch internals the IR relies on, in one place (torch 2.11 and 2.14 both provide these)."""
from __future__ import annotations

import contextlib


def real_tensor_mode():
    """A context in which real tensors can be read while a compile runs under FakeTensorMode."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
    except ImportError:  # pragma: no cover - older torch
        return contextlib.nullcontext()
    return unset_fake_temporarily()


def backed_size_values(shape_env):
    """Size symbol -> the example value Dynamo traced with (backed symbols only). torch renamed
    ShapeEnv.var_to_val to backed_var_to_val; 2.14 warns on the old name."""
    values = getattr(shape_env, "backed_var_to_val", None)
    if values is None:
        values = getattr(shape_env, "var_to_val", None)
    return values if values is not None else {}
