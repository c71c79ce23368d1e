"""bench's correctness check (bench/compare.py, workloads.py): a training step that differs from eager's
float32 by more than the workload's tolerance is judged against the same step in float64, by the rule the
model tests use, so that a check every backend fails (ResNet-50 training on the H200) can fail for one."""
import pytest
import torch

from tests.tooling.test_bench_interleave import BENCH


@pytest.fixture()
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import compare
    import workloads
    return compare, workloads


def _tiny_bn_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5)).train()


def test_the_float64_step_is_float64_and_leaves_the_model_as_it_was(bench):
    _, workloads = bench
    model = _tiny_bn_net()
    x, y = torch.randn(4, 3, 6, 6), torch.randint(0, 5, (4,))
    inst = workloads._training(model, lambda x, y: torch.nn.functional.cross_entropy(model(x), y), (x, y), tol=1e-3)
    before = [t.clone() for t in list(model.parameters()) + list(model.buffers())]
    ids = [id(t) for t in model.buffers()]
    inst.reset()
    eager = inst.step(inst.target)
    wide = inst.float64_step()
    assert all(t.dtype == torch.float64 for t in wide if t.is_floating_point())
    after = list(model.parameters()) + list(model.buffers())
    assert [id(t) for t in model.buffers()] == ids     # the step's own buffer list still sees the model's
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(after, before))
    assert all(p.grad is None for p in model.parameters())
    for e, w in zip(eager, wide):
        torch.testing.assert_close(e.to(w.dtype), w, rtol=1e-3, atol=1e-4)
    inst.reset()
    again = inst.step(inst.target)                      # the float32 step is unchanged by the float64 run
    assert all(torch.equal(a, b) for a, b in zip(again, eager))


def test_a_loss_only_workload_has_no_float64_step(bench):
    _, workloads = bench
    model = _tiny_bn_net()
    inst = workloads._training(model, lambda x: model(x).sum(), (torch.randn(2, 3, 6, 6),), loss_only=True)
    assert inst.float64_step is None


def test_a_result_outside_tol_passes_only_when_as_close_to_float64_as_eager(bench):
    compare, _ = bench
    gen = torch.Generator().manual_seed(0)
    exact = torch.randn(1000, dtype=torch.float64, generator=gen)
    eager = exact + 1e-3 * torch.randn(1000, dtype=torch.float64, generator=gen)     # eager's own error
    other = exact + 1e-3 * torch.randn(1000, dtype=torch.float64, generator=gen)     # as good, elsewhere
    worse = exact + 1e-1 * torch.randn(1000, dtype=torch.float64, generator=gen)
    e32, o32, w32 = (t.float() for t in (eager, other, worse))
    ok, text = compare.compare([o32], [e32], 1e-4)
    assert not ok and text.startswith("MISMATCH (")                                  # no float64: as before
    ok, text = compare.compare([o32], [e32], 1e-4, float64=[exact])
    assert ok and text.startswith("ok vs float64"), text
    ok, text = compare.compare([w32], [e32], 1e-4, float64=[exact])
    assert not ok and text.startswith("MISMATCH vs float64"), text
    ok, text = compare.compare([e32], [e32], 1e-4, float64=[exact])
    assert ok and text.startswith("ok (err 0.0e+00)"), text                         # within tol: eager's rule
