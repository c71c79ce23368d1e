"""The garbage-collector pause around a compile (`fuse_all_ir.gc_pause`): off inside, back as it was after,
nested and from several threads, and left alone when the program turned it off or FUSE_ALL_GC_PAUSE=0."""
from __future__ import annotations

import gc
import threading

import pytest

from fuse_all_ir import gc_pause


@pytest.fixture(autouse=True)
def _collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_inside_and_back_after_even_on_error():
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()          # the outer pause still runs
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_pause.paused():
            raise RuntimeError("a compile that fails")
    assert gc.isenabled()


def test_a_program_that_turned_the_collector_off_keeps_it_off():
    gc.disable()
    with gc_pause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_switch_leaves_the_collector_running(monkeypatch):
    monkeypatch.setenv("FUSE_ALL_GC_PAUSE", "0")
    with gc_pause.paused():
        assert gc.isenabled()


def test_overlapping_pauses_of_two_threads():
    first_inside, second_done, release = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def first():
        with gc_pause.paused():
            first_inside.set()
            release.wait(10)
            seen["first, after the second ended"] = gc.isenabled()

    def second():
        first_inside.wait(10)
        with gc_pause.paused():
            pass
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    second_done.wait(10)
    release.set()
    for t in threads:
        t.join(10)
    assert seen == {"first, after the second ended": False}   # the second's end did not switch it back on
    assert gc.isenabled()


def test_the_backend_compiles_with_the_collector_paused(monkeypatch):
    import torch

    import fuse_all_ir as ir
    states = []
    real_lower = ir.lower

    def lower(*args, **kwargs):
        states.append(gc.isenabled())
        return real_lower(*args, **kwargs)
    monkeypatch.setattr(ir, "lower", lower)
    import fuse_all.backend as backend
    real_make_backend = backend.capture.make_backend

    def make_backend(*args, **kwargs):         # AOTAutograd's tracing runs inside the backend it makes
        traced = real_make_backend(*args, **kwargs)

        def tracing(*a, **k):
            states.append(("tracing", gc.isenabled()))
            return traced(*a, **k)
        return tracing
    monkeypatch.setattr(backend.capture, "make_backend", make_backend)
    torch._dynamo.reset()
    fn = torch.compile(lambda x: torch.sin(x) * 2 + 1, backend="fuse_all")
    x = torch.randn(64)
    torch.testing.assert_close(fn(x), torch.sin(x) * 2 + 1)
    assert states == [("tracing", False), False] and gc.isenabled()
