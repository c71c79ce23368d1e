"""Suite-wide settings. CI has no GPU: Triton kernels run in Triton's CPU interpreter, which reads
TRITON_INTERPRET when triton is imported, so it is set before any test imports torch or triton.
GPU checks live in bench/gpu_*.py and run on the GPU machine, outside pytest."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
