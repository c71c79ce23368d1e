"""GPU check of three Triton-codegen regressions seen on the H200, unattended, < 4 minutes:

1. bert_32x128 (BertModel(BertConfig()) eval, 32x128 inputs) used to crash (out-of-bounds load from a
   mis-parenthesised FloorDiv index); checks it runs and matches eager;
2. autotuned (reduction) kernels used to fall back to triton's launcher ("fast Triton launch unavailable");
   counts that warning and prints each kernel's launcher and autotune timings;
3. add_layernorm_gelu 4096x768 and cos->sin 2**28: fuse_all vs Inductor (triton.testing.do_bench), plus a
   sweep of launch configs of our kernel (to tune configs.py).

    source bench/gpu_env.sh; python bench/gpu_triton_regressions.py [--no-bert-inductor] [--no-sweep]
    python bench/gpu_triton_regressions.py --cpu     # logic check under TRITON_INTERPRET=1, tiny sizes
Writes $OUT/gpu_triton_regressions.json when $OUT is set.
"""
from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
import traceback

CPU = "--cpu" in sys.argv
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402

import fuse_all  # noqa: E402

DEV = "cpu" if CPU else "cuda"
RESULTS: dict = {}
T0 = time.time()


class _Count(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


COUNT = _Count()
logging.getLogger("fuse_all_codegen_triton").addHandler(COUNT)
logging.getLogger("fuse_all_codegen_triton").setLevel(logging.DEBUG)


def bench(fn) -> float:
    if CPU:
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def kernels():
    from fuse_all_codegen_triton import TritonKernel
    found = []
    for o in gc.get_objects():
        try:
            if type(o) is TritonKernel:
                found.append(o)
        except ReferenceError:   # dead weak proxies
            pass
    return found


def describe(ks) -> list:
    out = []
    for k in ks:
        run = getattr(k.run, "__name__", str(k.run))
        row = {"name": k.name, "kind": k.spec.get("kind"), "launcher": run, "chosen": k.chosen,
               "configs": len(k.configs), "timings_ms": k.timings_ms}
        out.append(row)
        print(f"   {k.name:10s} {row['kind']:11s} launcher={run:12s} chosen={k.chosen} timings={k.timings_ms}")
    return out


def capture_args(k, call):
    """Run `call` once with k.run wrapped: the argument tuple of k's launch."""
    seen = []
    orig = k.run

    def spy(*a):
        seen.append(a)
        return orig(*a)
    k.run = spy
    try:
        call()
    finally:
        k.run = orig
    return seen[0] if seen else None


def sweep(k, args, configs, nbytes=None) -> list:
    """do_bench of k's kernel through triton's JIT for each (XBLOCK, RBLOCK or None, num_warps)."""
    rows = []
    n_ptr = k.n_ptr
    xnumel = k._xnumel(*args[n_ptr:])
    for xb, rb, w in configs:
        opts = {"XBLOCK": xb, "num_warps": w}
        if rb is not None:
            opts["RBLOCK"] = rb
        if CPU:
            opts.pop("num_warps")
        grid = ((xnumel + xb - 1) // xb,)
        try:
            ms = bench(lambda: k.fn[grid](*args, **opts))
            rows.append({"XBLOCK": xb, "RBLOCK": rb, "num_warps": w, "ms": ms,
                         "GBps": nbytes / ms / 1e6 if nbytes else None})
            print(f"   sweep XBLOCK={xb:5d} RBLOCK={rb} warps={w:2d}: {ms * 1e3:8.2f} us"
                  + (f"  {nbytes / ms / 1e6:7.0f} GB/s" if nbytes else ""))
        except Exception as e:  # noqa: BLE001
            print(f"   sweep {xb},{rb},{w}: {type(e).__name__}: {str(e)[:200]}")
    return rows


def compare(name, fn, inputs, nbytes=None, inductor=True, sweep_configs=None, check=None):
    print(f"== {name}  (t={time.time() - T0:.0f}s)", flush=True)
    row: dict = {}
    RESULTS[name] = row
    before = {id(k) for k in kernels()}
    try:
        with torch.no_grad():
            ref = fn(*inputs)
            t = time.time()
            compiled = torch.compile(fn, backend="fuse_all", options={"codegen": "triton", "fallback": False})
            out = compiled(*inputs)
            if not CPU:
                torch.cuda.synchronize()
            row["first_call_s"] = time.time() - t
            diff = check(out, ref) if check else (out - ref).abs().max().item()
            row["max_abs_diff"] = diff
            print(f"   fuse_all first call {row['first_call_s']:.1f}s, max |diff| vs eager {diff:.3g}")
            new = [k for k in kernels() if id(k) not in before]
            row["kernels"] = describe(new)
            row["eager_ms"] = bench(lambda: fn(*inputs))
            row["fuse_all_ms"] = bench(lambda: compiled(*inputs))
            msg = f"   eager {row['eager_ms'] * 1e3:.1f} us, fuse_all {row['fuse_all_ms'] * 1e3:.1f} us"
            if nbytes:
                msg += f" ({nbytes / row['fuse_all_ms'] / 1e6:.0f} GB/s)"
            print(msg, flush=True)
            if sweep_configs and new and "--no-sweep" not in sys.argv:
                k = max(new, key=lambda k: len(k.configs))
                args = capture_args(k, lambda: compiled(*inputs))
                if args is not None:
                    row["sweep"] = sweep(k, args, sweep_configs, nbytes)
            if inductor and not CPU:
                t = time.time()
                ind = torch.compile(fn)
                ind(*inputs)
                torch.cuda.synchronize()
                row["inductor_compile_s"] = time.time() - t
                row["inductor_ms"] = bench(lambda: ind(*inputs))
                print(f"   inductor {row['inductor_ms'] * 1e3:.1f} us (compile {row['inductor_compile_s']:.0f}s)"
                      + (f" ({nbytes / row['inductor_ms'] / 1e6:.0f} GB/s)" if nbytes else ""), flush=True)
    except Exception as e:  # noqa: BLE001
        row["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    return row


def main():
    big = not CPU
    # cos -> sin over 2**28 floats
    n = 2**28 if big else 4096
    x = torch.randn(n, device=DEV)
    compare("cos_sin_2e28", lambda a: torch.sin(torch.cos(a)), [x], nbytes=8 * n,
            sweep_configs=[(1024, None, 4), (2048, None, 8), (4096, None, 8), (4096, None, 16),
                           (8192, None, 8), (8192, None, 16), (16384, None, 16)] if big else [(1024, None, 4)])
    del x
    # gelu(layer_norm(x + y)) over 4096 x 768
    rows = 4096 if big else 16
    ln = torch.nn.LayerNorm(768).to(DEV)
    a, b = torch.randn(rows, 768, device=DEV), torch.randn(rows, 768, device=DEV)
    sw = [(xb, 1024, w) for xb in (1, 2, 4, 8, 16) for w in (2, 4, 8, 16) if xb * 1024 // (w * 32) <= 64
          and xb * 1024 // (w * 32) >= 2] if big else [(1, 1024, 4)]
    compare("add_layernorm_gelu_4096x768", lambda p, q: torch.nn.functional.gelu(ln(p + q)), [a, b],
            nbytes=3 * 4 * rows * 768, sweep_configs=sw)
    # BERT 32x128
    try:
        from transformers import BertConfig, BertModel
        cfg = BertConfig() if big else BertConfig(num_hidden_layers=1)
        model = BertModel(cfg).eval().to(DEV)
        B, S = (32, 128) if big else (2, 16)
        ids = torch.randint(0, cfg.vocab_size, (B, S), device=DEV)
        am = torch.ones(B, S, dtype=torch.long, device=DEV)
        tt = torch.zeros(B, S, dtype=torch.long, device=DEV)
        compare("bert_32x128", lambda i, m, t: model(i, m, t).last_hidden_state, [ids, am, tt],
                inductor="--no-bert-inductor" not in sys.argv)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    warnings = [r for r in COUNT.records if "fast Triton launch unavailable" in r]
    RESULTS["fast_launch_warnings"] = warnings
    print(f"== fast-launch warnings: {len(warnings)}")
    for w in warnings[:5]:
        print("   " + w[:2000])
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "gpu_triton_regressions.json"), "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)
    print(f"done in {time.time() - T0:.0f}s")


if __name__ == "__main__":
    main()
