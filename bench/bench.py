"""fuse_all against eager, Inductor (and on CUDA: reduce-overhead modes and torch's cudagraphs), side by side.

    python bench/bench.py --device cpu                       # the CPU set (issue 3)
    python bench/bench.py --device cuda --json out.json      # the CUDA set (issues 4/5), names as in anchors
    python bench/bench.py --device cuda --workloads bert_1x12,resnet50_1x3x224x224 --markdown
    python bench/bench.py --device cuda --workloads tiling       # transposes, permutes, column reductions
    python bench/bench.py --device cuda --skip-inductor-compile-time --budget-s 500
    python bench/bench.py --device cuda --backends aot_eager,fuse_all,fuse_all_ro   # torch's numbers: anchors
    python bench/bench.py --device cuda --workloads ddp_train_resnet50_32x224 --backends eager,inductor,fuse_all
                                                  # torch.compile(DDP(resnet50)), world size 1 over NCCL

Per workload and backend: cold compile time (first call; Inductor with TORCHINDUCTOR_FORCE_DISABLE_CACHES=1,
fuse_all with fresh FUSE_ALL_CACHE_DIR and TRITON_CACHE_DIR; Dynamo reset between backends), steady-state
median, GB/s for memory-bound workloads, a correctness check against eager, aot_eager's first call (the
capture floor), fuse_all's first call split into phases, and cold and warm first calls of aot_eager, Inductor
and fuse_all in new processes (cold: fresh empty cache folders; warm: a second process on them). Runs unattended:
a failing backend prints `FAILED: <one line>` and the run goes on; --json is rewritten after each workload
so a run cut short still leaves its rows. Works from a bare checkout (no pip install): the repository's
source folders go on sys.path and the backend is registered by hand when its entry point is missing.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), required=True)
    p.add_argument("--workloads", help="comma-separated names or sets (cpu, cpu_models, cpu_micro, cuda, tiling; "
                                       "default: the device's set); see workloads.py")
    p.add_argument("--backends", help="comma-separated subset of eager,aot_eager,inductor,inductor_ro,"
                                      "cudagraphs,fuse_all,fuse_all_ro,fuse_all_ma (mode=max-autotune; "
                                      "default: all for the device but fuse_all_ma)")
    p.add_argument("--quick", action="store_true", help="shorter timing loops (numbers are noisier)")
    p.add_argument("--no-interleave", action="store_true",
                   help="report each backend's median from right after its compile, instead of timing all of "
                        "them again in rotating rounds once every backend of the row has compiled")
    p.add_argument("--json", help="write all results to this file (rewritten after every workload)")
    p.add_argument("--markdown", action="store_true", help="print the summary as markdown for bench/RESULTS.md")
    p.add_argument("--skip-inductor-compile-time", action="store_true",
                   help="keep Inductor's caches on and take its cold compile times from bench/anchors-h200.md")
    p.add_argument("--no-warm", action="store_true",
                   help="skip the cold and warm first calls in new processes (two per backend: aot_eager, "
                        "inductor, fuse_all; see compile_columns.py)")
    p.add_argument("--no-prime", action="store_true",
                   help="do not compile a tiny function per backend first (then the first workload's compile "
                        "times include importing each compiler)")
    p.add_argument("--threads", type=int,
                   help="CPU threads for ATen and every OpenMP runtime (OMP_NUM_THREADS); on a shared machine "
                        "1 keeps other processes from stalling OpenMP barriers")
    p.add_argument("--budget-s", type=float,
                   help="start no workload once this many seconds have passed since the start (rows: skipped); "
                        "leave room for the longest workload under the command's time limit")
    p.add_argument("--backend-timeout", type=float, default=300.0,
                   help="seconds one backend may take on one workload (compile + timing), default 300")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)   # a new-process first call
    p.add_argument("--child-backend", default="fuse_all", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    started = time.perf_counter()        # --budget-s counts from here: priming is part of the command's time
    args = parse_args(argv)
    # before torch is imported: Inductor reads this once, when its config module loads
    if not args.skip_inductor_compile_time and not args.child:
        os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)   # fuse_all's and Inductor's OpenMP too; children inherit
    from env import add_repo_paths, describe, register_fuse_all
    add_repo_paths()
    import torch

    import compile_columns
    import measure
    import report
    from workloads import TILING_CPU_SET, TILING_CUDA_SET, WORKLOADS, default_set, expand

    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    names = expand(args.workloads.split(",")) if args.workloads else default_set(args.device)
    if names == ["tiling"]:   # the layouts that need 2-D tiles or column reductions (issues 11 and 17)
        names = TILING_CUDA_SET if args.device == "cuda" else TILING_CPU_SET
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        print(f"unknown workloads {unknown}; known: {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    if args.child:
        if args.threads:
            torch.set_num_threads(args.threads)
        compile_columns.child_main(names[0], args.device, args.child_backend, prime=not args.no_prime)
        return 0

    backends = measure.backends_for(args.device, args.backends.split(",") if args.backends else None)
    keys = [b.key for b in backends]
    fuse_all_problem = register_fuse_all() if any(b.fuse_all for b in backends) else None
    if fuse_all_problem:
        print(f"fuse_all is not usable: {fuse_all_problem}", flush=True)
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), "device": args.device,
            "machine": describe(args.device), "command": "python " + " ".join([sys.argv[0]] + sys.argv[1:]),
            "backends": keys, "skip_inductor_compile_time": args.skip_inductor_compile_time}
    if args.threads:
        torch.set_num_threads(args.threads)
        meta["machine"]["threads"] = args.threads
    if not args.no_prime:
        primed = sorted({b.backend for b in backends if b.backend and b.mode is None
                         and not (b.fuse_all and fuse_all_problem)})
        meta["prime"] = measure.prime_backends(args.device, primed)
    print(report.header(meta, markdown=False), flush=True)

    anchors = report.load_anchors() if args.device == "cuda" else {}   # the anchors are H200 numbers
    rows = []
    for name in names:
        if args.budget_s and time.perf_counter() - started > args.budget_s:
            rows.append({"workload": name, "skipped": True, "error": "time budget", "cells": {}})
            print(f"== {name}: skipped (--budget-s {args.budget_s:.0f} s spent)", flush=True)
        else:
            rows.append(measure.run_workload(name, args.device, backends, args, fuse_all_problem))
        report.apply_anchors(rows[-1], anchors, keys, args.skip_inductor_compile_time)
        if args.json:
            _write_json(args.json, meta, rows)
    meta["total_s"] = round(time.perf_counter() - started, 1)
    if args.json:
        _write_json(args.json, meta, rows)
    print(flush=True)
    print(report.summary(meta, rows, args.markdown), flush=True)
    print(f"\ntotal {meta['total_s']} s", flush=True)
    return 0


def _write_json(path: str, meta: dict, rows: list[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
