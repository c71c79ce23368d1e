"""bench/sass_loads.py: global loads a thread keeps in flight, counted over SASS text (the schedule ptxas chose
for train_resnet50's BatchNorm statistics: one load at a time, against several for the backward's sums)."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def sass_loads():
    spec = importlib.util.spec_from_file_location("sass_loads", BENCH / "sass_loads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_load_is_outstanding_until_an_instruction_reads_its_registers(sass_loads):
    serial = ["@P2 LDG.E.128 R12, desc[UR6][R32.64]", "FADD R31, R14, -R10", "FFMA R3, R44, R46, R3",
              "@P3 LDG.E.128 R12, desc[UR6][R40.64]", "FADD R31, R12, -R8"]
    assert sass_loads.outstanding_loads(serial) == (2, 1)
    batched = ["@P2 LDG.E.128 R12, desc[UR6][R20.64]", "@P2 LDG.E.128 R16, desc[UR6][R24.64]",
               "LDG.E.64 R28, desc[UR6][R26.64]", "FADD R5, R17, R1", "FADD R6, R29, R2",
               "STG.E.128 desc[UR6][R8.64], R12"]
    assert sass_loads.outstanding_loads(batched) == (3, 3)


def test_registers_are_read_by_their_number_not_a_prefix(sass_loads):
    # R1 is not R12..R15; a store reads its data registers
    lines = ["LDG.E.128 R12, desc[UR6][R2.64]", "FADD R1, R1, R1", "LDG.E R40, desc[UR6][R4.64]",
             "STG.E desc[UR6][R6.64], R40"]
    assert sass_loads.outstanding_loads(lines) == (2, 2)
