"""Loads in flight, read from a kernel's SASS without a GPU: registers per thread and, per loop of the
kernel (a backward branch), how many of a thread's global loads are outstanding at once.

A streaming kernel's bandwidth follows the bytes each SM keeps in flight: resident threads (registers
decide) times the loads a thread has issued and not yet consumed. ptxas chooses that schedule: in
train_resnet50's channels-last BatchNorm statistics it issued one 16-byte load per thread at a time (the
next load reusing the previous one's registers) where the backward's plain sums of the same shape issue
4-10 before the first use (bench/RESULTS.md, wt-welford). `fake_cuda_dump.py --ptx` writes these numbers
for every config of the kernels it compiles.

The count is a straight-line approximation: a load is outstanding from its LDG until the first
instruction that reads one of its destination registers.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile


def _tool(name: str) -> str:
    import triton
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def _registers(text: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"\bR(\d+)\b", text)]


def outstanding_loads(instructions: list[str]) -> tuple[int, int]:
    """(global loads, most outstanding at once) over a straight line of SASS instructions."""
    outstanding: list[set] = []
    loads = most = 0
    for text in instructions:
        text = re.sub(r"^@!?U?P\w+\s+", "", text.strip())
        op = text.split()[0] if text else ""
        operands = text[len(op):].split(",")
        read = operands if op.startswith("ST") else operands[1:]
        sources = {r for o in read for r in _registers(o)}
        outstanding = [regs for regs in outstanding if not regs & sources]
        if op.startswith("LDG"):
            loads += 1
            width = 4 if ".128" in op else 2 if ".64" in op else 1
            base = _registers(operands[0])[0]
            outstanding.append(set(range(base, base + width)))
            most = max(most, len(outstanding))
    return loads, most


def summarize(cubin: bytes) -> dict:
    """{"registers": int | None, "loops": [(loads, most outstanding)], "whole": (loads, most outstanding)}."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        sass = subprocess.run([_tool("cuobjdump"), "-sass", path], capture_output=True, text=True).stdout
        usage = subprocess.run([_tool("cuobjdump"), "-res-usage", path], capture_output=True, text=True).stdout
    registers = re.search(r"REG:(\d+)", usage)
    code = [(int(a, 16), t) for a, t in re.findall(r"^\s+/\*([0-9a-f]+)\*/\s+(.*?);", sass, re.M)]
    loops = []
    for address, text in code:
        branch = re.search(r"\bBRA\s+(?:`\(\.L_x_\d+\)\s*)?0x([0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < address:
            start = int(branch.group(1), 16)
            loops.append(outstanding_loads([t for a, t in code if start <= a <= address]))
    return {"registers": int(registers.group(1)) if registers else None, "loops": loops,
            "whole": outstanding_loads([t for _, t in code])}


def describe(summary: dict) -> str:
    loops = " ".join(f"loop[{n} LDG, {most} at once]" for n, most in summary["loops"]) or "no loop"
    n, most = summary["whole"]
    return f"{summary['registers']} registers; {loops}; whole kernel {n} LDG, {most} at once"
