"""Compile-time columns: where fuse_all's first call spends its seconds (per phase), and cold and warm first
calls of the capture floor (aot_eager), Inductor and fuse_all, each in a new process.

Per-phase split of a first call (any backend): torch's own `compilation_time_metrics` give Dynamo's whole
compile (`_compile.compile_inner`) and the backend's share of it (`OutputGraph.call_user_compiler`):
    dynamo      = compile_inner - call_user_compiler     (bytecode tracing, guards)
    backend     = call_user_compiler                     (for fuse_all: split further below)
    run         = first call - compile_inner             (the first launch, guards, a lazy backward compile)
fuse_all's stages add exclusive phases (`fuse_all_ir.compile_timing`: aot_trace, layout, lowering, fusion_schedule,
render, host_load, cpp_load, cpp_compile, triton_compile_wait, autotune, records, graph_cache); for it
`run+other` is the first call minus Dynamo minus those, i.e. the first launch of the host programs and
whatever the backend does outside a named phase. `triton_compile_bg` (seconds of Triton compiles summed
over the pool's workers) overlaps the others and is shown beside them.

New processes: `cold` runs with fresh, empty cache folders (fuse_all's, Inductor's with its FX graph and
AOTAutograd caches, Triton's), so nothing can be read from a cache; `warm` is a second new process on the
folders the cold one filled. Both are primed (a tiny compile first, so importing the compiler stack is not
counted) and trace the workload once with aot_eager before the timed first call, like the in-process cells.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch

CHILD_TAG = "@@BENCH_CHILD "
PROCESS_BACKENDS = ("aot_eager", "inductor", "fuse_all")
FUSE_ALL_PHASES = ("dynamo", "aot_trace", "graph_cache", "layout", "lowering", "fusion_schedule", "render", "host_load",
                   "cpp_load", "cpp_compile", "triton_compile_wait", "autotune", "records", "run+other")
BACKGROUND_PHASES = ("triton_compile_bg",)
_DISABLE = ("FUSE_ALL_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FORCE_DISABLE_CACHES")


def _compile_timing():
    try:
        import fuse_all_ir
        return fuse_all_ir.compile_timing
    except (ImportError, AttributeError):
        return None


def cpu_seconds() -> float:
    """CPU seconds used so far by this process and its finished children (the C++ compiler, compile
    workers): on a loaded machine a steadier measure of the work a first call does than its wall time."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def start_first_call() -> None:
    """Forget earlier compile timings, right before a timed first call."""
    torch._dynamo.utils.compilation_time_metrics.clear()
    timing = _compile_timing()
    if timing is not None:
        timing.reset()


def first_call_phases(first_s: float, fuse_all: bool) -> dict[str, float]:
    """The split of a first call (see the module docstring), seconds rounded to the millisecond."""
    metrics = torch._dynamo.utils.compilation_time_metrics
    inner = sum(metrics.get("_compile.compile_inner", ()))
    user = sum(metrics.get("OutputGraph.call_user_compiler", ()))
    phases = {"dynamo": inner - user}
    if fuse_all and _compile_timing() is not None:
        recorded = _compile_timing().snapshot()
        main = {k: v for k, v in recorded.items() if k not in BACKGROUND_PHASES}
        phases.update(main)
        phases["run+other"] = first_s - phases["dynamo"] - sum(main.values())
        phases.update({k: v for k, v in recorded.items() if k in BACKGROUND_PHASES})
    else:
        phases["backend"] = user
        phases["run"] = first_s - inner
    return {k: round(v, 3) for k, v in phases.items()}


def dynamo_metrics(min_s: float = 0.005) -> dict[str, float]:
    """Every timer torch keeps for the first call (`compilation_time_metrics`: guard building, bytecode
    tracing, the AOTAutograd cache, ...), summed, in seconds: where a backend's Dynamo phase differs, this
    says which part does. Timers nest, so they do not add up."""
    metrics = torch._dynamo.utils.compilation_time_metrics
    totals = {name: round(sum(values), 3) for name, values in metrics.items() if sum(values) >= min_s}
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


# ---- new processes -------------------------------------------------------------------------------------

def _fresh_cache_env(tag: str) -> tuple[str, dict[str, str]]:
    root = tempfile.mkdtemp(prefix=f"fuse_all_bench_{tag}_")
    env = {"FUSE_ALL_CACHE_DIR": os.path.join(root, "fuse_all"),
           "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor"),
           "TRITON_CACHE_DIR": os.path.join(root, "triton")}
    env.update({name: "0" for name in _DISABLE})   # the parent may have set them for its own cells
    return root, env


def run_child(name: str, device: str, backend: str, env: dict[str, str], args) -> dict:
    """`bench.py --child`: one first call of `name` with `backend` in a new process."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench.py")
    cmd = [sys.executable, script, "--child", "--child-backend", backend, "--device", device, "--workloads", name]
    if args.no_prime:
        cmd.append("--no-prime")
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    try:
        proc = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=args.backend_timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"child took longer than {args.backend_timeout} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(CHILD_TAG):
            return json.loads(line[len(CHILD_TAG):])
    tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"error": f"child exited {proc.returncode}: {tail[:160]}"}


def cold_and_warm(name: str, device: str, args, backends=PROCESS_BACKENDS) -> dict:
    """{backend: {"cold": cell, "warm": cell}}: two new processes per backend on fresh cache folders."""
    out = {}
    for backend in backends:
        root, env = _fresh_cache_env(f"{name}_{backend}")
        try:
            cold = run_child(name, device, backend, env, args)
            warm = run_child(name, device, backend, env, args) if "error" not in cold else \
                {"error": "cold run failed"}
        finally:
            shutil.rmtree(root, ignore_errors=True)
        out[backend] = {"cold": cold, "warm": warm}
        for kind, cell in (("cold", cold), ("warm", warm)):
            text = f"FAILED: {cell['error']}" if "error" in cell else \
                f"first call {cell['first_s']:8.3f} s (cpu {cell.get('cpu_s', float('nan')):.3f} s)"
            if "phases" in cell:
                text += "   " + phases_text(cell["phases"])
            print(f"   {backend + ' ' + kind + ' (new process)':<32} {text}", flush=True)
    return out


def child_main(name: str, device: str, backend: str, prime: bool) -> None:
    """The child: build, prime, trace once with aot_eager, then time `backend`'s first call."""
    from env import register_fuse_all
    from measure import fuse_all_summary, prime_backends, trace_warmup
    from timing import first_call
    from workloads import build
    fuse_all = backend == "fuse_all"
    if fuse_all:
        problem = register_fuse_all()
        if problem:
            print(CHILD_TAG + json.dumps({"error": problem}), flush=True)
            return
    if prime:
        prime_backends(device, [backend], keep_caches=True)
    inst = build(name, device)
    trace_warmup(inst, device)          # as in the parent, so cold and warm differ only in the caches
    if fuse_all:
        import fuse_all as fa
        fa.reset()
    compiled = torch.compile(inst.target, backend=backend)
    start_first_call()
    cpu = cpu_seconds()
    seconds, _ = first_call(lambda: inst.step(compiled), device)
    cell = {"first_s": seconds, "cpu_s": round(cpu_seconds() - cpu, 3), "phases": first_call_phases(seconds, fuse_all),
            "dynamo_metrics": dynamo_metrics()}
    if fuse_all:
        cell["fuse_all"] = fuse_all_summary()
        cell["phase_counts"] = _compile_timing().counts()   # e.g. how many Triton variants a warm start loads
    print(CHILD_TAG + json.dumps(cell), flush=True)


def phases_text(phases: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f}" for k, v in phases.items() if abs(v) >= 0.0005)


# ---- tables ---------------------------------------------------------------------------------------------

def _f(value) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, (int, float)) else str(value)


def phase_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """fuse_all's first call (the in-process cold cell) split into phases, seconds."""
    head = ["workload", "first call s", *FUSE_ALL_PHASES, *BACKGROUND_PHASES]
    body = []
    for r in rows:
        cell = r.get("cells", {}).get("fuse_all", {})
        phases = cell.get("phases")
        if not phases:
            continue
        body.append([r["workload"], _f(cell.get("first_s"))] + [_f(phases.get(k, 0.0)) for k in head[2:]])
    return head, body


def process_table(rows: list[dict]) -> tuple[list[str], list[list[str]]]:
    """First calls in new processes, cold and warm, and the overhead ratio of issue 12."""
    head = ["workload"] + [f"{b} {k} s" for b in PROCESS_BACKENDS for k in ("cold", "warm")] + \
        ["cold overhead fuse_all/inductor", "warm fuse_all − inductor s"] + \
        [f"{b} {k} cpu s" for b in PROCESS_BACKENDS for k in ("cold", "warm")]
    body = []
    for r in rows:
        procs = r.get("processes")
        if not procs:
            continue
        value = {(b, k): procs.get(b, {}).get(k, {}).get("first_s") for b in PROCESS_BACKENDS
                 for k in ("cold", "warm")}
        line = [r["workload"]]
        for b in PROCESS_BACKENDS:
            for k in ("cold", "warm"):
                cell = procs.get(b, {}).get(k, {})
                line.append("FAILED" if "error" in cell else _f(value[(b, k)]))
        floor, ind, fa = value[("aot_eager", "cold")], value[("inductor", "cold")], value[("fuse_all", "cold")]
        ratio = "–"
        if None not in (floor, ind, fa) and ind - floor > 0:
            ratio = f"{(fa - floor) / (ind - floor):.2f}×"
        wi, wf = value[("inductor", "warm")], value[("fuse_all", "warm")]
        line += [ratio, _f(wf - wi) if None not in (wi, wf) else "–"]
        line += [_f(procs.get(b, {}).get(k, {}).get("cpu_s")) for b in PROCESS_BACKENDS for k in ("cold", "warm")]
        body.append(line)
    return head, body


# ---- command line: the new-process columns alone, repeated ---------------------------------------------------

def _median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def median_cells(cells: list[dict]) -> dict:
    """The median first call, CPU seconds and phases (and Dynamo's timers) of repeated cells; failed runs
    are counted, not averaged."""
    good = [c for c in cells if "error" not in c]
    out: dict = {"runs": len(cells), "failed": len(cells) - len(good)}
    if not good:
        out["error"] = cells[-1].get("error") if cells else "no runs"
        return out
    out["first_s"] = round(_median([c["first_s"] for c in good]), 3)
    out["cpu_s"] = round(_median([c.get("cpu_s") for c in good]), 3)
    for field in ("phases", "dynamo_metrics"):
        names = dict.fromkeys(k for c in good for k in c.get(field, {}))
        out[field] = {k: round(_median([c.get(field, {}).get(k, 0.0) for c in good]), 3) for k in names}
    return out


def main(argv=None) -> int:
    """`python bench/compile_columns.py --device cpu --workloads bert_1x12 --repeat 3`: cold and warm first
    calls in new processes, `--repeat` times (each repeat on fresh cache folders), medians printed as JSON."""
    import argparse
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--workloads", required=True, help="comma-separated workload names (bench/workloads.py)")
    p.add_argument("--backends", default=",".join(PROCESS_BACKENDS),
                   help=f"comma-separated subset of {','.join(PROCESS_BACKENDS)}")
    p.add_argument("--repeat", type=int, default=3, help="cold+warm pairs per backend (medians are reported)")
    p.add_argument("--no-prime", action="store_true", help="time the first compile of the process (imports)")
    p.add_argument("--threads", type=int)
    p.add_argument("--backend-timeout", type=float, default=300.0)
    p.add_argument("--json", help="write every run and the medians to this file")
    args = p.parse_args(argv)
    backends = tuple(args.backends.split(","))
    unknown = set(backends) - set(PROCESS_BACKENDS)
    if unknown:
        p.error(f"unknown backends {sorted(unknown)}")
    results = {}
    for name in args.workloads.split(","):
        runs = {b: {"cold": [], "warm": []} for b in backends}
        for i in range(args.repeat):
            print(f"== {name} ({args.device}) run {i + 1}/{args.repeat}", flush=True)
            for backend, cells in cold_and_warm(name, args.device, args, backends).items():
                for kind in ("cold", "warm"):
                    runs[backend][kind].append(cells[kind])
        medians = {b: {k: median_cells(runs[b][k]) for k in ("cold", "warm")} for b in backends}
        results[name] = {"runs": runs, "medians": medians}
        print(f"== {name}: medians of {args.repeat}", flush=True)
        print(json.dumps(medians, indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from env import add_repo_paths
    add_repo_paths()
    sys.exit(main())
