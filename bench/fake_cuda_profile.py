"""fuse_all's own CPU seconds per phase for a workload's CUDA graphs, on a machine without a GPU: the steps
`fake_cuda_dump.py` runs (layout choice, lowering, fusion and scheduling, rendering), plus loading the host
program, each graph compiled once in a new process as in a cold first call.

    python bench/fake_cuda_profile.py resnet50_1x3x224x224                         # one process, one line
    python bench/fake_cuda_profile.py bert_1x12 --profile /tmp/bert.pstats         # + cProfile, top functions
    python bench/fake_cuda_profile.py W --trees before=/tmp/base,after=. --processes 3   # A/B, medians

The phases are those of `fuse_all_ir.compile_timing` with its clock swapped for this process's CPU time
(`time.process_time`): steadier than wall time on a shared machine. The capture and the move to fake CUDA
tensors are not timed (Dynamo and AOTAutograd run before the backend; on a GPU the graphs are traced there).
`host_load` imports the host program: without a GPU its launchers start no Triton compiles, so it is the
module's own cost only. `--trees NAME=CHECKOUT,...` runs `--processes` rounds of one new process per tree,
alternating, with that checkout's sources first on PYTHONPATH (this script's bench folder supplies the
workloads and the capture), and prints each phase's median with every round's value. On a shared machine
the seconds move by 10-20% between processes; `--calls` adds one process per tree that counts the steps'
Python function calls under cProfile, a measure of the work done that the load does not move.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import glob
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PHASES = ("layout", "lowering", "fusion_schedule", "render", "host_load")


def profile_once(workload: str, profile: str | None, top: int, count_calls: bool = False) -> dict[str, float]:
    """Capture `workload`, then run every graph through the backend's steps for CUDA; {phase: CPU s}, and
    with `count_calls` the Python function calls the steps made ("calls": a measure of work that does not
    move with the machine's load, unlike the seconds; the profiler inflates those)."""
    import fuse_all_ir as ir
    from fuse_all import backend
    from fake_cuda_dump import move_to_cuda, output_strides
    from torch._subclasses.fake_tensor import FakeTensorMode

    from compile_profile import _capture
    from fuse_all.options import parse, resolve_layout_opt
    opts = resolve_layout_opt(parse(None, None))
    graphs = _capture(workload)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    ir.compile_timing.reset()
    ir.compile_timing._clock = time.process_time
    profiler = cProfile.Profile() if profile or count_calls else None   # its default clock: process_time costs a system call per event
    saved_strides: dict = {}
    host_dir = tempfile.mkdtemp(prefix="fa_fake_cuda_profile_")
    for graph in graphs:
        graph = move_to_cuda(graph, mode, saved_strides if graph.kind == "backward" else None)
        traced = output_strides(graph.graph_module) if graph.kind == "forward" else {}
        if profiler:
            profiler.enable()
        _compile(graph, opts, backend, ir, host_dir)
        if profiler:
            profiler.disable()
        if graph.kind == "forward":
            saved_strides = {k: v for k, v in output_strides(graph.graph_module).items() if traced.get(k) != v}
    if profile:
        profiler.dump_stats(profile)
        for order in ("cumulative", "tottime"):
            print(f"---- top {top} by {order} ({profile})")
            pstats.Stats(profile).sort_stats(order).print_stats(top)
    phases = ir.compile_timing.snapshot()
    result = {k: phases.get(k, 0.0) for k in PHASES}
    if count_calls:
        result["calls"] = pstats.Stats(profiler).total_calls
    return result


def _compile(graph, opts, backend, ir, host_dir: str) -> None:
    """`fuse_all.backend._compile`'s steps for one graph, under its garbage-collector pause."""
    target = backend._target_for(graph.device, opts)
    gc_pause = getattr(ir, "gc_pause", None)
    with gc_pause.paused() if gc_pause is not None else contextlib.nullcontext():
        with ir.compile_timing.phase("layout"):
            backend._choose_layout(graph, opts)
        compiled = ir.lower(graph.graph_module, graph.example_inputs, graph.graph_id, graph.device,
                            validate=False, choices=getattr(target, "choices", None))
        program = compiled.program
        with ir.compile_timing.phase("render"):
            host = ir.render_host_program(program, target)
            for kernel in program.kernels.values():
                target.kernel_source(kernel)
        with ir.compile_timing.phase("host_load"):
            ir.load_host_program(host, host_dir)


def _tree_pythonpath(checkout: str) -> str:
    checkout = os.path.abspath(checkout)
    paths = [os.path.join(checkout, "src")] + sorted(glob.glob(os.path.join(checkout, "packages", "*", "src")))
    return os.pathsep.join(paths)


def _run(workload: str, checkout: str, *flags: str) -> dict:
    env = dict(os.environ, PYTHONPATH=_tree_pythonpath(checkout))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), workload, "--json", *flags], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare_trees(workload: str, trees: list[tuple[str, str]], processes: int, count_calls: bool) -> None:
    """`processes` rounds of one new process per tree, alternating; medians (and minima) per phase. With
    `count_calls`, one more process per tree under cProfile counts the function calls of the steps."""
    runs: dict[str, list[dict]] = {name: [] for name, _ in trees}
    loads = []
    for round_ in range(processes):
        for name, checkout in trees:
            result = _run(workload, checkout)
            runs[name].append(result)
            loads.append(os.getloadavg()[0])
            print(f"round {round_ + 1} {name}: " + ", ".join(f"{k} {result[k]:.3f}" for k in (*PHASES, "total")),
                  flush=True)
    calls = {name: _run(workload, checkout, "--calls")["calls"] for name, checkout in trees} if count_calls else {}
    print(f"\n{workload}: CPU s per phase, median of {processes} new processes per tree (each round's value), "
          f"min of the totals; load average (1 min) {min(loads):.2f}-{max(loads):.2f}")
    print("| tree | " + " | ".join((*PHASES, "total", "min total")) + (" | function calls |" if calls else " |"))
    print("|---" * (len(PHASES) + 3 + bool(calls)) + "|")
    for name, _ in trees:
        cells = []
        for k in (*PHASES, "total"):
            values = [r[k] for r in runs[name]]
            cells.append(f"{statistics.median(values):.3f} ({', '.join(f'{v:.2f}' for v in values)})")
        cells.append(f"{min(r['total'] for r in runs[name]):.3f}")
        if calls:
            cells.append(f"{calls[name]:,}")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--profile", help="write cProfile stats (CPU time) here and print the top functions")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--json", action="store_true", help="print the phases as one JSON line")
    parser.add_argument("--trees", help="NAME=CHECKOUT,...: compare checkouts in alternating new processes")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--calls", action="store_true",
                        help="count the steps' Python function calls (under cProfile: a load-independent measure)")
    args = parser.parse_args(argv)
    os.environ.setdefault("FUSE_ALL_COMPILE_WORKERS", "threads")   # nothing compiles here: no GPU
    if args.trees:
        trees = [tuple(t.split("=", 1)) for t in args.trees.split(",")]
        compare_trees(args.workload, trees, args.processes, args.calls)
        return 0
    phases = profile_once(args.workload, args.profile, args.top, args.calls)
    phases["total"] = sum(phases[k] for k in PHASES)
    if args.json:
        print(json.dumps(phases))
    else:
        print(f"{args.workload}: " + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in phases.items()) + " CPU s; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
