"""GPU check of fuse_all_cudagraphs: correctness under replay, then timings against eager and torch's backends.

    python bench/gpu_cudagraphs_check.py          # on a CUDA machine; about a minute on one H200

Runs unattended and prints one `PASS name` / `FAIL name: why` line per check, then a table of median
times (triton.testing.do_bench). Works without the package installed: it puts the package's source folder
on sys.path and registers the backend itself. Exit status 1 when any check failed.
"""
from __future__ import annotations

import copy
import logging
import sys
import time
import traceback
from pathlib import Path

import torch

try:
    import fuse_all_cudagraphs
except ImportError:  # a bare checkout on the GPU machine
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "runtime-cudagraphs" / "src"))
    import fuse_all_cudagraphs

from fuse_all_cudagraphs import GraphPool, LiveOutputError, wrap
from fuse_all_cudagraphs import _torch_compat as compat
from fuse_all_cudagraphs.backend import fuse_all_cudagraphs as backend

BACKEND = "fuse_all_cudagraphs"
CHECKS: list[tuple[str, object]] = []  # (name, function) in file order; main() runs them
RESULTS: list[tuple[str, bool]] = []
FALLBACKS: list[str] = []  # every fallback reason the compiled training model reported


def check(name):
    def register(fn):
        CHECKS.append((name, fn))
        return fn
    return register


def run_check(name, fn) -> None:
    start = time.perf_counter()
    try:
        detail = fn() or ""
        RESULTS.append((name, True))
        print(f"PASS {name} ({time.perf_counter() - start:.1f}s) {detail}", flush=True)
    except Exception as exc:  # report and go on: one broken check must not hide the others
        RESULTS.append((name, False))
        print(f"FAIL {name}: {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc(limit=4)


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def cos_sin(args):
    return (torch.sin(torch.cos(args[0])),)


def close(a, b):
    return torch.allclose(a, b, atol=1e-5, rtol=1e-4)


# ----------------------------------------------------------------------------------------- correctness
@check("replay reads inputs in place, no copies")
def _():
    x = torch.randn(1 << 20, device="cuda")
    g = wrap(cos_sin, [x], name="cos_sin")
    for _ in range(5):
        x.copy_(torch.randn_like(x))  # same address, new data
        expect(close(g([x])[0], torch.sin(torch.cos(x))), "wrong result under replay")
    expect(g.stats["captures"] == 1 and g.stats["replays"] == 4 and g.stats["input_copies"] == 0, g.stats)
    return str(g.stats)


@check("held outputs are not overwritten (copy) / raise (error)")
def _():
    x = torch.ones(1000, device="cuda")
    g = wrap(lambda a: (a[0] * 2,), [x], name="double")
    g([x])
    held = [g([x])[0] for _ in range(4)]  # every result kept, as in `results.append(model(x))`
    for step in range(4):
        x.fill_(float(step + 3))
        held.append(g([x])[0])
    expect(all(torch.equal(h, torch.full_like(x, 2.0)) for h in held[:4]), "an early result was overwritten")
    expect([h[0].item() for h in held[4:]] == [6.0, 8.0, 10.0, 12.0], [h[0].item() for h in held[4:]])
    strict = wrap(lambda a: (a[0] * 2,), [x], on_live_output="error")
    strict([x])
    kept = strict([x])
    try:
        strict([x])
    except LiveOutputError:
        pass
    else:
        raise AssertionError("on_live_output='error' did not raise")
    expect(torch.equal(kept[0], x * 2), "the held result changed")
    return "; ".join(d.reason for d in g.decisions if d.kind != "capture")


@check("input mutation: in place, and copied back for moving inputs")
def _():
    def double_in_place(args):
        args[0].mul_(2)
        return (args[0] + 1,)

    same = torch.ones(256, device="cuda")
    g = wrap(double_in_place, [same])
    for step in range(4):
        (y,) = g([same])
        expect(torch.equal(same, torch.full_like(same, 2.0 ** (step + 1))), f"in-place call {step}")
    moving = [torch.full((256,), float(i), device="cuda") for i in range(1, 8)]
    h = wrap(double_in_place, [moving[0]])
    for x in moving:
        before = x.clone()
        (y,) = h([x])
        expect(torch.equal(x, before * 2) and torch.equal(y, before * 2 + 1), "copied input not copied back")
    expect(h.stats["input_copies"] >= 2, h.stats)
    return str(h.stats)


@check("changed input address: re-captured with a buffer it is copied into")
def _():
    xs = [torch.randn(4096, device="cuda") for _ in range(6)]
    g = wrap(cos_sin, [xs[0]])
    for x in [xs[0], xs[0], xs[1], xs[1], xs[2], xs[3], xs[4], xs[5]]:
        expect(close(g([x])[0], torch.sin(torch.cos(x))), "wrong result after a move")
    return "; ".join(d.reason for d in g.decisions)


@check("uncapturable op and CPU inputs fall back with a reason")
def _():
    x = torch.randn(64, device="cuda")
    g = wrap(lambda a: (a[0] * a[0].sum().item(),), [x])
    for _ in range(3):
        expect(close(g([x])[0], x * x.sum().item()), "wrong result after a failed capture")
    expect(g.decisions and g.decisions[-1].reason.startswith("capture failed"), g.decisions)
    after = wrap(cos_sin, [x])  # the allocator must still be usable for the next capture
    for _ in range(3):
        expect(close(after([x])[0], torch.sin(torch.cos(x))), "capture after a failed one")
    expect(after.stats["captures"] == 1, after.stats)
    cpu = wrap(cos_sin, [x.cpu()])
    expect(close(cpu([x.cpu()])[0], torch.sin(torch.cos(x.cpu()))), "cpu result")
    return f"{g.decisions[-1].reason} | {cpu.decisions[0].reason}"


@check("int inputs: a graph per value; signature limit")
def _():
    x = torch.randn(512, device="cuda")
    g = wrap(lambda a: (a[0] * a[1] + a[0],), [x, 1], max_graphs=3)
    for k in [1, 2, 3, 4, 1, 2, 3, 4]:
        expect(close(g([x, k])[0], x * k + x), f"k={k}")
    expect(g.stats["captures"] == 3 and any("limit of 3 graphs" in d.reason for d in g.decisions), g.decisions)


def mlp(width=1024, depth=4):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 8)).cuda()


@check("MLP training through torch.compile: grads equal eager, held losses intact")
def _():
    torch.manual_seed(0)
    model = mlp(256, 3)
    reference = copy.deepcopy(model)
    compiled = torch.compile(model, backend=BACKEND, options={"on_fallback": FALLBACKS.append})
    losses, reference_losses = [], []
    for step in range(10):
        x = torch.randn(32, 256, device="cuda")
        accumulate = step >= 6  # last steps keep .grad across steps (gradient accumulation)
        if not accumulate:
            model.zero_grad(set_to_none=True)
            reference.zero_grad(set_to_none=True)
        loss = compiled(x).square().mean()
        loss.backward()
        losses.append(loss)  # held across calls on purpose
        reference_loss = reference(x).square().mean()
        reference_loss.backward()
        reference_losses.append(reference_loss.detach())
        for p, q in zip(model.parameters(), reference.parameters()):
            expect(torch.allclose(p.grad, q.grad, atol=1e-4, rtol=1e-3), f"grad differs at step {step}")
    for step, (a, b) in enumerate(zip(losses, reference_losses)):
        expect(torch.allclose(a.detach(), b, atol=1e-5, rtol=1e-4), f"held loss of step {step} changed")
    return f"{len(FALLBACKS)} fallback(s): " + " | ".join(FALLBACKS[-3:])


@check("MLP inference through torch.compile: kept outputs intact")
def _():
    model = mlp().eval()
    compiled = torch.compile(model, backend=BACKEND)
    with torch.no_grad():
        inputs = [torch.randn(16, 1024, device="cuda") for _ in range(6)]
        outputs = [compiled(x) for x in inputs]
        for x, y in zip(inputs, outputs):
            expect(torch.allclose(y, model(x), atol=1e-4, rtol=1e-3), "inference output differs or was overwritten")


@check("one pool shared by two graphs")
def _():
    pool = GraphPool()
    x = torch.randn(1 << 16, device="cuda")
    f = wrap(lambda a: (a[0].exp() + 1,), [x], pool=pool, name="f")
    h = wrap(lambda a: (a[0].sin() * 3,), [x], pool=pool, name="h")
    held = []
    for _ in range(5):
        fx = f([x])[0]
        held.append(h([fx])[0])  # h's output held while f replays again
        expect(torch.allclose(held[-1], (x.exp() + 1).sin() * 3, atol=1e-5), "wrong chained result")
    expect(all(torch.equal(held[0], t) for t in held), "a held output of h was overwritten")
    return " | ".join(pool.graph_names())


# ----------------------------------------------------------------------------------------- timings
def compiled(fn, backend, **kwargs):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, **kwargs)


def calling(fn, *args):
    return lambda: fn(*args)


def train_step(model, x):
    def step():
        model.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
    return step


def time_row(name, eager_fn, factories):
    """Median ms per variant; each factory builds (and compiles) its callable when its turn comes."""
    from triton.testing import do_bench

    times = {}
    for label, factory in [("eager", lambda: eager_fn), *factories.items()]:
        try:
            fn = factory()
            for _ in range(3):  # compile, warm up, capture; each result dropped before the next call
                fn()
            torch.cuda.synchronize()
            times[label] = do_bench(fn, warmup=25, rep=200, return_mode="median")
        except Exception as exc:
            print(f"FAIL timing {name} {label}: {type(exc).__name__}: {exc}", flush=True)
            times[label] = float("nan")
    return name, times


def cos_sin_t(t):
    return torch.sin(torch.cos(t))


def time_cos_sin():
    x = torch.randn(1 << 28, device="cuda")
    return time_row("pw_cos_sin_2e28", calling(cos_sin_t, x), {
        "torch cudagraphs": lambda: calling(compiled(cos_sin_t, "cudagraphs"), x),
        "fuse_all_cudagraphs": lambda: calling(compiled(cos_sin_t, BACKEND), x),
        "inductor RO": lambda: calling(compiled(cos_sin_t, "inductor", mode="reduce-overhead"), x),
        # What the meta-package does for mode="reduce-overhead": fused kernels, then wrap().
        "wrap(inductor)": lambda: calling(wrap(lambda a, f=compiled(cos_sin_t, "inductor"): (f(a[0]),), [x]), [x]),
    })


def time_mlp():
    model = mlp().eval()
    xs = torch.randn(16, 1024, device="cuda")
    with torch.no_grad():
        infer = time_row("mlp_infer_16x1024", calling(model, xs), {
            "torch cudagraphs": lambda: calling(compiled(model, "cudagraphs"), xs),
            "fuse_all_cudagraphs": lambda: calling(compiled(model, BACKEND), xs),
        })
    train = mlp()
    return [infer, time_row("mlp_train_16x1024", train_step(train, xs), {
        "torch cudagraphs": lambda: train_step(compiled(train, "cudagraphs"), xs),
        "fuse_all_cudagraphs": lambda: train_step(compiled(train, BACKEND), xs),
    })]


def timings():
    rows = [time_cos_sin(), *time_mlp()]
    labels = ["eager", "torch cudagraphs", "fuse_all_cudagraphs", "inductor RO", "wrap(inductor)"]
    print("\n| workload | " + " | ".join(f"{label} ms" for label in labels) + " | cudagraphs / fuse_all |")
    print("|---" * (len(labels) + 2) + "|")
    for name, times in rows:
        cells = [f"{times[label]:.4f}" if label in times else "-" for label in labels]
        ratio = times["torch cudagraphs"] / times["fuse_all_cudagraphs"]
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio:.2f}x |", flush=True)
    return rows


def main() -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not torch.cuda.is_available():
        print("FAIL setup: no CUDA device")
        return 1
    if BACKEND not in torch.compiler.list_backends():
        compat.register_backend(BACKEND, backend)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, fuse_all_cudagraphs "
          f"{fuse_all_cudagraphs.__version__} from {Path(fuse_all_cudagraphs.__file__).parent}", flush=True)
    start = time.perf_counter()
    for name, fn in CHECKS:
        run_check(name, fn)
    rows = timings()
    eager, ours = rows[0][1]["eager"], rows[0][1]["fuse_all_cudagraphs"]
    run_check("no input-copy tax: fuse_all_cudagraphs on cos_sin within 15% of eager", lambda: expect(
        ours <= 1.15 * eager, f"{ours:.3f} ms vs eager {eager:.3f} ms") or f"{ours:.3f} ms vs eager {eager:.3f} ms")
    failed = [name for name, ok in RESULTS if not ok]
    print(f"\n{len(RESULTS) - len(failed)} passed, {len(failed)} failed in {time.perf_counter() - start:.0f}s"
          + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
