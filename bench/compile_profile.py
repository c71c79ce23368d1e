"""fuse_all's own compile phases (lowering, fusion_schedule, render) on every graph of a workload, forward
and backward, without Dynamo or AOTAutograd in the timings; optionally under cProfile, and optionally
dumping what the phases decided (kernel sources, host programs, fusion reports) to compare two checkouts.

    python bench/compile_profile.py train_resnet50_4x64 --targets cpp,triton --repeat 3
    python bench/compile_profile.py train_resnet50_4x64 --profile /tmp/prof.pstats     # + top functions
    python bench/compile_profile.py bert_1x12 --dump /tmp/before    # then diff -r /tmp/before /tmp/after
    python bench/compile_profile.py resnet50_1x3x224x224 --backend --device cuda --after aot_eager --wall \
        --profile /tmp/r50.pstats     # the first call through the backend, after aot_eager as bench.py runs it

The workload's graphs are captured once (training workloads with their backward), then each target's
`ir.lower` + `render_host_program` + `kernel_source` runs `--repeat` times on them in this process; the
minimum per phase over the repeats is printed (CPU seconds of this process: steadier than wall time on a
shared machine). The first repeat also pays the process's first-time sympy work and fills the memos.
"""
from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PHASES = ("lowering", "fusion_schedule", "render")
BACKEND_PHASES = ("aot_trace", "layout", "lowering", "fusion_schedule", "render", "host_load", "cpp_load", "cpp_compile",
                  "records")


def backend_first_call(name: str, profile: str | None, top: int, device: str = "cpu",
                        after: str | None = None, wall: bool = False) -> None:
    """`torch.compile(backend="fuse_all")` and one step, with the stages' phases timed in CPU seconds of
    this process (`compile_timing`'s clock swapped; `wall`: wall seconds, which also count the waits for
    compile workers and the GPU); under cProfile, the stats are printed for fuse-all's own functions and
    for AOTAutograd's. `after` first compiles and runs the workload with that backend (bench.py's order:
    aot_eager before fuse_all), so process-wide first-time work is not charged to fuse_all. Run it twice
    on one FUSE_ALL_CACHE_DIR: the second run loads the C++ libraries."""
    import torch

    import fuse_all_ir as ir
    from env import register_fuse_all
    from workloads import build
    register_fuse_all()
    inst = build(name, device)
    if after:
        start = time.perf_counter()
        inst.step(torch.compile(inst.target, backend=after))
        _synchronize(device)
        print(f"{name} {after} first call {time.perf_counter() - start:.3f} wall s", flush=True)
    compiled = torch.compile(inst.target, backend="fuse_all")
    clock = time.perf_counter if wall else time.process_time
    ir.compile_timing.reset()
    ir.compile_timing._clock = clock
    profiler = cProfile.Profile(clock) if profile else None
    start = clock()
    if profiler:
        profiler.enable()
    inst.step(compiled)
    _synchronize(device)
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
        for order, pattern in (("cumulative", "fuse_all|fuse-all|fusecost"), ("tottime", "fuse_all|fuse-all|fusecost"),
                               ("cumulative", "_functorch|_dynamo|_subclasses|proxy_tensor")):
            print(f"---- backend: top {top} by {order} of functions matching {pattern} ({profile})")
            pstats.Stats(profile).sort_stats(order).print_stats(pattern, top)
    total = clock() - start
    phases = ir.compile_timing.snapshot()
    own = sum(phases.get(k, 0.0) for k in BACKEND_PHASES if k not in ("aot_trace", "cpp_compile", "cpp_load"))
    print(f"{name} backend first call {total:.3f} {'wall' if wall else 'CPU'} s: " +
          ", ".join(f"{k} {phases.get(k, 0.0):.3f}" for k in BACKEND_PHASES) +
          f"; fuse_all's own (layout+lowering+fusion_schedule+render+host_load+records) {own:.3f}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


def _synchronize(device: str) -> None:
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def _capture(name: str):
    import fuse_all_capture as capture
    from fuse_all.backend import _decompositions
    from workloads import build
    inst = build(name, "cpu")
    training = name.startswith(("train", "ddp_train"))   # their target is a loss: capture the backward too
    return capture.capture(inst.target, *inst.inputs, training=training, decompositions=_decompositions())


def _targets(names: str):
    from fuse_all_codegen_cpp import CppChoices, CppTarget
    from fuse_all_codegen_triton import TritonChoices, TritonTarget
    table = {"cpp": (CppChoices, CppTarget), "triton": (TritonChoices, TritonTarget)}
    return [(name, *table[name]) for name in names.split(",")]


def compile_once(graphs, choices_type, target_type, dump_dir: str | None = None) -> dict[str, float]:
    """Lower, fuse, schedule and render every graph once, under the backend's garbage-collector pause where
    this checkout has one (`fuse_all_ir.gc_pause`); {phase: CPU seconds}."""
    import fuse_all_ir as ir
    seconds = dict.fromkeys(PHASES, 0.0)
    gc_pause = getattr(ir, "gc_pause", None)
    with gc_pause.paused() if gc_pause is not None else contextlib.nullcontext():
        for graph in graphs:
            _compile_graph(graph, choices_type, target_type, seconds, dump_dir)
    return seconds


def _compile_graph(graph, choices_type, target_type, seconds: dict, dump_dir: str | None) -> None:
    import fuse_all_ir as ir
    from fuse_all_ir.lowering import GraphLowering
    clock = time.process_time
    choices = choices_type()
    start = clock()
    lowered = GraphLowering(graph.graph_module, graph.example_inputs, graph.graph_id, graph.device).run()
    seconds["lowering"] += clock() - start
    start = clock()
    compiled = _fuse_schedule(lowered, choices)
    seconds["fusion_schedule"] += clock() - start
    start = clock()
    target = target_type(choices=choices)
    host = ir.render_host_program(compiled, target)
    sources = {k.name: target.kernel_source(k) for k in compiled.kernels.values()}
    seconds["render"] += clock() - start
    if dump_dir:
        _dump(dump_dir, graph, compiled, host, sources)


def _fuse_schedule(lowered, choices):
    """`fuse_all_ir.lower` after its lowering step, as the backend runs it (validation off)."""
    import fuse_all_ir as ir
    from fuse_all_ir.column_split import split_reductions
    from fuse_all_ir.memory import plan_reuse
    from fuse_all_ir.schedule import schedule
    program = schedule(lowered, choices)
    if choices.split_reductions:
        program = split_reductions(program)
    plan_reuse(program)
    assert isinstance(program, ir.Program)
    return program


def _dump(dump_dir: str, graph, program, host: str, sources: dict[str, str]) -> None:
    """One folder per graph, named by its kind (see write_dump)."""
    write_dump(os.path.join(dump_dir, graph.kind), graph.graph_id, {
        "host.py": host,
        "kernels.txt": "".join(f"#### {name}\n{source}\n" for name, source in sources.items()),
        "report.txt": f"{program.report}\n{len(program.kernels)} kernels\n"})


def write_dump(folder: str, graph_id: str, files: dict[str, str], repo: str | None = None) -> None:
    """Write `files` ({name: text}) into `folder`; the graph id and the checkout's path `repo` (default: this
    script's; they differ between two checkouts of the same code) are spelled GRAPH and REPO, so `diff -r`
    shows only real changes."""
    os.makedirs(folder, exist_ok=True)
    repo = repo or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text.replace(graph_id, "GRAPH").replace(repo, "REPO"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--targets", default="cpp,triton", help="comma-separated: cpp, triton")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", help="write cProfile stats of the first repeat here and print the top")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--dump", help="write each graph's host program, kernel sources and report here")
    parser.add_argument("--backend", action="store_true",
                        help="time a first call through torch.compile(backend='fuse_all') instead")
    parser.add_argument("--device", default="cpu", help="with --backend: cpu or cuda")
    parser.add_argument("--after", help="with --backend: compile and run this backend first (e.g. aot_eager)")
    parser.add_argument("--wall", action="store_true", help="with --backend: wall seconds instead of CPU seconds")
    args = parser.parse_args(argv)
    from env import add_repo_paths
    add_repo_paths()
    if args.backend:
        backend_first_call(args.workload, args.profile, args.top, args.device, args.after, args.wall)
        return 0
    graphs = _capture(args.workload)
    print(f"{args.workload}: {len(graphs)} graphs ({', '.join(g.kind for g in graphs)}), "
          f"{sum(len(g.graph_module.graph.nodes) for g in graphs)} FX nodes; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for label, choices_type, target_type in _targets(args.targets):
        runs = []
        for i in range(args.repeat):
            profiler = cProfile.Profile() if args.profile and i == 0 else None
            dump = os.path.join(args.dump, label) if args.dump and i == 0 else None
            if profiler:
                profiler.enable()
            runs.append(compile_once(graphs, choices_type, target_type, dump))
            if profiler:
                profiler.disable()
                path = f"{args.profile}.{label}"
                profiler.dump_stats(path)
                for order in ("cumulative", "tottime"):
                    print(f"---- {label}: top {args.top} by {order} ({path})")
                    pstats.Stats(path).sort_stats(order).print_stats(args.top)
            print(f"{label} repeat {i + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in runs[-1].items()) +
                  f", total {sum(runs[-1].values()):.3f} CPU s", flush=True)
        best = {k: min(r[k] for r in runs) for k in PHASES}
        print(f"{label} min of {len(runs)}: " + ", ".join(f"{k} {v:.3f}" for k, v in best.items()) +
              f" CPU s; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
