"""Run fuzz programs in worker processes: a crashed compiled program (a segfault, or a Triton interpreter
error that left memory written out of bounds) must not take the whole run, or the next programs, with it.

Workers are *spawned* (not forked: OpenMP is not fork-safe), import torch once and then run programs one
at a time. After a crash finding, or when a worker dies or exceeds the time limit, it is replaced.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait


@dataclass
class Outcome:
    seed: int
    index: int
    codegen: str
    findings: list = field(default_factory=list)   # (kind, detail, key, traceback or "")
    invalid: str | None = None
    seconds: float = 0.0
    kernels: int = 0
    externs: list = field(default_factory=list)
    program: object = None


def run_here(prog, codegen, backend="fuse_all", strict=False) -> Outcome:
    import fuzzcheck
    res = fuzzcheck.run_program(prog, codegen, backend, strict=strict)
    return Outcome(prog.seed, prog.index, codegen, [(f.kind, f.detail, f.key, f.trace) for f in res.findings], res.invalid,
                   res.seconds, res.kernels, res.externs, prog)


def _serve(conn, threads):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import fuzzcheck
    torch.set_num_threads(threads)
    fuzzcheck.quiet()
    while True:
        job = conn.recv()
        if job is None:
            return
        prog, codegen, backend, strict = job
        out = run_here(prog, codegen, backend, strict)
        out.program = None
        conn.send(out)


class Worker:
    def __init__(self, threads=1):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, threads), daemon=True)
        self.proc.start()
        child.close()
        self.job = None
        self.started = 0.0

    def submit(self, job):
        self.job = job
        self.started = time.perf_counter()
        self.conn.send(job)

    def stop(self):
        try:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
        finally:
            self.conn.close()


class Pool:
    """`run(jobs)` yields an Outcome per job (prog, codegen, backend, strict), in completion order."""

    def __init__(self, jobs=1, timeout=300.0, threads=1):
        self.size, self.timeout, self.threads = jobs, timeout, threads
        self.workers = []

    def __enter__(self):
        self.workers = [Worker(self.threads) for _ in range(self.size)]
        return self

    def __exit__(self, *exc):
        for w in self.workers:
            w.stop()

    def _replace(self, w):
        w.stop()
        fresh = Worker(self.threads)
        self.workers[self.workers.index(w)] = fresh
        return fresh

    def run(self, jobs):
        jobs = iter(jobs)
        pending = True
        for w in self.workers:
            job = next(jobs, None)
            if job is None:
                pending = False
                break
            w.submit(job)
        while any(w.job is not None for w in self.workers):
            busy = [w for w in self.workers if w.job is not None]
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=5)
            for w in busy:
                prog, codegen = w.job[0], w.job[1]
                out = None
                if w.conn in ready or w.conn.poll():
                    try:
                        out = w.conn.recv()
                    except EOFError:
                        out = None
                if out is None and not w.proc.is_alive():
                    out = Outcome(prog.seed, prog.index, codegen,
                                  [("crash", f"worker died (exit code {w.proc.exitcode}, e.g. a segfault)",
                                    "crash: worker died", "")], seconds=time.perf_counter() - w.started)
                elif out is None and time.perf_counter() - w.started > self.timeout:
                    out = Outcome(prog.seed, prog.index, codegen,
                                  [("crash", f"no result within {self.timeout:.0f} s (hang?)", "crash: timeout", "")],
                                  seconds=time.perf_counter() - w.started)
                if out is None:
                    continue
                out.program = prog
                if any(kind == "crash" for kind, *_ in out.findings):
                    w = self._replace(w)   # its memory or interpreter state may be damaged
                w.job = None
                yield out
                if pending:
                    job = next(jobs, None)
                    if job is None:
                        pending = False
                    else:
                        w.submit(job)
