"""Where channels-last CUDA training went wrong (issue 11: first Conv-BN stage's gradients ~1e-3 off float64
at the second SGD step on the H200). Outcome: nowhere in the mechanism. Every graph matched its ATen graph
here, and in float64 the whole step matches eager (CPU: tests/ops/test_channels_last.py; GPU:
tests/cuda/test_layout_cuda.py::test_training_channels_last_is_exact_in_float64); ~1e-3 on the first
stage is what one ReLU input within float32 rounding of zero does to float32 gradients (eager float32 shows
it too, in either layout: tests/layout_checks.py). Kept for pinning layout problems. One run prints, per SGD step:

* every compiled graph call (forward, backward): each input whose real strides differ from the strides the
  graph was compiled for, inputs sharing storage, and each output's max abs / relative difference to the
  same (layout-rewritten) ATen graph run eagerly on copies of the same inputs; so a wrong output is pinned
  to one graph and one call, and to its inputs (saved activations, tangents) or its program;
* every ATen call of the host programs (convolutions, their backwards, ...): the strides of its inputs and
  outputs on each call, and every `ensure_layout` that had to re-lay an ATen result out (cuDNN chose
  other strides than the fake tensors predicted);
* weight-shaped graph inputs that are not the current parameter's memory (a stale copy would give
  gradients ~lr-sized off at the second step, about what was seen);
* the model's gradients against float64, next to eager float32's error.

`--poison` fills every buffer the host programs allocate with NaN (ints: -12345): a program that reads
memory it never wrote then fails at the first step instead of only when the caching allocator hands back
stale memory (fresh cudaMalloc'd pages are often zero). On CPU both codegens pass with it.

    source bench/gpu_env.sh && python bench/gpu_layout_training_probe.py [--poison] [--layout-off] [--steps 3]
        [--no-externs] [--no-reference] [--kernel-checks]
(on CPU: `--device cpu --size 16`, the flow as the CPU tests run it.)
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
from pathlib import Path

# every graph must really compile in this process (a graph loaded from a cache would skip the wrappers)
os.environ["FUSE_ALL_CACHE_DIR"] = tempfile.mkdtemp(prefix="fuse_all_probe_")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import layout_checks  # noqa: E402

STEP = [0]
PARAMETERS: dict[str, torch.Tensor] = {}   # the compiled model's parameters, to spot stale copies
LAST_FORWARD: list = []   # the latest forward call's outputs: a backward's saved activations should be these
KERNEL_CHECKS = {"checked": 0, "in place, not rerun": 0}


def _describe(t) -> str:
    return f"{tuple(t.shape)}@{tuple(t.stride())}" if isinstance(t, torch.Tensor) else repr(t)[:40]


def _poison(runtime) -> None:
    for name in ("empty_strided_cpu", "empty_strided_cuda"):
        original = getattr(runtime, name)

        def poisoned(size, stride, dtype, _original=original):
            t = _original(size, stride, dtype)
            if t.is_floating_point():
                t.fill_(float("nan"))
            elif dtype == torch.bool:
                t.fill_(True)
            else:
                t.fill_(-12345 if dtype != torch.uint8 else 77)
            return t
        setattr(runtime, name, poisoned)


def _log_relayouts(runtime) -> None:
    original = runtime.ensure_layout

    def ensure_layout(tensor, size, stride):
        if tensor.stride() != tuple(stride) and tensor.numel() > 1:
            print(f"    ensure_layout: ATen gave {tuple(tensor.stride())}, planned {tuple(stride)} for {tuple(size)}")
        return original(tensor, size, stride)
    runtime.ensure_layout = ensure_layout


def _trace_externs(module, graph_id: str) -> None:
    for name in [n for n in vars(module) if n.startswith("_fa_op_")]:
        op = getattr(module, name)

        def traced(*args, _op=op, _name=name, **kwargs):
            out = _op(*args, **kwargs)
            outs = out if isinstance(out, (tuple, list)) else [out]
            ins = [_describe(a) for a in args if isinstance(a, torch.Tensor)]
            print(f"    step {STEP[0]} {graph_id} {_name}: in {ins} -> out {[_describe(o) for o in outs]}")
            if "convolution" in _name:   # the same call on NCHW-contiguous operands: does the layout mix matter?
                plain = _op(*[a.contiguous() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
                plain = plain if isinstance(plain, (tuple, list)) else [plain]
                diffs = [f"{_relative(o, p):.2e}" for o, p in zip(outs, plain) if isinstance(o, torch.Tensor)]
                print(f"      same call on contiguous operands: max rel diff per output {diffs}"
                      + ("  <-- LAYOUT-DEPENDENT" if any(float(d) > 1e-5 for d in diffs) else ""))
            return out
        setattr(module, name, traced)


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (0 when both are 0)."""
    diff = (got.double() - want.double()).abs().max()
    return (diff / want.double().abs().max().clamp_min(1e-30)).item() if diff > 0 else 0.0


def _poison_fill(t: torch.Tensor) -> None:
    if t.is_floating_point():
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(-12345 if t.dtype != torch.uint8 else 77)


def _check_kernels() -> None:
    """Every Triton launch runs three times: as the program asks (fast launcher), again with its outputs
    filled with NaN first, and through the general launcher. A kernel that does not write all of its
    outputs, races between its programs, or whose fast path differs from the general one shows up
    (kernels that write a buffer they read, or outputs sharing memory with inputs, are run once)."""
    from fuse_all_codegen_triton.runtime import TritonKernel
    original_set_paths = TritonKernel._set_paths
    reported = set()

    def _set_paths(self, run, run_on=None):
        original_set_paths(self, run, run_on)
        fast_run, fast_run_on = self.run, self.run_on

        def checked_run_on(stream, *args):
            launch = fast_run if stream is None else (lambda *a: fast_run_on(stream, *a))
            launch(*args)
            n_in, n_ptr = self.spec["n_inputs"], self.n_ptr
            outs = [a for a in args[n_in:n_ptr] if isinstance(a, torch.Tensor)]
            in_storages = {a.untyped_storage().data_ptr() for a in args[:n_in] if isinstance(a, torch.Tensor)}
            if self.spec["mutated"] or any(o.untyped_storage().data_ptr() in in_storages for o in outs):
                KERNEL_CHECKS["in place, not rerun"] += 1
                return
            KERNEL_CHECKS["checked"] += 1
            first = [o.clone() for o in outs]
            for o in outs:
                _poison_fill(o)
            launch(*args)
            poisoned = [o.clone() for o in outs]
            for o in outs:
                _poison_fill(o)
            (self._run_jit if self.interpret else self._run_general)(*args)
            for i, (o, f, q) in enumerate(zip(outs, first, poisoned)):
                if o.is_floating_point():
                    same_q = torch.equal(torch.nan_to_num(q, 7.0), torch.nan_to_num(f, 7.0)) and \
                        torch.equal(q.isnan(), f.isnan())
                    same_g = torch.equal(torch.nan_to_num(o, 7.0), torch.nan_to_num(f, 7.0)) and \
                        torch.equal(o.isnan(), f.isnan())
                else:
                    same_q, same_g = torch.equal(q, f), torch.equal(o, f)
                key = (self.name, i, STEP[0])
                if (not same_q or not same_g) and key not in reported:
                    reported.add(key)
                    print(f"  KERNEL {self.name} output {i} {_describe(o)} step {STEP[0]}: "
                          f"{'differs when its output starts as NaN (unwritten elements or a race); ' if not same_q else ''}"
                          f"{'general launcher differs from the fast one' if not same_g else ''}")
            for o, f in zip(outs, first):   # leave what the program computed
                o.copy_(f)
        self.run_on = checked_run_on
        self.run = lambda *args: checked_run_on(None, *args)
    TritonKernel._set_paths = _set_paths


def _copy(t):
    if not isinstance(t, torch.Tensor):
        return t
    c = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    c.copy_(t)
    return c


def _wrap_call(call, graph, gm, compare: bool):
    placeholders = gm.graph.find_nodes(op="placeholder")
    calls = [0]

    def checked(args):
        calls[0] += 1
        label = f"step {STEP[0]} {graph.kind} {graph.graph_id} call {calls[0]}"
        for i, (p, a) in enumerate(zip(placeholders, args)):
            v = p.meta.get("val")
            if isinstance(a, torch.Tensor) and isinstance(v, torch.Tensor) and tuple(v.stride()) != tuple(a.stride()):
                print(f"  {label}: INPUT {i} ({p.name}) strides {tuple(a.stride())}, compiled for {tuple(v.stride())}")
        storages = {}
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor) and a.numel():
                storages.setdefault(a.untyped_storage().data_ptr(), []).append(i)
        shared = [ix for ix in storages.values() if len(ix) > 1]
        if shared:
            print(f"  {label}: inputs sharing storage: {shared}")
        for i, a in enumerate(args):   # a weight-shaped input should be the current parameter itself
            if not isinstance(a, torch.Tensor):
                continue
            same_shape = {n: p for n, p in PARAMETERS.items() if p.shape == a.shape and p.dim() > 1}
            if same_shape and not any(p.data_ptr() == a.data_ptr() for p in same_shape.values()):
                equal = [n for n, p in same_shape.items() if torch.equal(p.detach(), a)]
                print(f"  {label}: INPUT {i} {_describe(a)} is not a parameter's memory; equal in value to "
                      f"{equal or 'no current parameter (a stale copy?)'}")
        if graph.kind == "backward" and LAST_FORWARD:
            foreign = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.dim() > 0
                       and not any(p.data_ptr() == a.data_ptr() for p in PARAMETERS.values())
                       and not any(o.data_ptr() == a.data_ptr() and o.shape == a.shape for o in LAST_FORWARD)]
            print(f"  {label}: inputs that are neither a parameter nor an output of the latest forward call "
                  f"(tangents, or stale/copied activations): {foreign} of {len(args)}")
        copies = [_copy(a) for a in args] if compare else None
        out = call(args)
        if graph.kind == "forward":
            LAST_FORWARD[:] = [o for o in out if isinstance(o, torch.Tensor)]
        if not compare:
            return out
        with torch.no_grad():
            reference = gm(*copies)
        worst = []
        for i, (o, r) in enumerate(zip(out, reference)):
            if not isinstance(o, torch.Tensor) or not o.is_floating_point() or o.numel() == 0:
                continue
            diff = (o.double() - r.double()).abs()
            rel = (diff.max() / r.double().abs().max().clamp_min(1e-30)).item()
            # (1e-6 absolute: a conv bias before BatchNorm has a zero gradient, only rounding noise)
            bad = (rel > 1e-4 and diff.max().item() > 1e-6) or not torch.isfinite(o).all()
            if bad or tuple(o.stride()) != tuple(r.stride()):
                worst.append(f"output {i} {_describe(o)} (eager graph {tuple(r.stride())}): max abs "
                             f"{diff.max().item():.3e}, rel {rel:.3e}{'  <-- WRONG' if bad else ''}")
        print(f"  {label}: {len(out)} outputs vs the ATen graph on the same inputs: "
              + ("all within 1e-4" if not worst else "\n      " + "\n      ".join(worst)))
        return out
    checked._boxed_call = True
    return checked


def _instrument(trace_externs: bool, compare: bool) -> None:
    import fuse_all.backend as backend
    import fuse_all_ir

    original_compile, original_load = backend._compile, fuse_all_ir.load_host_program
    current = {}

    def load_host_program(source, *args, **kwargs):
        module = original_load(source, *args, **kwargs)
        if trace_externs:
            _trace_externs(module, current.get("id", "?"))
        return module

    def compile_(graph, opts, record, outputs, bar):
        current["id"] = f"{graph.kind} {graph.graph_id}"
        call = original_compile(graph, opts, record, outputs, bar)
        print(f"compiled {graph.kind} {graph.graph_id}: {record.layout}")
        return _wrap_call(call, graph, graph.graph_module, compare)

    backend._compile = compile_
    backend.ir.load_host_program = load_host_program


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--poison", action="store_true")
    parser.add_argument("--layout-off", action="store_true", help="no channels-last (options layout_opt=False)")
    parser.add_argument("--no-externs", action="store_true", help="do not print every ATen call")
    parser.add_argument("--no-reference", action="store_true",
                        help="do not rerun each graph in ATen (the extra work changes what memory gets reused)")
    parser.add_argument("--kernel-checks", action="store_true",
                        help="run every Triton launch 3 times: as asked, with NaN-filled outputs, general launcher")
    parser.add_argument("--codegen", default="auto")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    import torch._functorch.config as functorch_config
    functorch_config.enable_autograd_cache = False

    import fuse_all_ir.runtime as runtime
    if args.poison:
        _poison(runtime)
    _log_relayouts(runtime)
    if args.kernel_checks:
        _check_kernels()
    _instrument(not args.no_externs, not args.no_reference)

    torch.manual_seed(0)
    model = layout_checks.ConvBNReLU()
    layout_checks.mt.randomize_norms(model)
    model = model.to(args.device).train()
    x = torch.randn(4, 3, args.size, args.size, device=args.device)
    y = torch.randint(0, 10, (4,), device=args.device)
    PARAMETERS.update(dict(model.named_parameters()))
    eager, wide = copy.deepcopy(model), copy.deepcopy(model).double()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9) for m in (eager, wide, model)]
    compiled = torch.compile(model, backend="fuse_all",
                             options={"fallback": False, "autotune": False, "codegen": args.codegen,
                                      "layout_opt": not args.layout_off})
    for step in range(1, args.steps + 1):
        STEP[0] = step
        print(f"=== step {step}")
        with torch.no_grad():
            for ref in (eager, wide):
                for d, s in zip(list(ref.parameters()) + list(ref.buffers()),
                                list(model.parameters()) + list(model.buffers())):
                    d.copy_(s)
        grads = []
        for m, fn, opt, inputs in ((eager, eager, optimizers[0], x), (wide, wide, optimizers[1], x.double()),
                                   (model, compiled, optimizers[2], x)):
            opt.zero_grad(set_to_none=True)
            outputs = list(fn(inputs))
            layout_checks._loss(outputs, y).backward()
            grads.append({n: p.grad.detach().clone() for n, p in m.named_parameters()})
            opt.step()
        for name, reference in grads[1].items():
            scale = reference.abs().max().clamp_min(1e-30)
            err = [((g[name].double() - reference).abs().max() / scale).item() for g in (grads[2], grads[0])]
            flag = "  <-- WRONG" if err[0] > max(10 * err[1], 1e-5) else ""
            print(f"  step {step} grad {name:20s} compiled {err[0]:.2e}  eager {err[1]:.2e} (rel. to float64){flag}")
        if args.kernel_checks:
            print(f"  kernel launches so far: {KERNEL_CHECKS}")


if __name__ == "__main__":
    main()
