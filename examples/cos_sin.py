"""The guide's first example: cos then sin, fused into one kernel.

    python examples/cos_sin.py                    # CPU (C++ kernel), or CUDA when available
    FUSE_ALL_DEBUG=1 python examples/cos_sin.py   # also writes the debug folder with output_code.py
"""
import torch

import fuse_all


def fn(x):
    a = torch.cos(x)
    b = torch.sin(a)
    return b


device = "cuda:0" if torch.cuda.is_available() else "cpu"
new_fn = torch.compile(fn, backend="fuse_all")
input_tensor = torch.randn(10000).to(device=device)
a = new_fn(input_tensor)

torch.testing.assert_close(a, fn(input_tensor))
graph = fuse_all.compiled_graphs()[-1]
print(f"fuse_all compiled fn on {device} into {len(graph.kernels)} kernel(s) in {graph.compile_time_s:.2f} s; "
      f"matches eager.")
for name, source in graph.kernel_sources.items():
    print(f"--- {name} ({graph.language}) ---")
    print(source)
print(f"host program: {graph.output_code}")
