"""CUDA graph capture and replay for any compiled callable, and a standalone torch.compile backend.

    graphed = wrap(fn, example_inputs, static_input_indices=..., pool=GraphPool(), on_fallback=print)
    outputs = graphed(inputs)          # boxed: one flat list in, tuple/list of tensors out
    graphed.decisions                  # every distinct capture / re-capture / fallback, with its reason

``torch.compile(model, backend="fuse_all_cudagraphs")`` uses the same machinery on AOTAutograd's graphs.
"""
from .__about__ import __version__
from .graph import CaptureError
from .policy import Decision
from .pool import GraphPool
from .wrapper import GraphedCallable, LiveOutputError, wrap

__all__ = ["CaptureError", "Decision", "GraphPool", "GraphedCallable", "LiveOutputError", "__version__", "wrap"]
