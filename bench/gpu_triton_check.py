"""GPU check of the Triton codegen (packages/codegen-triton), unattended, < 3 minutes on one H200.

    python bench/gpu_triton_check.py            # everything
    python bench/gpu_triton_check.py --quick    # examples + headline numbers, shorter timing

1. correctness: every example of tests/kernel_examples/ on CUDA (default, and forced-looped reductions),
   a second call (fast launcher), unaligned and int64-sized arguments (general launch path);
2. bandwidth: cos->sin over 2**28 floats (target >= 4.1 TB/s) and softmax 16384x4096 (target >= 3.7 TB/s),
   GB/s = bytes read + written / do_bench median; eager (and Inductor unless --no-inductor) beside;
3. host overhead per call for cos->sin on 1e4 floats: our `call()` and bare launch vs eager's two launches;
4. compile time: the 20-kernel example, cold (fresh Triton cache) and warm (same cache, new module).
Self-contained: puts packages/*/src and tests/ on sys.path. Writes $OUT/gpu_triton_check.json when $OUT is set.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --dry-run-cpu: exercise this script's logic on a GPU-less machine through Triton's interpreter
DRY = "--dry-run-cpu" in sys.argv
if DRY:
    os.environ["TRITON_INTERPRET"] = "1"
DEVICE = "cpu" if DRY else "cuda"
sys.path[:0] = sorted(glob.glob(os.path.join(ROOT, "packages", "*", "src"))) + [os.path.join(ROOT, "tests")]
# Fresh caches for this run (cold compile numbers); the autotune cache too.
_CACHE = tempfile.mkdtemp(prefix="fa_triton_check_")
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_CACHE, "triton"))
os.environ.setdefault("FUSE_ALL_CACHE_DIR", os.path.join(_CACHE, "fuse_all"))

import sympy  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402

import kernel_examples as ke  # noqa: E402
from fuse_all_codegen_triton import TritonTarget, wait_compiled  # noqa: E402
from fuse_all_ir import (Compute, Kernel, Load, Loop, Store, load_host_program, render_host_program,  # noqa: E402
                         size_symbol, xvar)

RESULTS: dict = {"versions": {}, "examples": {}, "extra": {}, "bench": {}, "overhead": {}, "compile": {}}
HOST_DIR = os.path.join(_CACHE, "host")


def sync() -> None:
    if not DRY:
        torch.cuda.synchronize()


def log(msg: str) -> None:
    print(msg, flush=True)


def load(program, **options):
    return load_host_program(render_host_program(program, TritonTarget(**options)), HOST_DIR)


# ---- 1. correctness ----------------------------------------------------------------------------------

def check_examples() -> None:
    for name, make in ke.EXAMPLES.items():
        example = make(DEVICE)
        variants = [("default", {})]
        if any(k.reduction for k in example.program.kernels.values()):
            variants.append(("looped", {"force_looped": True, "rblock": 64}))
        for label, options in variants:
            key = f"{name}/{label}"
            try:
                module = load(example.program, **options)
                for call in range(2):   # the second call runs the fast launcher
                    outputs = module.call(list(example.inputs))
                    sync()
                    ke.assert_outputs_match(outputs, example.expected(example.inputs), example)
                RESULTS["examples"][key] = "ok"
                log(f"ok    {key}")
            except Exception as e:  # noqa: BLE001 - reported, run goes on
                RESULTS["examples"][key] = f"FAIL {type(e).__name__}: {str(e)[:1500]}"
                log(f"FAIL  {key}: {type(e).__name__}: {str(e)[:1500]}")
                traceback.print_exc(limit=4)


def pointwise_program(name, n, op, dtype="float32", symbolic=False):
    s0 = size_symbol("s0")
    size = s0 if symbolic else sympy.Integer(n)
    body = [Load("a", "arg0", xvar(0), dtype)]
    last = "a"
    for i, o in enumerate(op):
        body.append(Compute(f"v{i}", o, (last,), "bool" if o == "logical_not" else dtype))
        last = f"v{i}"
    body.append(Store("buf0", xvar(0), last))
    out_dtype = "bool" if op[-1] == "logical_not" else dtype
    k = Kernel("kernel_0", (size,), (), [Loop(False, body)], ("arg0",), ("buf0",), (s0,) if symbolic else ())
    return ke.program(name, DEVICE, {"arg0": ke.spec(dtype, [size])}, {"buf0": ke.spec(out_dtype, [size])}, [k],
                      size_symbols={s0: "arg0.size(0)"} if symbolic else None,
                      size_hints={s0: 10_000} if symbolic else None)


def check_extra() -> None:
    """Paths the examples do not take: unaligned views, sizes that need int64 indexing."""
    cases = []
    x = ke.nonzero_randn(100_003, device=DEVICE)
    cases.append(("cos_sin_unaligned_view", pointwise_program("u", 0, ["cos", "sin"], symbolic=True),
                  [x[1:]], lambda t: torch.sin(torch.cos(t))))
    cases.append(("cos_sin_size_div16", pointwise_program("d", 0, ["cos", "sin"], symbolic=True),
                  [x[:65536]], lambda t: torch.sin(torch.cos(t))))
    big = 2**31 + 48
    try:
        if DRY:
            raise torch.OutOfMemoryError("dry run")
        b = torch.rand(big, device="cuda") > 0.5
        cases.append(("logical_not_2e31_concrete_int64", pointwise_program("b", big, ["logical_not"], "bool"),
                      [b], lambda t: ~t))
        cases.append(("logical_not_2e31_symbolic_guard", pointwise_program("bs", 0, ["logical_not"], "bool", True),
                      [b], lambda t: ~t))
    except torch.OutOfMemoryError:
        log("skip  int64 cases: out of memory")
    modules = {}
    for name, program, inputs, ref in cases:
        try:
            module = modules.setdefault(program.graph_id, load(program))
            out = module.call(list(inputs))[0]
            sync()
            torch.testing.assert_close(out, ref(inputs[0]), rtol=1e-5, atol=1e-5)
            RESULTS["extra"][name] = "ok"
            log(f"ok    {name}")
        except Exception as e:  # noqa: BLE001
            RESULTS["extra"][name] = f"FAIL {type(e).__name__}: {str(e)[:800]}"
            log(f"FAIL  {name}: {type(e).__name__}: {str(e)[:800]}")
            traceback.print_exc(limit=4)
    # the same module again with a size that is not a multiple of 16: the fast launcher hands over to the
    # general path, which compiles the variant without the size specialisation
    try:
        module = modules.get("d")
        if module is not None:
            y = x[: 65536 + 5]
            out = module.call([y])[0]
            torch.testing.assert_close(out, torch.sin(torch.cos(y)), rtol=1e-5, atol=1e-5)
            RESULTS["extra"]["cos_sin_second_size"] = "ok"
            log("ok    cos_sin_second_size")
    except Exception as e:  # noqa: BLE001
        RESULTS["extra"]["cos_sin_second_size"] = f"FAIL {e}"
        log(f"FAIL  cos_sin_second_size: {e}")


# ---- 2. bandwidth ------------------------------------------------------------------------------------

def bench(fn, quick: bool) -> float:
    from triton.testing import do_bench
    return do_bench(fn, warmup=10 if quick else 25, rep=50 if quick else 200, return_mode="median")


def launcher(module):
    return module.kernel_0_launcher


def bench_bandwidth(quick: bool, inductor: bool) -> None:
    n = 2**28
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    module = load(pointwise_program("cos_sin_2e28", n, ["cos", "sin"]))
    torch.testing.assert_close(module.call([x])[0], torch.sin(torch.cos(x)))
    rows = {"fuse_all kernel": lambda: launcher(module).run(x, out), "fuse_all call": lambda: module.call([x]),
            "eager": lambda: torch.sin(torch.cos(x))}
    if inductor:
        compiled = torch.compile(lambda t: torch.sin(torch.cos(t)))
        compiled(x)
        rows["inductor"] = lambda: compiled(x)
    report("cos_sin_2e28", rows, 2 * 4 * n, 4100, quick, launcher(module))

    rows_, cols = 16384, 4096
    program = ke.program("softmax_big", "cuda", {"arg0": ke.spec("float32", [rows_, cols])},
                         {"buf0": ke.spec("float32", [rows_, cols])}, [ke.softmax_kernel(rows_, cols, "float32")])
    module = load(program)
    s = ke.nonzero_randn(rows_, cols, device="cuda", scale=4)
    so = torch.empty_like(s)
    torch.testing.assert_close(module.call([s])[0], torch.softmax(s, -1))
    rows = {"fuse_all kernel": lambda: launcher(module).run(s, so), "fuse_all call": lambda: module.call([s]),
            "eager": lambda: torch.softmax(s, -1)}
    if inductor:
        compiled = torch.compile(lambda t: torch.softmax(t, -1))
        compiled(s)
        rows["inductor"] = lambda: compiled(s)
    report("softmax_16384x4096", rows, 2 * 4 * rows_ * cols, 3700, quick, launcher(module))


def report(name, rows, nbytes, target_gbs, quick, kernel) -> None:
    entry = {"chosen": kernel.chosen, "candidates": kernel.configs, "timings_ms": kernel.timings_ms}
    for label, fn in rows.items():
        try:
            ms = bench(fn, quick)
            entry[label] = {"ms": round(ms, 5), "GB/s": round(nbytes / ms / 1e6, 1)}
        except Exception as e:  # noqa: BLE001
            entry[label] = f"FAIL {type(e).__name__}: {e}"
    RESULTS["bench"][name] = entry
    ours = entry.get("fuse_all kernel", {})
    verdict = "MEETS" if isinstance(ours, dict) and ours.get("GB/s", 0) >= target_gbs else "BELOW"
    log(f"{name}: {json.dumps(entry)}  [{verdict} target {target_gbs} GB/s]")


# ---- 3. host overhead ---------------------------------------------------------------------------------

def host_overhead(quick: bool) -> None:
    n = 10_000
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    module = load(pointwise_program("cos_sin_1e4", n, ["cos", "sin"]))
    module.call([x])
    run = launcher(module).run
    calls = 2000 if quick else 10000

    def per_call(fn) -> float:
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - start) / calls * 1e6)
        return best

    eager = per_call(lambda: torch.sin(torch.cos(x)))
    ours_call = per_call(lambda: module.call([x]))
    ours_launch = per_call(lambda: run(x, out))
    os.environ["FUSE_ALL_TRITON_DIRECT_LAUNCH"] = "0"   # the same kernel through Triton's launcher object
    plain = load(pointwise_program("cos_sin_1e4", n, ["cos", "sin"]))
    plain.call([x])
    os.environ.pop("FUSE_ALL_TRITON_DIRECT_LAUNCH")
    plain_launch = per_call(lambda: launcher(plain).run(x, out))
    jit_launch = None
    try:   # triton's own fn[grid](...) path, for reference
        k = launcher(module)
        cfg = k.chosen
        jit_launch = per_call(lambda: k.fn[(10,)](x, out, XBLOCK=cfg["XBLOCK"], num_warps=cfg["num_warps"]))
    except Exception as e:  # noqa: BLE001
        log(f"triton jit launch not measured: {e}")
    RESULTS["overhead"] = {"eager_us": round(eager, 2), "fuse_all_call_us": round(ours_call, 2),
                           "fuse_all_launch_us": round(ours_launch, 2),
                           "launch_via_triton_launcher_us": round(plain_launch, 2),
                           "triton_jit_launch_us": jit_launch and round(jit_launch, 2),
                           "fast_launcher": getattr(launcher(module), "launcher_source", None)}
    log(f"host overhead per call (1e4 floats): eager {eager:.2f} us, fuse_all call() {ours_call:.2f} us, "
        f"bare launch {ours_launch:.2f} us (through Triton's launcher object {plain_launch:.2f} us, "
        f"triton fn[grid] {jit_launch} us)  [{'MEETS' if ours_call < eager else 'BELOW'}: call < eager]")
    log("fast launcher:\n" + str(RESULTS["overhead"]["fast_launcher"]))


# ---- 4. compile time ----------------------------------------------------------------------------------

def compile_time() -> None:
    example = ke.EXAMPLES["twenty_kernels"](DEVICE)
    for label in ("cold", "warm"):
        source = render_host_program(example.program, TritonTarget())
        start = time.perf_counter()
        module = load_host_program(source + f"\n# {label}\n", HOST_DIR)   # a new module each time
        wait_compiled(module)
        seconds = time.perf_counter() - start
        module.call(list(example.inputs))
        sync()
        first_call = time.perf_counter() - start
        RESULTS["compile"][label] = {"kernels": len(example.program.kernels), "compile_s": round(seconds, 3),
                                     "through_first_call_s": round(first_call, 3)}
        log(f"compile {label}: {len(example.program.kernels)} kernels in {seconds:.3f} s "
            f"(through first call {first_call:.3f} s)")
    start = time.perf_counter()
    source = render_host_program(example.program, TritonTarget())
    RESULTS["compile"]["render_s"] = round(time.perf_counter() - start, 4)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--only", help="comma list of: examples,extra,bandwidth,overhead,compile")
    parser.add_argument("--dry-run-cpu", action="store_true", help="interpreter, CPU tensors, no benchmarks")
    args = parser.parse_args()
    steps = (args.only or "compile,examples,extra,bandwidth,overhead").split(",")
    if DRY:
        steps = [s for s in steps if s not in ("bandwidth", "overhead")]
    RESULTS["versions"] = {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0],
                           "device": "cpu (interpreter)" if DRY else torch.cuda.get_device_name(0)}
    log(json.dumps(RESULTS["versions"]))
    begin = time.perf_counter()
    for step, fn in (("compile", compile_time), ("examples", check_examples), ("extra", check_extra),
                     ("bandwidth", lambda: bench_bandwidth(args.quick, not args.no_inductor)),
                     ("overhead", lambda: host_overhead(args.quick))):
        if step not in steps:
            continue
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            RESULTS[f"{step}_error"] = f"{type(e).__name__}: {e}"
            log(f"FAIL  step {step}: {type(e).__name__}: {e}")
            traceback.print_exc()
        log(f"-- {step} took {time.perf_counter() - t0:.1f} s")
    failures = [k for k, v in {**RESULTS["examples"], **RESULTS["extra"]}.items() if v != "ok"]
    RESULTS["failures"] = failures
    RESULTS["total_s"] = round(time.perf_counter() - begin, 1)
    log(f"SUMMARY: {len(RESULTS['examples']) + len(RESULTS['extra']) - len(failures)} passed, "
        f"{len(failures)} failed; total {RESULTS['total_s']} s")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_triton_check.json"), "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
