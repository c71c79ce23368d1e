"""The differential fuzzer in CI: a fixed set of generated programs through each codegen.

Programs run in this process through `torch.compile(backend="fuse_all")` (Dynamo + AOTAutograd + the whole
pipeline, with the ATen fallback on, so a fallback is *seen* and counted as a finding instead of raising).
Any finding fails the batch and prints, per finding, the command that replays its program.
"""
import time

import pytest

import fuzzcheck
import fuzzgen

CI_SEED = 9
PER_BATCH = 20
BATCHES = {"cpp": 8, "triton": 6}     # 160 + 120 programs
KNOBS = {"cpp": dict(max_numel=6000), "triton": dict(max_numel=1500)}   # the interpreter is slow per element

def _batches():
    for codegen, n in BATCHES.items():
        marks = [pytest.mark.triton] if codegen == "triton" else []
        for b in range(n):
            yield pytest.param(codegen, b, id=f"{codegen}-{b}", marks=marks)


@pytest.mark.parametrize("codegen,batch", list(_batches()))
def test_fuzz_batch(codegen, batch, record_property):
    fuzzcheck.quiet()
    found, kernels = [], 0
    start = time.perf_counter()
    for index in range(batch * PER_BATCH, (batch + 1) * PER_BATCH):
        prog = fuzzgen.generate(CI_SEED, index, **KNOBS[codegen])
        res = fuzzcheck.run_program(prog, codegen)
        assert res.invalid is None, f"generator bug: program {index} is invalid in eager: {res.invalid}\n" \
                                    f"{prog.describe()}"
        kernels += res.kernels
        for f in res.findings:
            found.append(f"{f.kind}: {f.detail}\n    replay: python tests/fuzz/fuzz.py --seed {CI_SEED} --only "
                         f"{index} --codegen {codegen} --max-numel {KNOBS[codegen]['max_numel']} -v")
    record_property("fuzz_seconds", round(time.perf_counter() - start, 1))
    assert kernels > 0, "no program produced a kernel: the batch tested nothing"
    assert not found, f"{len(found)} finding(s) in {PER_BATCH} programs:\n" + "\n".join(found)
