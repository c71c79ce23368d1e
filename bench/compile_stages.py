"""CPU seconds of fuse_all's own compile stages for one workload, without Dynamo: the workload's first ATen
graph is captured once, then lowered (lowering + fusion + scheduling) and rendered for the C++ and the
Triton target, in this process (the C++ target first: it also pays the process's first-time sympy work).

    python bench/compile_stages.py bert_1x12 [--repeat 1]

Run it in a few fresh processes and compare the first repeat: the memos (issue 12) persist across repeats.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    from env import add_repo_paths
    add_repo_paths()
    import fuse_all_capture as capture
    import fuse_all_ir as ir
    from fuse_all.backend import _decompositions
    from fuse_all_codegen_cpp import CppChoices, CppTarget
    from fuse_all_codegen_triton import TritonChoices, TritonTarget
    from workloads import build

    inst = build(args.workload, "cpu")
    graph = capture.capture(inst.target, *inst.inputs, decompositions=_decompositions())[0]
    for label, choices_type, target_type in (("cpp", CppChoices, CppTarget), ("triton", TritonChoices, TritonTarget)):
        for i in range(args.repeat):
            choices = choices_type()
            start = time.process_time()
            compiled = ir.lower(graph.graph_module, graph.example_inputs, graph.graph_id, "cpu", choices=choices)
            lowered = time.process_time()
            target = target_type(choices=choices)
            ir.render_host_program(compiled.program, target)
            for kernel in compiled.program.kernels.values():
                target.kernel_source(kernel)
            rendered = time.process_time()
            print(f"{label} repeat {i + 1}: lower {lowered - start:.3f} CPU s, render {rendered - lowered:.3f} CPU s, "
                  f"{len(compiled.program.kernels)} kernels", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
