"""`libdevice` for Triton's CPU interpreter (`TRITON_INTERPRET=1`), which cannot call extern libraries.

Generated kernels call `libdevice.tan(x)` etc.; in interpreter mode the name `libdevice` is bound to this
module, whose functions compute on the interpreter's NumPy-backed tensors with torch's CPU kernels (torch
has every function libdevice has, with the same semantics). Only the functions the renderer emits are
provided. This touches interpreter internals (`TensorHandle`), hence it sits beside `_triton_compat.py`.
"""
from __future__ import annotations

import numpy as np
import torch
import triton.language as tl
from triton.runtime.interpreter import TensorHandle


def _data(x):
    return x.handle.data if isinstance(x, tl.tensor) else np.asarray(x.value if isinstance(x, tl.constexpr) else x)


def _elementwise(fn):
    def apply(*args, **_):
        ref = next(a for a in args if isinstance(a, tl.tensor))
        arrays = np.broadcast_arrays(*[_data(a) for a in args])
        out = fn(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]).numpy()
        scalar = ref.type.scalar
        out = np.asarray(out, dtype=ref.handle.data.dtype)
        ty = scalar if out.ndim == 0 or (not ref.type.is_block() and out.size == 1) else \
            tl.block_type(scalar, list(out.shape))
        return tl.tensor(TensorHandle(out, scalar), ty)
    apply.__name__ = getattr(fn, "__name__", "libdevice_fn")
    return apply


tan = _elementwise(torch.tan)
asin = _elementwise(torch.asin)
acos = _elementwise(torch.acos)
atan = _elementwise(torch.atan)
sinh = _elementwise(torch.sinh)
cosh = _elementwise(torch.cosh)
tanh = _elementwise(torch.tanh)
asinh = _elementwise(torch.asinh)
acosh = _elementwise(torch.acosh)
atanh = _elementwise(torch.atanh)
expm1 = _elementwise(torch.expm1)
log10 = _elementwise(torch.log10)
log1p = _elementwise(torch.log1p)
rsqrt = _elementwise(torch.rsqrt)
erfc = _elementwise(torch.erfc)
erfinv = _elementwise(torch.erfinv)
lgamma = _elementwise(torch.lgamma)
nearbyint = _elementwise(torch.round)     # round half to even, like libdevice's nearbyint
trunc = _elementwise(torch.trunc)
pow = _elementwise(torch.pow)
atan2 = _elementwise(torch.atan2)
copysign = _elementwise(torch.copysign)
hypot = _elementwise(torch.hypot)
fmod = _elementwise(torch.fmod)
