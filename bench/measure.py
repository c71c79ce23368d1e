"""Run one workload on every backend, side by side in this process: first call (compile) time, steady-state
median, GB/s, correctness against eager, the first call's phases, and cold and warm first calls in new
processes (compile_columns.py).

The medians reported are taken after every backend has compiled, in rounds that rotate the order of the
backends (`interleaved_medians`): on the H200 a host-bound model (bert 1x12 without CUDA graphs) ran
0.5-1.5 ms per call slower when measured after another backend had compiled in the process than when
measured first, whichever backend it was (bench/host_profile_cuda.py --threads; no other thread or child
process used CPU meanwhile), and back-to-back loops of one backend differed by up to 15%. Timing each
backend right after its own compile measured the order as much as the backend."""
from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

import torch

import compile_columns
from compare import compare, snapshot
from env import one_line, temporary_environ
from launches import count_launches
from timing import first_call, median_ms, time_limit
from workloads import Instance, build


@dataclass(frozen=True)
class Backend:
    key: str
    backend: str | None      # None: eager, nothing compiled
    mode: str | None = None
    cuda_only: bool = False
    timed: bool = True       # aot_eager is only the capture floor: its first call is what counts
    by_default: bool = True  # measured when --backends is not given

    @property
    def fuse_all(self) -> bool:
        return self.backend == "fuse_all"

    @property
    def cudagraph_trees(self) -> bool:
        return self.mode in ("reduce-overhead", "max-autotune")


BACKENDS = [
    Backend("eager", None),
    Backend("aot_eager", "aot_eager", timed=False),
    Backend("inductor", "inductor"),
    Backend("inductor_ro", "inductor", "reduce-overhead", cuda_only=True),
    Backend("cudagraphs", "cudagraphs", cuda_only=True),
    Backend("fuse_all", "fuse_all"),
    Backend("fuse_all_ro", "fuse_all", "reduce-overhead", cuda_only=True),
    # the wider config space with CUDA graphs: its gain over fuse_all_ro is what autotuning leaves on the table
    Backend("fuse_all_ma", "fuse_all", "max-autotune", cuda_only=True, by_default=False),
]
CHILD_TAG = "@@BENCH_CHILD "
COUNTED = ("inductor", "fuse_all")      # kernels and ATen calls per step (launches.py), default mode


def backends_for(device: str, only: list[str] | None = None) -> list[Backend]:
    chosen = [b for b in BACKENDS if (device == "cuda" or not b.cuda_only) and (b.by_default or only)]
    if only:
        unknown = set(only) - {b.key for b in BACKENDS}
        if unknown:
            raise SystemExit(f"unknown backends {sorted(unknown)}; known: {[b.key for b in BACKENDS]}")
        chosen = [b for b in chosen if b.key in only or b.key == "eager"]   # eager is the reference
    return chosen


@contextlib.contextmanager
def full_float32(device: str):
    """The first call of every backend (the one compared with eager) and eager's reference run with float32
    convolutions instead of TF32 (cuDNN's default): TF32 rounds each product's inputs to 10 bits, so two
    correct programs that pick different convolution algorithms or layouts (channels-last vs NCHW) differ by
    ~1e-3 relative, and a training step's gradients by more: every backend, aot_eager included, failed
    ResNet-50 training's check at tol 1e-3 on the H200 (err 0.3-0.4). The timed calls run with the process's
    own setting. (Matmuls are float32 already unless the process asked otherwise; their TF32 switch is part
    of Dynamo's guards, so it is left alone.)"""
    if device != "cuda":
        yield
        return
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def fresh_cache_env(name: str) -> dict[str, str]:
    """A cold start for fuse_all: its own cache, Triton's kernel cache and torch's AOTAutograd cache (in
    Inductor's folder, read at each use) in a new temporary folder. Without the last, an earlier process on
    the machine that compiled the workload (a profile before the bench) made the "cold" cell a warm start."""
    root = tempfile.mkdtemp(prefix=f"fuse_all_bench_{name}_")
    return {"FUSE_ALL_CACHE_DIR": root, "TRITON_CACHE_DIR": os.path.join(root, "triton"),
            "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor")}


def clean_slate(device: str, forget_compiled: bool = True) -> None:
    """Forget every compiled graph (Dynamo's caches, CUDA graph trees) and give memory back."""
    if forget_compiled:
        torch._dynamo.reset()
    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def cudagraph_counts() -> dict:
    """fuse_all's CUDA-graph counters (mode="reduce-overhead") summed per graph kind: `backward replays`, ..."""
    import fuse_all
    counts: dict = {}
    for r in fuse_all.compiled_graphs():
        for key, value in ((r.cudagraphs or {}).get("stats") or {}).items():
            if key in ("replays", "plain_calls", "captures"):
                name = f"{r.kind} {key}"
                counts[name] = counts.get(name, 0) + value
    return counts


def fuse_all_summary() -> dict:
    """What fuse_all made of the graphs compiled since the last `fuse_all.reset()`."""
    import fuse_all
    records = fuse_all.compiled_graphs()
    fallbacks = [f"{r.kind}: {r.fallback_reason}" for r in records if getattr(r, "fallback_reason", None)]
    return {"graphs": len(records), "kernels": sum(len(r.kernels) for r in records),
            "externs": sum(len(getattr(r, "externs", ()) or ()) for r in records),
            "kinds": sorted({r.kind for r in records}), "fallbacks": fallbacks}


def _iteration(inst: Instance, fn, cudagraph_trees: bool):
    if not cudagraph_trees:
        return lambda: inst.step(fn)

    def step():
        torch.compiler.cudagraph_mark_step_begin()   # outputs of the previous replay may be overwritten
        return inst.step(fn)
    return step


def measure_backend(b: Backend, inst: Instance, ref, device: str, name: str, args,
                    kept: dict | None = None) -> dict:
    """One cell: compile with backend `b`, first call time, median, check. Never raises. With `kept`, the
    compiled step is left alive there under `b.key` for `interleaved_medians` (Dynamo keeps one entry per
    backend for the same code: its BACKEND_MATCH guard), so Dynamo's caches are not reset."""
    cell: dict = {}
    env = fresh_cache_env(name) if b.fuse_all else {}
    compiled = None
    try:
        with time_limit(args.backend_timeout), temporary_environ(env):
            clean_slate(device, forget_compiled=kept is None)
            if b.fuse_all:
                import fuse_all
                fuse_all.reset()
            compiled = torch.compile(inst.target, backend=b.backend, mode=b.mode)
            inst.reset()
            step = _iteration(inst, compiled, b.cudagraph_trees)
            compile_columns.start_first_call()
            with full_float32(device):
                cell["first_s"], out = first_call(step, device)
            cell["phases"] = compile_columns.first_call_phases(cell["first_s"], b.fuse_all)
            if b.fuse_all:
                cell["fuse_all"] = fuse_all_summary()
            ok, cell["check"] = compare(snapshot(out), ref.eager, inst.tol, inst.loss_only, ref.float64)
            cell["check_ok"] = ok
            del out
            if b.timed:
                before = cudagraph_counts() if b.fuse_all and b.cudagraph_trees else None
                cell["median_ms"] = median_ms(step, device, args.quick)
                if before is not None:   # what the timed steps did: replays, or calls without a graph
                    after = cudagraph_counts()
                    cell["graph_calls"] = {k: after.get(k, 0) - before.get(k, 0) for k in after}
                if inst.min_bytes:
                    cell["gbps"] = inst.min_bytes / (cell["median_ms"] * 1e-3) / 1e9
            if b.key in COUNTED:
                cell["launches"] = count_launches(step, device)
            if kept is not None and b.timed and cell.get("check_ok"):
                kept[b.key] = step
    except Exception as exc:  # noqa: BLE001 - one backend failing must not end the run
        cell["error"] = one_line(exc)
        if kept is not None:
            kept.pop(b.key, None)
    finally:
        del compiled
        clean_slate(device, forget_compiled=kept is None)
    if b.key == "fuse_all" and "first_s" in cell:
        cell["cache_env"] = env       # kept for the warm run
    elif env:
        shutil.rmtree(env["FUSE_ALL_CACHE_DIR"], ignore_errors=True)
    return cell


ROUNDS = 3


def interleaved_medians(steps: dict, cells: dict, device: str, args) -> None:
    """Time every kept step again in ROUNDS rounds, each starting one backend later than the previous
    (eager, inductor, fuse_all / inductor, fuse_all, eager / ...), all in the same state of the process, and
    report the median of the rounds as `median_ms` (the first pass's median stays as `first_pass_ms`)."""
    keys = list(steps)
    rounds: dict = {k: [] for k in keys}
    for r in range(ROUNDS):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            try:
                with time_limit(args.backend_timeout):
                    rounds[key].append(median_ms(steps[key], device, args.quick))
            except Exception as exc:  # noqa: BLE001 - keep the first pass's number
                cells[key]["interleave_error"] = one_line(exc)
    for key, values in rounds.items():
        if len(values) == ROUNDS:
            cell = cells[key]
            cell["first_pass_ms"] = cell["median_ms"]
            cell["rounds_ms"] = values
            cell["median_ms"] = sorted(values)[ROUNDS // 2]


@dataclass
class Reference:
    """What a backend's first step is compared with: eager's (float32 convolutions), and where the workload
    has one, the same step in float64 (`Instance.float64_step`; compare.py says when it is used)."""
    eager: list
    float64: list | None = None


def measure_eager(inst: Instance, device: str, args) -> tuple[dict, Reference | None]:
    cell: dict = {}
    ref = None
    try:
        with time_limit(args.backend_timeout):
            inst.reset()
            step = _iteration(inst, inst.target, False)
            with full_float32(device):
                cell["first_s"], out = first_call(step, device)
            ref = Reference(snapshot(out))
            del out
            cell["median_ms"] = median_ms(step, device, args.quick)
            if inst.min_bytes:
                cell["gbps"] = inst.min_bytes / (cell["median_ms"] * 1e-3) / 1e9
            if inst.float64_step is not None:
                ref.float64 = snapshot(inst.float64_step())
    except Exception as exc:  # noqa: BLE001
        cell["error"] = one_line(exc)
    return cell, ref


def trace_warmup(inst: Instance, device: str) -> float | None:
    """Trace the workload once with aot_eager and throw the result away. A process's first trace of a model
    fills caches that survive `torch._dynamo.reset()` (source and bytecode analysis, fake-tensor dispatch),
    worth ~0.5 s on ResNet50; without this the first backend measured pays it and the others do not."""
    clean_slate(device)
    try:
        seconds, _ = first_call(lambda: inst.step(torch.compile(inst.target, backend="aot_eager")), device)
    except Exception:  # noqa: BLE001 - the aot_eager cell will report it
        seconds = None
    inst.reset()
    clean_slate(device)
    return seconds


def prime_backends(device: str, backends: list[str], keep_caches: bool = False) -> dict:
    """Compile a tiny unrelated function once per backend, so each workload's compile time is its own and
    not the one-off cost of importing a compiler stack (which a process pays once, on its first compile).
    Returns the seconds each priming took (shown in the header: that is the first-compile import cost)."""
    x = torch.randn(64, device=device)
    spent = {}
    for backend in backends:
        env = fresh_cache_env("prime") if backend == "fuse_all" and not keep_caches else {}
        start = time.perf_counter()
        try:
            with temporary_environ(env):
                torch.compile(lambda t: torch.tanh(t) * 3 + 1, backend=backend)(x)
                spent[backend] = round(time.perf_counter() - start, 3)
        except Exception as exc:  # noqa: BLE001 - the real cells will report it
            spent[backend] = f"FAILED: {one_line(exc)}"
        finally:
            torch._dynamo.reset()
            if env:
                shutil.rmtree(env["FUSE_ALL_CACHE_DIR"], ignore_errors=True)
    return spent


def run_workload(name: str, device: str, backends: list[Backend], args, fuse_all_problem: str | None) -> dict:
    """Every backend on one workload; prints each cell as it completes (the log of an unattended run)."""
    start = time.perf_counter()
    row: dict = {"workload": name, "cells": {}}
    print(f"== {name} ({device})", flush=True)
    try:
        inst = build(name, device)
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"build: {one_line(exc)}"
        print(f"   FAILED: {row['error']}", flush=True)
        return row
    row["min_bytes"] = inst.min_bytes
    eager, ref = measure_eager(inst, device, args)
    row["cells"]["eager"] = eager
    _print_cell("eager", eager)
    if ref is not None:
        row["trace_warmup_s"] = trace_warmup(inst, device)
    kept = None if args.no_interleave else {}
    if kept is not None and "median_ms" in eager:
        kept["eager"] = _iteration(inst, inst.target, False)
    for b in backends:
        if b.key == "eager":
            continue
        if b.fuse_all and fuse_all_problem:
            cell = {"error": fuse_all_problem}
        elif ref is None:
            cell = {"error": "eager failed: nothing to compare with"}
        else:
            cell = measure_backend(b, inst, ref, device, name, args, kept)
        row["cells"][b.key] = cell
        _print_cell(b.key, cell)
    if kept and len(kept) > 1:
        interleaved_medians(kept, row["cells"], device, args)
        print("   interleaved medians, ms: " + ", ".join(
            f"{k} {row['cells'][k]['median_ms']:.4f} (first pass {row['cells'][k]['first_pass_ms']:.4f})"
            for k in kept if "rounds_ms" in row["cells"][k]), flush=True)
    kept = None
    clean_slate(device)
    cold = row["cells"].get("fuse_all", {})
    env = cold.pop("cache_env", None)
    if env:
        shutil.rmtree(env["FUSE_ALL_CACHE_DIR"], ignore_errors=True)
    if not args.no_warm:    # cold and warm first calls in new processes (compile_columns.py)
        wanted = [b for b in compile_columns.PROCESS_BACKENDS if b in {x.backend for x in backends}]
        row["processes"] = compile_columns.cold_and_warm(name, device, args, wanted)
        if "fuse_all" in row["processes"]:
            row["fuse_all_warm"] = row["processes"]["fuse_all"]["warm"]
    row["elapsed_s"] = time.perf_counter() - start
    print(f"   ({row['elapsed_s']:.0f} s)", flush=True)
    del inst
    clean_slate(device)
    return row


def _print_cell(key: str, cell: dict) -> None:
    if "error" in cell:
        print(f"   {key:<14} FAILED: {cell['error']}", flush=True)
        return
    parts = [f"first call {cell['first_s']:8.3f} s"]
    if "median_ms" in cell:
        parts.append(f"median {cell['median_ms']:10.4f} ms")
    if "gbps" in cell:
        parts.append(f"{cell['gbps']:8.1f} GB/s")
    if "check" in cell:
        parts.append(cell["check"])
    if "launches" in cell:
        n = cell["launches"]
        parts.append(f"[per step: {n['kernels'] if n['kernels'] is not None else '?'} device kernels, "
                     f"{n['aten']} ATen calls]")
    if "phases" in cell and "fuse_all" in cell:
        parts.append("phases: " + compile_columns.phases_text(cell["phases"]))
    if "fuse_all" in cell:
        s = cell["fuse_all"]
        parts.append(f"[{s['graphs']} graphs {'/'.join(s['kinds'])}, {s['kernels']} kernels, {s['externs']} "
                     f"ATen calls, {len(s['fallbacks'])} fallbacks{': ' + s['fallbacks'][0] if s['fallbacks'] else ''}]")
    print(f"   {key:<14} " + "   ".join(parts), flush=True)
