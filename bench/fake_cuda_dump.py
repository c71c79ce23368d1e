"""What fuse_all generates for a workload's CUDA graphs, on a machine without a GPU: the layout decision,
host programs, Triton kernel sources and fusion reports, dumped per graph for `diff -r` between checkouts.

    PYTHONPATH=<tree's sources> python bench/fake_cuda_dump.py train_resnet50_32x224 --dump /tmp/after
    ... --ptx forward:kernel_4,backward:kernel_123     # + their PTX for sm_90, every config

It calls the backend's own private steps (`fuse_all.backend._target_for`, `_choose_layout`), which 4869cd1
(session 6) already had, so one copy of the script runs against an older checkout's sources too (its own
bench folder supplies the workloads and the capture).

Dynamo + AOTAutograd cannot trace a training step on fake CUDA tensors without a GPU (the autograd engine
asks the driver for device 0's context), so the graphs are captured on CPU and moved to CUDA here: every
graph input becomes a fake CUDA tensor of the same sizes and strides, device arguments in the graph become
`cuda:0`, and fake-tensor propagation re-derives every value (CUDA meta functions). Then each graph runs
through the backend's own steps, as `fuse_all.backend._compile` does on a GPU: the layout choice
(`_choose_layout`), `ir.lower` with the Triton target's choices, `render_host_program` and `kernel_source`
of the target `_target_for("cuda:0")` gives. A training forward's saved activations that the layout choice
restrided are handed to the backward with their new strides (AOTAutograd restrides the backward's example
inputs to what the forward compiler reports; saved values keep their names across the partition), and the
backward's values stay as traced until `adopt_input_strides` re-derives them, as in the backend.

Kernels are rendered, not run; autotuning picks at run time are not covered. `--ptx KIND:KERNEL,...`
(or `--ptx all`) also compiles those kernels with the real Triton compiler for sm_90, every config of the
launch spec, and writes their PTX next to the sources (Triton's compiler needs no GPU), so that a source
change can be judged by the code it compiles to; `ptx/loads.txt` gives each config's registers and the
global loads a thread keeps in flight per loop (`sass_loads.py`, read from the SASS).
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CUDA = "cuda:0"


def _to_cuda_device(value):
    import torch
    if isinstance(value, torch.device) and value.type == "cpu":
        return torch.device(CUDA)
    return value


def _fake_like(mode, value, stride=None):
    import torch
    if not isinstance(value, torch.Tensor):
        return value
    with mode:
        return torch.empty_strided(tuple(value.shape), tuple(stride or value.stride()), dtype=value.dtype,
                                   device=CUDA, requires_grad=False)


def move_to_cuda(graph, mode, strides_by_name: dict | None = None):
    """`graph` (captured on CPU) with fake CUDA example inputs and re-propagated values; `strides_by_name`:
    placeholders to restride after propagation (a backward's saved activations, see the module doc)."""
    import dataclasses

    import torch
    import torch.fx
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    gm = graph.graph_module
    for node in gm.graph.nodes:
        if node.op == "call_function":
            node.args = torch.fx.node.map_aggregate(node.args, _to_cuda_device)
            node.kwargs = torch.fx.node.map_aggregate(node.kwargs, _to_cuda_device)
    gm.recompile()
    inputs = [_fake_like(mode, v) for v in graph.example_inputs]
    FakeTensorProp(gm, mode=mode).propagate_dont_convert_inputs(*inputs)
    if strides_by_name:
        names = [n.name for n in gm.graph.find_nodes(op="placeholder")]
        inputs = [_fake_like(mode, v, strides_by_name.get(name)) for name, v in zip(names, inputs)]
    return dataclasses.replace(graph, example_inputs=inputs, device=CUDA)


def write_ptx(folder: str, host: str, program, wanted, arch: int = 90) -> None:
    """PTX of the kernels `wanted` selects (a set of names, or None: all), every config, int32 indexing,
    aligned pointers, sizes not promised divisible (the first variant a launch of static sizes compiles)."""
    import tempfile

    from triton.backends.compiler import GPUTarget

    import fuse_all_ir as ir
    from fuse_all_codegen_triton.compiler import VariantKey, compile_only
    module = ir.load_host_program(host, tempfile.mkdtemp(prefix="fa_fake_cuda_"))
    target = GPUTarget("cuda", arch, 32)
    from sass_loads import describe, summarize
    os.makedirs(os.path.join(folder, "ptx"), exist_ok=True)
    summary_lines = []
    for name in program.kernels:
        if wanted is not None and name not in wanted:
            continue
        launcher = getattr(module, f"{name}_launcher")
        spec = launcher.spec
        div16 = bool(spec["sizes"]) and all(v % 16 == 0 for v in spec.get("size_hints", {}).values())
        for i, config in enumerate(spec["configs"]):
            key = VariantKey(i, spec["size_type"] == "i64", True, div16)
            compiled = compile_only(launcher._fn_for(key.int64), spec, key, target=target)
            with open(os.path.join(folder, "ptx", f"{name}.config{i}.ptx"), "w") as f:
                f.write(f"// config {config}\n{compiled.asm['ptx']}")
            summary_lines.append(f"{name} {config}: {describe(summarize(compiled.asm['cubin']))}\n")
    with open(os.path.join(folder, "ptx", "loads.txt"), "w") as f:
        f.writelines(summary_lines)


def compile_for_cuda(graph, opts):
    """The backend's layout choice, lowering and rendering for one graph: (layout line, program, host
    source, {kernel: source})."""
    import fuse_all_ir as ir
    from fuse_all import backend
    target = backend._target_for(graph.device, opts)
    layout = backend._choose_layout(graph, opts, getattr(target, "choices", None))
    compiled = ir.lower(graph.graph_module, graph.example_inputs, graph.graph_id, graph.device, validate=False,
                        choices=getattr(target, "choices", None))
    program = compiled.program
    host = ir.render_host_program(program, target)
    sources = {k.name: target.kernel_source(k) for k in program.kernels.values()}
    return layout, program, host, sources


def output_strides(gm) -> dict:
    import torch
    (output,) = gm.graph.find_nodes(op="output")
    found = {}
    for arg in output.args[0]:
        val = arg.meta.get("val") if hasattr(arg, "meta") else None
        if isinstance(val, torch.Tensor):
            found[arg.name] = tuple(val.stride())
    return found


def dump(folder: str, graph, layout, program, host: str, sources: dict, repo: str) -> None:
    from compile_profile import write_dump
    write_dump(folder, graph.graph_id, {
        "host.py": host,
        "kernels.txt": "".join(f"#### {name}\n{source}\n" for name, source in sources.items()),
        "report.txt": f"layout: {layout}\n{program.report}\n{len(program.kernels)} kernels\n",
        "graph.txt": "\n".join(f"{n.name} {n.target} {_describe(n)}" for n in graph.graph_module.graph.nodes)},
        repo)


def _describe(node) -> str:
    import torch
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        return f"{tuple(val.shape)} {tuple(val.stride())} {val.dtype} {val.device}"
    return type(val).__name__


def compile_graphs_for_cuda(graphs, opts=None):
    """Each graph captured on CPU (forward before backward) moved to CUDA and compiled as the backend would
    there; yields (graph on CUDA, layout line, program, host source, {kernel: source})."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from fuse_all.options import parse, resolve_layout_opt
    opts = opts or resolve_layout_opt(parse(None, None))
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    saved_strides: dict = {}
    for graph in graphs:
        graph = move_to_cuda(graph, mode, saved_strides if graph.kind == "backward" else None)
        traced = output_strides(graph.graph_module) if graph.kind == "forward" else {}
        layout, program, host, sources = compile_for_cuda(graph, opts)
        if graph.kind == "forward":
            saved_strides = {k: v for k, v in output_strides(graph.graph_module).items() if traced.get(k) != v}
        yield graph, layout, program, host, sources


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--dump", required=True)
    parser.add_argument("--ptx", help="kind:kernel,... (e.g. forward:kernel_12) or 'all': compile them for sm_90")
    args = parser.parse_args(argv)
    os.environ.setdefault("FUSE_ALL_COMPILE_WORKERS", "threads")   # compile here, in this process
    import fuse_all_ir as ir
    from compile_profile import _capture
    repo = os.path.abspath(ir.__file__).rsplit("/packages/", 1)[0]   # the checkout whose sources run
    for graph, layout, program, host, sources in compile_graphs_for_cuda(_capture(args.workload)):
        dump(os.path.join(args.dump, graph.kind), graph, layout, program, host, sources, repo)
        print(f"{graph.kind}: {layout}; {len(program.kernels)} kernels", flush=True)
        if args.ptx:
            wanted = None if args.ptx == "all" else {
                k.split(":", 1)[1] for k in args.ptx.split(",") if k.split(":", 1)[0] == graph.kind}
            if wanted is None or wanted:
                write_ptx(os.path.join(args.dump, graph.kind), host, program, wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
