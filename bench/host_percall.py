"""Host cost of one call of a compiled graph, measured without a GPU.

A BERT-like stack of tiny layers (hidden 32, 12 tokens: every kernel is a few hundred elements, so the
time is the host program's own) is captured once, lowered once, and its host program rendered twice:

* `cpp`: the C++ target, run for real on CPU (kernels included, but they are tiny);
* `triton-null`: the host program of the Triton target, run on CPU tensors with every Triton launch
  replaced by a C no-op taking the same arguments (`fast_launcher_source`'s launcher with `launch` = a
  builtin). What is left is the Python work of a GPU call: unpacking, allocations, views, layout checks,
  ATen calls (on CPU) and the per-kernel launcher code up to Triton's C launch function.

For each it prints the median CPU µs per call and per kernel, and the Python function calls per call
(cProfile's count: every Python-level frame and C builtin the call runs).

    python bench/host_percall.py [--layers 12] [--calls 2000]
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch


sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from tiny_stack import tiny_stack  # noqa: E402  (tests/tiny_stack.py: the model is shared with the GPU test)


def capture_program(model, x):
    """The inference graph's `Program` and the real arguments its host program takes."""
    import fuse_all_capture as capture
    import fuse_all_ir as ir
    from fuse_all.backend import _decompositions

    seen = []

    def keep(graph):
        def run(args):
            seen.append((graph, list(args)))
            return graph.graph_module(*args)
        return run

    compiled = torch.compile(model, backend=capture.make_backend(keep, decompositions=_decompositions()))
    with torch.no_grad():
        compiled(x)
    (graph, args), = seen
    program = ir.lower(graph.graph_module, graph.example_inputs, graph.graph_id, graph.device).program
    return program, args


def null_triton_module(program):
    """The program's host program for the Triton target, with no-op launches, loaded for CPU tensors.
    (Rendered for the program's own device, CPU: a CUDA program differs only in its allocation calls
    and one current-device check per call.)"""
    import fuse_all_ir as ir
    from fuse_all_codegen_triton import TritonTarget, runtime

    module = ir.load_host_program(ir.render_host_program(program, TritonTarget(autotune=False)))
    for name in program.kernels:
        kernel = getattr(module, f"{name}_launcher")
        launcher = runtime.fast_launcher_source(kernel.spec, kernel.configs[0], 0, False,
                                                kernel._int32_ok is not None and not kernel.int64_only,
                                                direct_extra=(0, 0, None, None))
        # C builtins in place of Triton's launch, the stream and the device getters: no Python frame
        scope = {"launch": "".format, "get_stream": abs, "get_device": int, "general": None,
                 "function": 0, "metadata": None}
        exec(launcher, scope)   # noqa: S102 - our own generated launcher
        kernel.run, kernel.run_on = scope["run"], scope.get("run_on", scope["run"])
    return module


def time_calls(call, args, calls: int) -> float:
    """Median over 7 batches of this thread's CPU time per call (`time.thread_time`: on a shared machine
    the wall clock also counts the time other processes had the core)."""
    samples = []
    for _ in range(7):
        start = time.thread_time()
        for _ in range(calls // 7):
            call(list(args))
        samples.append((time.thread_time() - start) / (calls // 7) * 1e6)
    return statistics.median(samples)


def python_calls(call, args, calls: int = 50) -> int:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        call(list(args))
    profile.disable()
    stats = pstats.Stats(profile)
    return round(sum(s[1] for s in stats.stats.values()) / calls)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--targets", default="cpp,triton-null")
    opts = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    import fuse_all_ir as ir
    from fuse_all_codegen_cpp import CppTarget

    model, x = tiny_stack(opts.layers), torch.randn(1, 12, 32)
    program, args = capture_program(model, x)
    kernels = len(program.kernels)
    externs = sum(isinstance(s, ir.ExternCall) for s in program.steps)
    print(f"graph: {opts.layers} layers, {kernels} kernels, {externs} ATen calls; "
          f"torch {torch.__version__}, python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f}")
    with torch.no_grad():
        expected = model(x)
    for target in opts.targets.split(","):
        if target == "cpp":
            module = ir.load_host_program(ir.render_host_program(program, CppTarget()))
        elif target == "triton-null":
            module = null_triton_module(program)
        else:
            raise SystemExit(f"unknown target {target!r}")
        with torch.no_grad():
            out = module.call(list(args))
            if target == "cpp":
                torch.testing.assert_close(out[0], expected, rtol=1e-4, atol=1e-4)
            us = time_calls(module.call, args, opts.calls)
            count = python_calls(module.call, args)
        print(f"{target:12s} {us:9.1f} us/call  {us / kernels:6.2f} us/kernel  "
              f"{us / (kernels + externs):6.2f} us/step  {count} Python-level calls/call "
              f"({count / kernels:.1f}/kernel)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
