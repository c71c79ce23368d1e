"""Training steps compiled with fuse_all on CPU: forward + loss (compiled), backward (the compiled backward
graph), then an eager SGD step (momentum, weight decay). Two steps, so the second runs the compiled code
again on updated parameters. After each step: loss, every gradient, every updated parameter, and every
buffer (BatchNorm's running mean/var and its batch counter, which train mode updates in place inside the
forward graph) are compared with the same step taken from the same state in eager float32 and in eager
float64: the compiled step must be about as close to float64 as eager float32 is
(see fuse_all_model_testing.FP64_MULTIPLIER for why not a fixed tolerance against eager).
"""
import copy
from dataclasses import dataclass, field

import pytest
import torch

import fuse_all_model_testing as mt

pytestmark = pytest.mark.slow
STEPS = 2


@dataclass
class StepState:
    loss: torch.Tensor
    grads: dict                       # name -> grad after backward
    params: dict                      # name -> parameter after the optimizer step
    buffers: dict                     # name -> buffer after the step


PARTS = ("loss", "grads", "params", "buffers")


@dataclass
class TrainingRun:
    # (step, part) -> (failure message or None, summary line); judged as the steps run, so no snapshot of a
    # 110M-parameter model is kept per step and per run (float64 BERT snapshots alone would be ~4 GB)
    verdicts: dict = field(default_factory=dict)
    records: list = field(default_factory=list)


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)


def _step(model: torch.nn.Module, opt: torch.optim.Optimizer, loss_fn, inputs) -> StepState:
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(*inputs)
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    opt.step()
    # references, not copies: the step is judged before this model is touched again (memory: BERT)
    return StepState(loss.detach(), grads, {n: p.detach() for n, p in model.named_parameters()},
                     {n: b.detach() for n, b in model.named_buffers()})


def _sync(dst: torch.nn.Module, dst_opt, src: torch.nn.Module, src_opt) -> None:
    """Start the reference's next step from the compiled run's state (parameters, buffers, momentum), so
    each step is compared on its own: random-weight ResNet50 training is chaotic enough that float32 and
    float64 trajectories part after one step (eager alone: 40% apart in the loss at step 2)."""
    with torch.no_grad():
        for d, s in zip(list(dst.parameters()) + list(dst.buffers()), list(src.parameters()) + list(src.buffers())):
            d.copy_(s)
        for d, s in zip(dst.parameters(), src.parameters()):
            if "momentum_buffer" in src_opt.state.get(s, {}):
                dst_opt.state[d]["momentum_buffer"] = src_opt.state[s]["momentum_buffer"].to(d.dtype).clone()


def train_both(model: torch.nn.Module, loss_of, inputs) -> TrainingRun:
    """`loss_of(model)` gives the function (inputs -> scalar loss) to train. The compiled run makes STEPS
    steps; before each, copies of its state take the same step in eager float32 and eager float64. A conv net
    also takes it in eager float32 channels-last: fuse_all runs its convolutions channels-last (as Inductor
    does), and that rounding is as legitimate as NCHW's (ResNet-50's step-2 loss: 3.2e-5 off float64 in eager
    channels-last, 3.1e-6 in eager NCHW, 3.0e-5 compiled; in float64 the compiled step matches eager to 1e-12)."""
    wide_inputs = tuple(t.double() if t.is_floating_point() else t for t in inputs)
    eagers = [copy.deepcopy(model)]
    if any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
        eagers.append(copy.deepcopy(model).to(memory_format=torch.channels_last))
    wide = copy.deepcopy(model).double()
    eager_opts, wide_opt, opt = [_optimizer(e) for e in eagers], _optimizer(wide), _optimizer(model)
    mt.reset()
    compiled = mt.compile_fn(loss_of(model))
    run = TrainingRun()
    for step in range(1, STEPS + 1):
        for ref, ref_opt in list(zip(eagers, eager_opts)) + [(wide, wide_opt)]:
            _sync(ref, ref_opt, model, opt)
        eager_states = [_step(e, e_opt, loss_of(e), inputs) for e, e_opt in zip(eagers, eager_opts)]
        wide_state = _step(wide, wide_opt, loss_of(wide), wide_inputs)
        got = _step(model, opt, compiled, inputs)
        for part in PARTS:
            run.verdicts[step, part] = _judge([getattr(state, part) for state in eager_states],
                                              getattr(wide_state, part), getattr(got, part), f"step {step} {part}")
        del eager_states, wide_state, got
    run.records = mt.records()
    mt.reset()
    print(f"\n[{mt.BACKEND}] " + mt.describe(run.records))
    return run


def _judge(eagers: list, wide, got, what: str) -> tuple[str | None, str]:
    if not isinstance(wide, dict):
        got, eagers, wide = {what: got}, [{what: e} for e in eagers], {what: wide}
    eager_worst = max((e for run in eagers for _, e in mt.fp64_errors(run, run, wide).values()), default=0.0)
    try:
        worst = mt.assert_as_close_to_fp64_as_eager(got, eagers, wide, what)
    except AssertionError as failure:
        return str(failure), f"{what}: FAILED"
    return None, f"{what}: largest relative L2 error vs float64 {worst:.2e} (eager float32: {eager_worst:.2e})"


def _check(run: TrainingRun, parts: tuple[str, ...]) -> None:
    """Step by step, so the first divergence is the one reported."""
    for step in range(1, STEPS + 1):
        for part in parts:
            failure, line = run.verdicts[step, part]
            print("\n" + line)
            if failure:
                pytest.fail(failure, pytrace=False)


@pytest.fixture(scope="module")
def resnet50_run():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).train()
    mt.randomize_norms(model)          # running stats away from 0/1, so their update is really checked
    x, y = torch.randn(2, 3, 64, 64), torch.randint(0, 1000, (2,))

    def loss_of(m):
        return lambda x, y: torch.nn.functional.cross_entropy(m(x), y)
    return train_both(model, loss_of, (x, y))


@pytest.fixture(scope="module")
def bert_run():
    """BertForMaskedLM with the full BertConfig (110M parameters; 2x16 tokens keep it quick on CPU), its
    MLM loss with some positions ignored (-100). Dropout is off: compiled dropout draws other random
    numbers than eager, so nothing would be comparable with it on."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.BertForMaskedLM(config).train()
    mt.randomize_norms(model)
    ids = torch.randint(0, config.vocab_size, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 11:] = 0
    types = torch.zeros(2, 16, dtype=torch.long)
    labels = torch.where(torch.rand(2, 16) < 0.3, ids, torch.full_like(ids, -100))

    def loss_of(m):
        def loss(ids, mask, types, labels):
            return m(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels).loss
        return loss
    return train_both(model, loss_of, (ids, mask, types, labels))


CASES = ["resnet50_run", "bert_run"]


@pytest.mark.parametrize("case", CASES)
def test_loss_and_gradients_match_eager(case, request):
    _check(request.getfixturevalue(case), ("loss", "grads"))


@pytest.mark.parametrize("case", CASES)
def test_updated_parameters_and_buffers_match_eager(case, request):
    _check(request.getfixturevalue(case), ("params", "buffers"))


@pytest.mark.parametrize("case", CASES)
def test_forward_and_backward_compiled_by_fuse_all(case, request):
    mt.assert_compiled(request.getfixturevalue(case).records, {"forward", "backward"})
