"""In-kernel random numbers (IR ops rand/randn) against a NumPy Philox4x32-10: every codegen must compute
the same words for a (seed, offset), bit for bit for rand (integer ops and an exact scaling), to libm's
rounding for randn (log, cos and sqrt of the same uniforms)."""
from __future__ import annotations

import numpy as np
import torch

from fuse_all_ir import Compute, IndexValue, Load, Store
from kernel_program_builders import Example, pointwise, program, spec, x0

_ROUND_A, _ROUND_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_KEY_A, _KEY_B = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LOW = np.uint64(0xFFFFFFFF)


def philox_words(seed: int, offsets: np.ndarray) -> tuple[np.ndarray, ...]:
    """Philox4x32-10 of the counters (offset low, offset high, 0, 0) under the key (seed low, seed high):
    the reference of Triton's tl.randint4x and the C++ prelude's fa_philox."""
    offsets = offsets.astype(np.int64).view(np.uint64)
    seed_bits = np.int64(seed).view(np.uint64)
    c0, c1 = (offsets & _LOW).astype(np.uint32), (offsets >> np.uint64(32)).astype(np.uint32)
    c2, c3 = np.zeros_like(c0), np.zeros_like(c0)
    k0, k1 = np.uint32(seed_bits & _LOW), np.uint32(seed_bits >> np.uint64(32))
    with np.errstate(over="ignore"):
        for _ in range(10):
            p0, p2 = _ROUND_A * c0.astype(np.uint64), _ROUND_B * c2.astype(np.uint64)
            c0, c2, c1, c3 = ((p2 >> np.uint64(32)).astype(np.uint32) ^ c1 ^ k0,
                              (p0 >> np.uint64(32)).astype(np.uint32) ^ c3 ^ k1,
                              (p2 & _LOW).astype(np.uint32), (p0 & _LOW).astype(np.uint32))
            k0, k1 = k0 + _KEY_A, k1 + _KEY_B
    return c0, c1, c2, c3


def reference_rand(seed: int, offsets: np.ndarray) -> np.ndarray:
    return (philox_words(seed, offsets)[0] >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)


def reference_randn(seed: int, offsets: np.ndarray) -> np.ndarray:
    r0, r1, _, _ = philox_words(seed, offsets)
    u1 = ((r0 >> np.uint32(8)).astype(np.float64) + 1.0) * 2.0 ** -24
    u2 = (r1 >> np.uint32(8)).astype(np.float64) * 2.0 ** -24
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)).astype(np.float32)


# seeds with both words set, a negative one, and zero; offsets past 2**32 exercise the counter's high word
SEEDS = (0x1234_5678_9ABC_DEF0, -3, 0)
OFFSET_BASE = (1 << 32) - 300


def random_numbers(device):
    """rand and randn of three seeds (an int64 input, loaded at constant indices) at offsets
    OFFSET_BASE + x0 (an int64 IndexValue crossing 2**32)."""
    n = 617
    body = [IndexValue("offset", OFFSET_BASE + x0, "int64")]
    for i in range(len(SEEDS)):
        body += [Load(f"s{i}", "arg0", i, "int64"),
                 Compute(f"u{i}", "rand", (f"s{i}", "offset"), "float32"), Store("buf0", i * n + x0, f"u{i}"),
                 Compute(f"z{i}", "randn", (f"s{i}", "offset"), "float32"), Store("buf1", i * n + x0, f"z{i}")]
    k = pointwise("kernel_0", [n], body, ["arg0"], ["buf0", "buf1"])
    p = program("random_numbers", device, {"arg0": spec("int64", [len(SEEDS)])},
                {"buf0": spec("float32", [len(SEEDS), n]), "buf1": spec("float32", [len(SEEDS), n])}, [k])
    seeds = torch.tensor(SEEDS, dtype=torch.int64, device=device)

    def expected(ins):
        offsets = np.arange(n, dtype=np.int64) + OFFSET_BASE
        rand = np.stack([reference_rand(s, offsets) for s in SEEDS])
        randn = np.stack([reference_randn(s, offsets) for s in SEEDS])
        return torch.from_numpy(rand).to(device), torch.from_numpy(randn).to(device)
    return Example(p, [seeds], expected)
