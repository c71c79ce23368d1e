"""fuse-all: a torch.compile backend. `torch.compile(model, backend="fuse_all")`.

The pipeline, one package per stage:
    fuse_all_capture  (Dynamo + AOTAutograd -> ATen graph)
    fuse_all_ir       (lower -> fuse -> schedule -> Program + fusion report)
    fuse_all_codegen_cpp / fuse_all_codegen_triton (kernels; host program = output_code.py)
    fuse_all_cudagraphs (mode="reduce-overhead")
This package only wires them together (`backend.py`), plus the debug folder and the editor's records.
"""
from .__about__ import __version__
from .backend import CompiledGraph, compiled_graphs, fuse_all, reset
from .options import MODES, OptionError, Options

__all__ = ["__version__", "fuse_all", "compiled_graphs", "reset", "CompiledGraph", "Options", "OptionError",
           "MODES"]
