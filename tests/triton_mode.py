"""Import `fuse_all_codegen_triton` afresh with TRITON_INTERPRET set one way, for one test module.

`TRITON_INTERPRET` must be set when `triton.jit` decorates a kernel (Triton reads it then), and
`fuse_all_codegen_triton` binds its interpreter/GPU pieces at import; so the package is imported again with
the variable set, and both are undone afterwards: other test packages in the same session see neither.
Used by tests/codegen_triton (the CPU interpreter, "1") and tests/cuda (compiled for the GPU, "0")."""
from __future__ import annotations

import os
import sys


def _purge_package() -> None:
    for name in [m for m in sys.modules if m == "fuse_all_codegen_triton" or m.startswith("fuse_all_codegen_triton.")]:
        del sys.modules[name]


def fresh_triton_codegen(interpret: str):
    """Generator for a module-scoped fixture: yields the freshly imported package."""
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = interpret
    _purge_package()
    import fuse_all_codegen_triton
    yield fuse_all_codegen_triton
    _purge_package()
    if saved is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = saved
