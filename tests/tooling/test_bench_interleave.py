"""bench/measure.py: medians are taken after every backend of a row has compiled, in rounds that rotate which
backend goes first, so no backend is timed in a state of the process the others were not timed in."""
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture()
def measure(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    import measure as module
    return module


def test_every_backend_is_timed_again_in_rotating_rounds_and_reports_the_middle_round(measure, monkeypatch):
    order = []
    times = {"eager": [5.0, 7.0, 6.0], "inductor": [3.0, 1.0, 2.0], "fuse_all": [9.0, 8.0, 4.0]}

    def fake_median(step, device, quick):
        order.append(step())
        return times[order[-1]].pop(0)
    monkeypatch.setattr(measure, "median_ms", fake_median)
    steps = {key: (lambda key=key: key) for key in ("eager", "inductor", "fuse_all")}
    cells = {key: {"median_ms": 100.0} for key in steps}
    measure.interleaved_medians(steps, cells, "cpu", SimpleNamespace(quick=True, backend_timeout=None))
    assert order == ["eager", "inductor", "fuse_all", "inductor", "fuse_all", "eager",
                     "fuse_all", "eager", "inductor"]
    assert [cells[k]["median_ms"] for k in steps] == [6.0, 2.0, 8.0]
    assert all(cells[k]["first_pass_ms"] == 100.0 for k in steps)
    assert cells["fuse_all"]["rounds_ms"] == [9.0, 8.0, 4.0]


def test_a_backend_that_fails_a_round_keeps_its_first_pass_median(measure, monkeypatch):
    def fake_median(step, device, quick):
        if step() == "fuse_all":
            raise RuntimeError("device lost")
        return 1.0
    monkeypatch.setattr(measure, "median_ms", fake_median)
    steps = {key: (lambda key=key: key) for key in ("inductor", "fuse_all")}
    cells = {key: {"median_ms": 3.0} for key in steps}
    measure.interleaved_medians(steps, cells, "cpu", SimpleNamespace(quick=True, backend_timeout=None))
    assert cells["inductor"]["median_ms"] == 1.0 and cells["fuse_all"]["median_ms"] == 3.0
    assert "device lost" in cells["fuse_all"]["interleave_error"]
