"""The lean host path on a real GPU (marker `cuda`): a BERT-like stack of tiny layers (launch-bound, the
case issue 11 measures) compiled with fuse_all — buffers reused, allocations through
`empty_strided_cuda`, one stream read and one device check per call, `run_on` per launch — against eager,
with reuse on and off, through the guarded path, under CUDA graphs and in training."""
from __future__ import annotations

import pytest
import torch

import fuse_all
from tiny_stack import tiny_stack

pytestmark = pytest.mark.cuda


def stack(layers: int = 4) -> torch.nn.Module:
    return tiny_stack(layers).cuda()


def host_source() -> str:
    record = fuse_all.compiled_graphs()[-1]
    assert record.fallback_reason is None, record.fallback_reason
    with open(record.output_code) as f:
        return f.read()


def test_a_tiny_stack_matches_eager_with_reused_buffers():
    model, x = stack(), torch.randn(1, 12, 32, device="cuda")
    compiled = torch.compile(model, backend="fuse_all")
    with torch.no_grad():
        expected = model(x)
        for _ in range(3):     # compile + autotune, then the fast launchers
            torch.testing.assert_close(compiled(x), expected, rtol=1e-4, atol=1e-4)
    source = host_source()
    body = source[source.index("def call(args):"):source.index("def _call_profiled")]
    assert "# reuse" in body and "empty_strided_cuda(" in body
    assert "current_cuda_device() != 0" in body and body.count("_fa_raw_stream(0)") == 1
    assert ".run_on(_fa_stream, " in body and "torch.ops." not in body and "as_strided(" not in body.rsplit("return", 1)[0]


def test_reuse_on_and_off_give_identical_results(monkeypatch):
    model, x = stack(), torch.randn(1, 12, 32, device="cuda")
    results = {}
    for reuse in ("0", "1"):
        monkeypatch.setenv("FUSE_ALL_REUSE_BUFFERS", reuse)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="fuse_all")
        with torch.no_grad():
            compiled(x)
            results[reuse] = compiled(x)
        assert ("# reuse" in host_source()) == (reuse == "1")
    assert torch.equal(results["0"], results["1"])


def test_the_guarded_path_allocates_on_the_programs_device(monkeypatch):
    """When another device is current (forced here by making the check see one), the call runs under a
    guard for the program's device: allocations and launches still go to cuda:0."""
    model, x = stack(2), torch.randn(1, 12, 32, device="cuda")
    compiled = torch.compile(model, backend="fuse_all")
    with torch.no_grad():
        expected = model(x)
        compiled(x)
        monkeypatch.setitem(host_call().__globals__, "current_cuda_device", lambda: -1)
        out = compiled(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert out.device == torch.device("cuda", 0)


def host_call():
    """The last compiled graph's host-program `call` (its globals are the module's)."""
    import gc
    import types
    path = fuse_all.compiled_graphs()[-1].output_code
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType and obj.__name__ == "call" \
                and obj.__globals__.get("__fuse_all_path__") == path:
            return obj
    raise AssertionError("the host program's call() was not found")


def test_reduce_overhead_replays_a_program_with_reused_buffers():
    model, x = stack(2), torch.randn(1, 12, 32, device="cuda")
    compiled = torch.compile(model, backend="fuse_all", mode="reduce-overhead")
    with torch.no_grad():
        expected = model(x)
        for _ in range(4):
            out = compiled(x)
            torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert "# reuse" in host_source()


def test_training_keeps_saved_tensors_and_matches_eager():
    torch.manual_seed(0)
    model = stack(2).train()
    x = torch.randn(2, 12, 32, device="cuda")
    compiled = torch.compile(model, backend="fuse_all")
    loss = compiled(x).square().mean()
    grads = torch.autograd.grad(loss, list(model.parameters()))
    ref_loss = model(x).square().mean()
    ref = torch.autograd.grad(ref_loss, list(model.parameters()))
    torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-5)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-3, atol=1e-4)
