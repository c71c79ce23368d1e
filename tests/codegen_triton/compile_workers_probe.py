"""Compile the first N example kernels for sm_90 (no GPU needed) through `compile_only`, as the runtime's
compile threads do, and print what happened as JSON: the compiled kernels' hashes, the entries in Triton's
cache folder, and the worker pool's state. Run without TRITON_INTERPRET (tests/codegen_triton/
test_compile_workers.py runs it with FUSE_ALL_COMPILE_WORKERS=processes and =threads). PROBE_THREADS sets
how many threads compile at once (2; the runtime uses one per core), and the JSON carries this process's CPU
and wall seconds, e.g. a warm start of 16 threads, run twice on the same TRITON_CACHE_DIR and
FUSE_ALL_CACHE_DIR: `PROBE_THREADS=16 python tests/codegen_triton/compile_workers_probe.py 6`."""
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # kernel_examples


def kernel_entries(cache: Path) -> list[str]:
    """Triton's cache entries of compiled kernels (not of the C launchers a worker builds on Triton 3.6)."""
    return sorted(entry.name for entry in cache.iterdir()
                  if not any(f.name.startswith("__triton_launcher") for f in entry.iterdir()))


def main() -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    import kernel_examples as ke
    from triton.backends.compiler import GPUTarget

    from fuse_all_codegen_triton import TritonTarget, compiler
    from fuse_all_ir import load_host_program, render_host_program

    folder = tempfile.mkdtemp(prefix="fuse_all_workers_probe_")
    jobs = []
    for name in list(ke.EXAMPLES)[: int(sys.argv[1])]:
        example = ke.EXAMPLES[name]("cpu")
        module = load_host_program(render_host_program(example.program, TritonTarget()), folder)
        for kernel in example.program.kernels:
            launcher = getattr(module, f"{kernel}_launcher")
            spec = launcher.spec
            jobs.append((launcher.fn, spec, compiler.VariantKey(0, spec["size_type"] == "i64", True,
                                                                 bool(spec["sizes"]))))
    target = GPUTarget("cuda", 90, 32)
    with ThreadPoolExecutor(int(os.environ.get("PROBE_THREADS", "2"))) as pool:
        hashes = list(pool.map(lambda job: compiler.compile_only(*job, target=target).hash, jobs))
    workers = compiler._WORKERS
    print(json.dumps({"jobs": len(jobs), "hashes": sorted(hashes),
                      "entries": kernel_entries(Path(os.environ["TRITON_CACHE_DIR"])),
                      "workers": len(workers._workers) if workers else 0,
                      "worker_jobs": workers.jobs_run if workers else 0,
                      "broken": workers.broken if workers else None,
                      "cpu_s": round(time.process_time() - cpu, 3), "wall_s": round(time.perf_counter() - wall, 3)}))


if __name__ == "__main__":
    main()
