"""Where a workload's device time goes: the top kernels per backend, and the time per kind (issue 11: "where
a row misses, the note says where its time goes").

    python bench/profile_kernels.py --device cuda --workloads resnet50_1x3x224x224 --backends inductor,fuse_all
    python bench/profile_kernels.py --device cuda --workloads train_resnet50_32x224 --top 15 --channels-last
    python bench/profile_kernels.py --device cuda --workloads train_resnet50_32x224 --backends fuse_all --bandwidth 25

Each backend compiles the workload in this process, warms up, then `--steps` steps run under
torch.profiler. Kernels are grouped by kind from their names: convolution (cuDNN / implicit GEMM),
matmul (cuBLAS / CUTLASS), generated (Triton or C++ kernels of the compiler), and other ATen kernels
(copies, reductions, elementwise). Times are device time per step. `--channels-last` also times eager on a
channels-last model and input (what a layout optimisation can gain on the convolutions).
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import env  # noqa: E402

env.add_repo_paths()

import torch  # noqa: E402

import kernel_timeline  # noqa: E402
import measure  # noqa: E402
import workloads  # noqa: E402

_KINDS = (
    # fuse-all's tensor-core product (`tf32x3_matmul`) is its own Triton kernel: generated, not a library
    # kernel both backends share (those anchor `--regions`)
    ("generated", re.compile(r"^triton_|^fa_|^kernel_|cpp_fused|^tf32x3_", re.I)),
    ("convolution", re.compile(r"conv|cudnn|implicit|fprop|dgrad|wgrad|winograd|nchwToNhwc|nhwcToNchw", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|cublas|sm\d+_xmma|ampere_|hopper_|nvjet", re.I)),
)


def kind_of(name: str) -> str:
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return "other ATen"


def is_library_kernel(name: str) -> bool:
    """A cuDNN or cuBLAS kernel: what every backend launches for the same convolution or product."""
    return kind_of(name) in ("convolution", "matmul")


def _compiled(instance, key: str):
    """The workload's target compiled as bench.py's backend `key` (measure.BACKENDS: eager, inductor_ro, ...)."""
    backend = {b.key: b for b in measure.BACKENDS}[key]
    if backend.backend is None:
        return instance.target
    torch._dynamo.reset()
    return torch.compile(instance.target, backend=backend.backend, mode=backend.mode)


def _launchers(prof, pattern: re.Pattern) -> list[str]:
    """For the device kernels whose names match `pattern`: the kernels' names, then the chain of host ops that
    launched them (innermost first, with input shapes), counted over the profiled steps."""
    chains: dict[str, int] = collections.defaultdict(int)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA or not any(
                pattern.search(k.name) for k in getattr(event, "kernels", ())):
            continue
        launched = sorted({k.name[:60] for k in event.kernels if pattern.search(k.name)})
        chain, parent = [" + ".join(launched)], event
        while parent is not None and len(chain) < 7:
            shapes = getattr(parent, "input_shapes", None)
            chain.append(f"{parent.name}{shapes if shapes else ''}")
            parent = parent.cpu_parent
        chains[" <- ".join(chain)] += 1
    return [f"{n}x {c}" for c, n in sorted(chains.items(), key=lambda kv: -kv[1])]


def bandwidth_rows(calls_by_graph: dict, records: list) -> list[dict]:
    """fuse_all's generated kernels with their achieved bandwidth: device µs per call of each (graph, kernel)
    (`fuse_all.profiling.graph_calls`: the host program's profiler ranges say which kernel of which graph
    launched each device kernel, which the device kernel's own name cannot: graphs share JIT functions and
    kernel names), bytes per call from the graph's record (`kernel_bytes`: each buffer it reads or writes,
    once), and what the fusion report says the kernel is. Sorted by device time per step."""
    by_id = {r.graph_id: r for r in records}
    rows = []
    for graph_id, calls in calls_by_graph.items():
        record = by_id.get(graph_id)
        if record is None or not calls:
            continue
        why = {g.get("kernel"): g.get("why", "") for g in getattr(record.report, "groups", ()) or ()
               if isinstance(g, dict)}
        total: dict[str, float] = collections.defaultdict(float)
        launches: dict[str, int] = collections.defaultdict(int)
        for call in calls:
            for step in call.steps:
                if step.key in record.kernel_bytes:
                    total[step.key] += step.device_us
                    launches[step.key] += 1
        for kernel, us in total.items():
            per_launch = us / launches[kernel]
            nbytes = record.kernel_bytes.get(kernel)
            rows.append({"graph": f"{record.kind} {graph_id}", "kernel": kernel,
                         "ms_per_step": us / len(calls) / 1000.0, "us_per_launch": per_launch,
                         "bytes": nbytes, "gbps": nbytes / (per_launch * 1e3) if nbytes and per_launch else None,
                         "why": why.get(kernel, "")})
    return sorted(rows, key=lambda r: -r["ms_per_step"])


def _print_bandwidth(rows: list[dict], top: int) -> None:
    total = sum(r["ms_per_step"] for r in rows)
    print(f"\nfuse_all generated kernels by (graph, kernel): {total:.3f} ms per step; top {top} with achieved "
          f"bandwidth (bytes = each buffer read or written once)")
    for r in rows[:top]:
        gbps = f"{r['gbps']:7.0f} GB/s" if r["gbps"] else "      ? GB/s"
        size = f"{r['bytes'] / 1e6:8.1f} MB" if r["bytes"] else "       ? MB"
        print(f"  {r['ms_per_step']:7.4f} ms {r['us_per_launch']:7.1f} us/launch {size} {gbps}  "
              f"{r['graph'][:20]:20s} {r['kernel']:18s} {r['why'][:90]}")
        if r.get("tuning"):
            print(f"      {r['tuning']}")


def _short_config(config: dict) -> str:
    return "/".join(str(config[k]) for k in ("XBLOCK", "RBLOCK", "num_warps") if k in config)


def autotune_notes(rows: list[dict], records: list) -> None:
    """Adds to each row the config its Triton launcher chose and, when it benchmarked them in this process
    (not a choice remembered on disk), every candidate's time: which tile a kernel's bandwidth came from.
    Launchers are found among live objects by kernel name, told apart across graphs by the hash of the
    graph's kernel source (the launch spec's `source_hash`)."""
    import gc
    import hashlib

    from fuse_all_codegen_triton.runtime import TritonKernel
    launchers = collections.defaultdict(list)
    for obj in gc.get_objects():
        if issubclass(type(obj), TritonKernel):   # not isinstance: it dereferences dead weak proxies
            launchers[obj.name].append(obj)
    by_graph = {f"{r.kind} {r.graph_id}": r for r in records}
    for row in rows:
        found = launchers.get(row["kernel"], [])
        record = by_graph.get(row["graph"])
        source = record.kernel_sources.get(row["kernel"]) if record is not None else None
        if len(found) > 1 and source is not None:
            digest = hashlib.sha256(source.encode()).hexdigest()[:32]
            found = [k for k in found if k.spec.get("source_hash") == digest]
        if len(found) != 1 or found[0].chosen is None:
            continue
        kernel = found[0]
        note = f"chosen {_short_config(kernel.chosen)} (XBLOCK/RBLOCK/warps)"
        if kernel.timings_ms:
            note += "; candidates " + ", ".join(f"{_short_config(c)} {t * 1000:.1f} us"
                                                for c, t in zip(kernel.configs, kernel.timings_ms))
        row["tuning"] = note


def _device_times(instance, fn, steps: int, launched_by: re.Pattern | None = None, bandwidth: int = 0,
                  timeline: list | None = None) -> tuple[dict[str, float], int, dict[str, int]]:
    from torch.profiler import ProfilerActivity, profile
    device = "cuda" if torch.cuda.is_available() else "cpu"
    activities = [ProfilerActivity.CUDA] if device == "cuda" else [ProfilerActivity.CPU]
    if launched_by is not None or bandwidth:
        activities = [ProfilerActivity.CPU] + [a for a in activities if a != ProfilerActivity.CPU]
    for _ in range(3):
        instance.step(fn)
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities, record_shapes=launched_by is not None) as prof:
        for _ in range(steps):
            instance.step(fn)
        if device == "cuda":
            torch.cuda.synchronize()
    if launched_by is not None:
        print(f"host ops launching kernels matching {launched_by.pattern!r} ({steps} steps):")
        for line in _launchers(prof, launched_by):
            print(f"    {line[:400]}")
    if bandwidth:
        import fuse_all
        from fuse_all.profiling import graph_calls
        rows = bandwidth_rows(graph_calls(prof.events()), fuse_all.compiled_graphs())
        autotune_notes(rows, fuse_all.compiled_graphs())
        _print_bandwidth(rows, bandwidth)
    if timeline is not None:
        launches_in_order, same_every_step = kernel_timeline.step_launches(prof.events(), steps)
        timeline.extend(launches_in_order)
        if not same_every_step:
            print("kernel order differs between profiled steps: the timeline is the first step's")
    times: dict[str, float] = collections.defaultdict(float)
    calls: dict[str, int] = collections.defaultdict(int)
    launches = 0
    for event in prof.events():
        if device == "cuda" and event.device_type == torch.autograd.DeviceType.CUDA:
            times[event.name] += event.device_time / 1000.0 / steps
            calls[event.name] += 1
            launches += 1
    return times, launches // steps, {name: n // steps for name, n in calls.items()}


_GEMMS = ("mm", "addmm", "bmm", "baddbmm", "_addmm_activation")


def _gemm_calls(instance, fn) -> dict[tuple, int]:
    """The matrix products one step launches (op, sizes, strides, dtype of each tensor argument), counted: the
    same product on other operand layouts can take cuBLAS to other kernels (`tn` vs `nn` tiles)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: dict[tuple, int] = collections.defaultdict(int)

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in _GEMMS:
                tensors = tuple((tuple(a.shape), a.stride(), str(a.dtype).replace("torch.", ""), a.data_ptr() % 256)
                                for a in args if isinstance(a, torch.Tensor))
                scalars = tuple(sorted((k, v) for k, v in (kwargs or {}).items() if not isinstance(v, torch.Tensor)))
                calls[(func.overloadpacket.__name__, tensors, scalars)] += 1
            return func(*args, **(kwargs or {}))

    for _ in range(2):
        instance.step(fn)
    with Record():
        instance.step(fn)
    return calls


def _time_gemm(op: str, tensors: tuple, scalars: tuple) -> float:
    """µs of one call of `op` on fresh random operands of the recorded sizes, strides and address modulo 256
    (cuBLAS picks kernels by the operands' alignment too)."""
    import triton.testing
    args = []
    for shape, stride, dtype, address in tensors:
        extent = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        base = torch.randn(extent + 256, device="cuda", dtype=getattr(torch, dtype))
        skip = (address - base.data_ptr() % 256) % 256 // base.element_size()
        args.append(base.as_strided(shape, stride, skip))
    func = getattr(torch.ops.aten, op).default
    return 1000 * triton.testing.do_bench(lambda: func(*args, **dict(scalars)), rep=50)


def _print_gemms(per_backend: dict[str, dict[tuple, int]]) -> None:
    timed: dict[tuple, float] = {}
    for backend, calls in per_backend.items():
        total = 0.0
        print(f"\n{backend}: matrix products per step (op, [sizes strides dtype] per tensor, scalars)")
        for key, n in sorted(calls.items(), key=lambda kv: str(kv[0])):
            if key not in timed:
                timed[key] = _time_gemm(*key)
            total += n * timed[key]
            operands = " ".join(f"{list(sz)}{list(st)}@{address}" for sz, st, _, address in key[1])
            print(f"  {n:3d}x {timed[key]:8.1f} us  {key[0]:8s} {operands} {key[1][0][2]} {dict(key[2]) or ''}")
        print(f"  total {total / 1000:.3f} ms per step (operands re-timed alone)")


def _eager_channels_last_ms(name: str, device: str) -> tuple[float, float] | None:
    """Eager ms per step with the model and input as built, and both converted to channels-last."""
    import triton.testing
    instance = workloads.build(name, device)
    target = instance.target
    cells = [c.cell_contents for c in (getattr(target, "__closure__", None) or ())]
    model = target if isinstance(target, torch.nn.Module) else next(
        (c for c in cells if isinstance(c, torch.nn.Module)), None)
    if model is None:
        return None
    plain = triton.testing.do_bench(lambda: instance.step(target), rep=200)
    model.to(memory_format=torch.channels_last)
    for x in instance.inputs:
        if isinstance(x, torch.Tensor) and x.dim() == 4:
            x.data = x.data.contiguous(memory_format=torch.channels_last)
    channels_last = triton.testing.do_bench(lambda: instance.step(target), rep=200)
    return plain, channels_last


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda",), default="cuda")
    p.add_argument("--workloads", required=True)
    p.add_argument("--backends", default="inductor,fuse_all")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--launched-by", help="regex over kernel names: print the host ops that launched them")
    p.add_argument("--gemms", action="store_true", help="list every matrix product of a step with its operands' "
                   "sizes and strides, timed alone (why two backends' matmul times differ)")
    p.add_argument("--bandwidth", type=int, default=0, metavar="N",
                   help="for fuse_all: its N generated kernels with the most device time, each as (graph, kernel) "
                        "with bytes per launch and achieved GB/s")
    p.add_argument("--regions", type=int, default=0, metavar="N",
                   help="with two backends: cut each one's step at the library kernels both launch and list the N "
                        "regions between them where the second backend spends the most more (and less) device time "
                        "(bench/kernel_timeline.py)")
    p.add_argument("--json", help="write every kernel's device ms and launches per step, per backend, here")
    args = p.parse_args()
    everything: dict = {}
    for name in workloads.expand(args.workloads.split(",")):
        print(f"\n## {name}")
        if args.channels_last:
            result = _eager_channels_last_ms(name, args.device)
            if result:
                print(f"eager ms per step: as built {result[0]:.3f}, channels-last {result[1]:.3f}")
        per_backend = {}
        timelines: dict[str, list] = {}
        if args.gemms:
            _print_gemms({backend: _gemm_calls(instance, _compiled(instance, backend))
                          for backend in args.backends.split(",")
                          for instance in [workloads.build(name, args.device)]})
            continue
        for backend in args.backends.split(","):
            instance = workloads.build(name, args.device)
            if backend.startswith("fuse_all"):
                import fuse_all
                fuse_all.reset()
            times, launches, calls = _device_times(
                instance, _compiled(instance, backend), args.steps,
                re.compile(args.launched_by) if args.launched_by else None,
                args.bandwidth if backend == "fuse_all" else 0,
                timelines.setdefault(backend, []) if args.regions else None)
            per_backend[backend] = times
            everything.setdefault(name, {})[backend] = {
                k: {"ms": ms, "launches": calls.get(k, 0), "kind": kind_of(k)} for k, ms in times.items()}
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(everything, f, indent=1)
            by_kind: dict[str, float] = collections.defaultdict(float)
            for kernel, ms in times.items():
                by_kind[kind_of(kernel)] += ms
            total = sum(times.values())
            kinds = ", ".join(f"{k} {v:.3f}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]))
            print(f"\n{backend}: device ms/step {total:.3f} in {launches} launches ({kinds})")
            for kernel, ms in sorted(times.items(), key=lambda kv: -kv[1])[:args.top]:
                print(f"  {ms:8.4f} ms  {calls.get(kernel, 0):4d}x {kind_of(kernel):11s} {kernel[:104]}")
        if args.regions and len(timelines) == 2:
            (first, first_launches), (second, second_launches) = timelines.items()
            found = kernel_timeline.regions(first_launches, second_launches, is_library_kernel)
            print()
            print("\n".join(kernel_timeline.report(first, second, found, args.regions)))


if __name__ == "__main__":
    main()
