"""Differential fuzzer for fuse_all: random programs, compared against eager and a float64 reference.

    python tests/fuzz/fuzz.py --n 100000 --seed 1 --codegen cpp          # long local run
    python tests/fuzz/fuzz.py --seed 1 --only 4711 --codegen triton -v   # replay one program
    python tests/fuzz/fuzz.py --seed 1 --only 4711 --minimize            # shrink a failing program

Every program is determined by (seed, index). A summary groups the findings by class (kind + normalised
message) with a count and the first reproducer of each. `--backend inductor` / `aot_eager` runs the same
programs through another backend, which calibrates the oracle (neither should report anything).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import time
from collections import defaultdict

os.environ.setdefault("TRITON_INTERPRET", "1")   # before torch/triton are imported (see tests/ops/conftest.py)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import fuzzcheck  # noqa: E402
import fuzzgen  # noqa: E402
import fuzzrun  # noqa: E402

CI_KNOBS = dict(dynamic_frac=0.15, train_frac=0.15, big_frac=0.02, huge_frac=0.0, half_frac=0.0,
                max_numel=fuzzgen.MAX_NUMEL)


def knobs_from(args) -> dict:
    return dict(dynamic_frac=args.dynamic_frac, train_frac=args.train_frac, big_frac=args.big_frac,
                huge_frac=args.huge_frac, half_frac=args.half_frac, max_numel=args.max_numel)


def same_failure(a: fuzzcheck.Finding, b: fuzzcheck.Finding) -> bool:
    if a.kind != b.kind:
        return False
    if a.kind in ("crash", "fallback"):
        return a.detail.split(":")[1:3] == b.detail.split(":")[1:3] or a.key == b.key
    return True


def _uses(expr: str) -> set:
    import re
    return set(re.findall(r"\b[av]\d+\b", expr))


def _live(lines, outputs):
    need = set(outputs)
    kept = []
    for target, expr, tag in reversed(lines):
        if target in need:
            kept.append((target, expr, tag))
            need |= _uses(expr)
    return list(reversed(kept))


def minimize(prog: fuzzgen.Program, finding: fuzzcheck.Finding, codegen: str, backend: str, log=print):
    """Greedy shrinking: fewer outputs, then statements bypassed (replaced by one of their operands) or
    dropped, as long as the same kind of failure remains."""
    def fails(candidate):
        res = fuzzcheck.run_program(candidate, codegen, backend)
        return res.invalid is None and any(same_failure(f, finding) for f in res.findings)

    best = copy.deepcopy(prog)
    best.lines = _live(best.lines, best.outputs)
    for out in list(best.outputs):
        trial = copy.deepcopy(best)
        trial.outputs = [out]
        trial.lines = _live(trial.lines, trial.outputs)
        if len(best.outputs) > 1 and fails(trial):
            best = trial
            break
    changed = True
    while changed:
        changed = False
        for i in reversed(range(len(best.lines))):
            target, expr, _ = best.lines[i]
            for operand in sorted(_uses(expr) - {expr}):   # `vk = vj` is as short as it gets
                trial = copy.deepcopy(best)
                trial.lines[i] = (target, operand, "bypass")
                if operand in trial.exact_names:
                    trial.exact_names.add(target)
                else:
                    trial.exact_names.discard(target)
                trial.lines = _live(trial.lines, trial.outputs)
                if fails(trial):
                    best, changed = trial, True
                    log(f"  shrunk to {len(best.lines)} statements")
                    break
            if changed:
                break
    # drop trivial `vk = vj` aliases by renaming
    return best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=int, default=0, help="first program index")
    p.add_argument("--only", type=int, nargs="*", help="run just these program indices")
    p.add_argument("--codegen", choices=("cpp", "triton", "both"), default="cpp")
    p.add_argument("--backend", default="fuse_all")
    p.add_argument("--strict", action="store_true", help="fallback=False: compile errors raise (for tracebacks)")
    p.add_argument("--minimize", action="store_true", help="shrink each new failure class's first program")
    p.add_argument("--time-limit", type=float, default=0, help="stop after this many seconds")
    p.add_argument("--dynamic-frac", type=float, default=CI_KNOBS["dynamic_frac"])
    p.add_argument("--train-frac", type=float, default=CI_KNOBS["train_frac"])
    p.add_argument("--big-frac", type=float, default=CI_KNOBS["big_frac"])
    p.add_argument("--huge-frac", type=float, default=CI_KNOBS["huge_frac"],
                   help="fraction of programs summing 0.5-5 M elements (issue 9 item 4)")
    p.add_argument("--half-frac", type=float, default=CI_KNOBS["half_frac"],
                   help="fraction of programs made float16/bfloat16 (their main dtype)")
    p.add_argument("--max-numel", type=int, default=CI_KNOBS["max_numel"], help="elements per value (not big programs)")
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--inline", action="store_true", help="run in this process (no isolation; for debugging)")
    p.add_argument("--program-timeout", type=float, default=300)
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    fuzzcheck.quiet()

    codegens = ("cpp", "triton") if args.codegen == "both" else (args.codegen,)
    indices = args.only if args.only else range(args.start, args.start + args.n)
    classes = defaultdict(list)
    invalid, ran, t0 = [], 0, time.perf_counter()
    times = defaultdict(float)
    fallbacks = 0

    def jobs():
        for index in indices:
            if args.time_limit and time.perf_counter() - t0 > args.time_limit:
                return
            prog = fuzzgen.generate(args.seed, index, **knobs_from(args))
            if args.verbose:
                print(prog.describe())
            for codegen in codegens:
                yield prog, codegen, args.backend, args.strict

    if args.inline:
        outcomes = (fuzzrun.run_here(*job) for job in jobs())
        pool = contextlib.nullcontext()
    else:
        pool = fuzzrun.Pool(args.jobs, timeout=args.program_timeout)
        outcomes = None
    with pool:
        for out in outcomes if outcomes is not None else pool.run(jobs()):
            ran += 1
            times[out.codegen] += out.seconds
            if out.invalid:
                invalid.append((out.index, out.invalid))
                if args.verbose:
                    print(f"  invalid program (generator bug): {out.invalid}")
                continue
            for kind, detail, key, trace in out.findings:
                fallbacks += kind == "fallback"
                new = key not in classes
                classes[key].append((out.index, out.codegen))
                print(f"[{out.codegen} seed={args.seed} index={out.index}] {kind}: {detail}", flush=True)
                if trace and (new or args.verbose):
                    print("  " + trace.rstrip().replace("\n", "\n  "), flush=True)
                if new and args.minimize:
                    finding = fuzzcheck.Finding(kind, detail, out.program, out.codegen, trace)
                    small = minimize(out.program, finding, out.codegen, args.backend)
                    print("  minimised reproducer:\n" + "\n".join("    " + ln for ln in small.describe().splitlines()),
                          flush=True)
            if args.verbose:
                print(f"  [{out.index}] {out.codegen}: {out.seconds:.2f} s, {out.kernels} kernels, "
                      f"externs {out.externs}, {len(out.findings)} findings", flush=True)
    elapsed = time.perf_counter() - t0
    print(f"\n{ran} program runs in {elapsed:.1f} s ({', '.join(f'{k}: {v:.1f} s' for k, v in times.items())}); "
          f"{sum(len(v) for v in classes.values())} findings in {len(classes)} classes, {fallbacks} fallbacks, "
          f"{len(invalid)} invalid programs")
    knob_flags = "".join(f" --{name.replace('_', '-')} {value:g}" for name, value in knobs_from(args).items()
                         if value != CI_KNOBS[name])   # the same program needs the same knobs
    for key, where in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        index, codegen = where[0]
        print(f"  {len(where):5d}  {key}\n         first: python tests/fuzz/fuzz.py --seed {args.seed} --only {index} "
              f"--codegen {codegen}{knob_flags} -v")
    for index, why in invalid[:10]:
        print(f"  invalid program {index}: {why}")
    return 1 if classes else 0


if __name__ == "__main__":
    sys.exit(main())
