"""Compile every kernel of every example with the real Triton compiler for an sm_90 target, on this
GPU-less machine (Triton's compiler and ptxas need no GPU; only loading does). The interpreter accepts
code the compiler rejects (types, shapes, constexpr rules), so this is what catches those here.

Run as a script (the test runs it in a subprocess, without TRITON_INTERPRET):
    python tests/codegen_triton/compile_offline.py [--threads N] [names...]
Prints one line per kernel and a JSON summary line; exit status 1 if any kernel failed to compile.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # kernel_examples


def main() -> int:
    assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), "compile_offline needs the real compiler"
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--quick", action="store_true", help="default variants only (no looped, no int64 twins)")
    parser.add_argument("names", nargs="*")
    opts = parser.parse_args()

    import kernel_examples as ke
    from triton.backends.compiler import GPUTarget

    from fuse_all_codegen_triton import TritonTarget
    from fuse_all_codegen_triton.compiler import VariantKey, compile_only
    from fuse_all_ir import load_host_program, render_host_program

    target = GPUTarget("cuda", opts.arch, 32)
    folder = tempfile.mkdtemp(prefix="fuse_all_offline_")
    jobs = []   # (label, fn, spec, key)
    for name in opts.names or list(ke.EXAMPLES):
        example = ke.EXAMPLES[name]("cpu")
        for variant, options in (("", {}), ("looped", {"force_looped": True, "rblock": 16})):
            if variant and opts.quick:
                continue
            if variant and not any(k.reduction for k in example.program.kernels.values()):
                continue
            module = load_host_program(render_host_program(example.program, TritonTarget(**options)), folder)
            for kname in example.program.kernels:
                launcher = getattr(module, f"{kname}_launcher")
                spec = launcher.spec
                keys = [VariantKey(0, spec["size_type"] == "i64", True, bool(spec["sizes"]))]
                if launcher.fn_int64 is not None and not opts.quick:
                    keys.append(VariantKey(0, True, False, False))
                for key in keys:
                    jobs.append((f"{name}{'/' + variant if variant else ''}:{kname}:{key}",
                                 launcher._fn_for(key.int64), spec, key))

    def build(job):
        label, fn, spec, key = job
        start = time.perf_counter()
        try:
            compile_only(fn, spec, key, target=target)
            return label, None, time.perf_counter() - start
        except Exception as e:  # noqa: BLE001 - reported
            return label, f"{type(e).__name__}: {e}", time.perf_counter() - start

    start = time.perf_counter()
    with ThreadPoolExecutor(opts.threads) as pool:
        results = list(pool.map(build, jobs))
    wall = time.perf_counter() - start
    failed = [(label, err) for label, err, _ in results if err]
    for label, err, seconds in results:
        print(f"{'FAIL' if err else 'ok  '} {seconds:6.2f}s {label}" + (f"\n      {err[:2000]}" if err else ""))
    print(json.dumps({"kernels": len(results), "failed": len(failed), "wall_s": round(wall, 2),
                      "sum_s": round(sum(r[2] for r in results), 2), "threads": opts.threads}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
