"""CPU ms per call of several backends on several workloads, one process per (row, round, backend).

Runs `cpu_time_per_call.py` in new processes, the backends alternated inside each round and the rounds of
one row back to back (so the backends of a row see the same load), and prints a markdown table: CPU ms
per call (user + sys) of every round, and the ratios of the medians. The step count of a row comes from a
short eager calibration so that each measured process spends about `--target-s` CPU seconds in its calls.

    python bench/cpu_time_rounds.py cpu_models cpu_micro --rounds 3 --threads 1 --json rounds.json

A backend written `NAME@TREE` runs NAME with the fuse-all sources of the checkout TREE first on PYTHONPATH:
a before/after comparison in the same rounds (`--backends inductor,fuse_all,fuse_all@/tmp/base`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

LINE = re.compile(r"wall (?P<wall>[\d.]+) ms, user (?P<user>[\d.]+) ms, sys (?P<sys>[\d.]+) ms, "
                  r"minor faults (?P<faults>\d+) per call, load average (?P<load>[\d.]+)")
HERE = Path(__file__).parent


SOURCE_DIRS = ("src", "packages/capture/src", "packages/ir/src", "packages/codegen-cpp/src",
               "packages/codegen-triton/src", "packages/runtime-cudagraphs/src", "packages/lsp/src")


def _backend_env(backend: str) -> tuple[str, dict | None]:
    """`NAME@TREE` -> (NAME, an environment with TREE's sources first on PYTHONPATH); else (backend, None)."""
    name, _, tree = backend.partition("@")
    if not tree:
        return backend, None
    paths = [str(Path(tree).resolve() / d) for d in SOURCE_DIRS]
    return name, dict(os.environ, PYTHONPATH=os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))


def measure(workload: str, backend: str, steps: int, threads: int, warmup: int, timeout: float) -> dict:
    name, env = _backend_env(backend)
    cmd = [sys.executable, str(HERE / "cpu_time_per_call.py"), workload, name, "--steps", str(steps),
           "--threads", str(threads), "--warmup", str(warmup)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    found = LINE.search(done.stdout)
    if done.returncode or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {done.returncode}: {tail[0][:200]}"}
    values = {k: float(v) for k, v in found.groupdict().items()}
    values["cpu"] = values["user"] + values["sys"]
    return values


def steps_for(workload: str, threads: int, target_s: float, timeout: float) -> int:
    probe = measure(workload, "eager", 3, threads, 1, timeout)
    if "error" in probe:
        raise SystemExit(f"{workload}: eager calibration failed: {probe['error']}")
    return int(min(50000, max(3, target_s * 1e3 / max(probe["cpu"], 1e-3))))


def table(results: dict, backends: list[str]) -> str:
    head = "| row | steps | " + " | ".join(f"{b} CPU ms (rounds)" for b in backends)
    extra = []
    if "fuse_all" in backends:
        extra = [f"fuse_all / {b}" for b in backends if b != "fuse_all"]
    lines = [head + "".join(f" | {e}" for e in extra) + " |",
             "|" + "---|" * (2 + len(backends) + len(extra))]
    for row, r in results.items():
        cells, medians = [], {}
        for b in backends:
            runs = r["runs"][b]
            ok = [x["cpu"] for x in runs if "error" not in x]
            if ok:
                medians[b] = statistics.median(ok)
            cells.append(" / ".join(f"{x['cpu']:.3g}" if "error" not in x else "error" for x in runs))
        ratio_cells = []
        for e in extra:
            other = e.split(" / ")[1]
            ratio_cells.append(f"{medians['fuse_all'] / medians[other]:.2f}"
                               if "fuse_all" in medians and other in medians else "–")
        lines.append(f"| {row} | {r['steps']} | " + " | ".join(cells) + "".join(f" | {c}" for c in ratio_cells)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    import workloads
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workloads", nargs="+", help="workload names or named sets (cpu_models, cpu_micro, ...)")
    p.add_argument("--backends", default="eager,inductor,fuse_all")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--target-s", type=float, default=2.0, help="CPU seconds of measured calls per process")
    p.add_argument("--steps", type=int, help="fixed step count for every row (no calibration)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per process (Inductor compiles inside)")
    p.add_argument("--json", help="write every round's numbers here")
    a = p.parse_args()
    backends = a.backends.split(",")
    results = {}
    for row in workloads.expand(a.workloads):
        steps = a.steps or steps_for(row, a.threads, a.target_s, a.timeout)
        results[row] = {"steps": steps, "runs": {b: [] for b in backends}}
        for _ in range(a.rounds):
            for b in backends:
                got = measure(row, b, steps, a.threads, a.warmup, a.timeout)
                results[row]["runs"][b].append(got)
                shown = got.get("error") or f"{got['cpu']:.4g} ms CPU (load {got['load']:.1f})"
                print(f"{row} {b}: {shown}", flush=True)
        if a.json:
            Path(a.json).write_text(json.dumps({"threads": a.threads, "rounds": a.rounds, "results": results,
                                                "load_at_end": os.getloadavg()}, indent=1))
    print(table(results, backends))


if __name__ == "__main__":
    main()
