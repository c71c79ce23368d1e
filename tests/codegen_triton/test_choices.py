"""`TritonChoices`: persistent vs looped reductions live in the Triton target's choices object."""
from __future__ import annotations

import kernel_examples as ke


def test_shapes_follow_the_choices(triton_interpret):
    TritonChoices = triton_interpret.TritonChoices
    softmax = ke.softmax("cpu").program.kernels["kernel_0"]
    assert TritonChoices().choose_kernel_shape(ke.cos_sin("cpu").program.kernels["kernel_0"]).kind == "pointwise"
    assert TritonChoices().choose_kernel_shape(softmax).kind == "persistent"
    looped = TritonChoices(force_looped=True, rblock=32).choose_kernel_shape(softmax)
    assert (looped.kind, looped.get("rblock")) == ("looped", 32)
    assert TritonChoices(persistent_max_rnumel=512).choose_kernel_shape(softmax).kind == "looped"   # 1001 > 512
    symbolic = ke.full_reduction("cpu").program.kernels["kernel_0"]          # rnumel s0: never persistent
    assert TritonChoices().choose_kernel_shape(symbolic).kind == "looped"


def test_the_target_renders_the_shape_its_choices_pick(triton_interpret):
    softmax = ke.softmax("cpu").program.kernels["kernel_0"]
    persistent = triton_interpret.TritonTarget(autotune=False).render(softmax)
    looped = triton_interpret.TritonTarget(autotune=False, choices=triton_interpret.TritonChoices(
        force_looped=True, rblock=64)).render(softmax)
    assert persistent.spec["kind"] == "persistent" and "for roffset" not in persistent.source
    assert looped.spec["kind"] == "looped" and "for roffset" in looped.source
    assert {c["RBLOCK"] for c in looped.spec["configs"]} == {64}
