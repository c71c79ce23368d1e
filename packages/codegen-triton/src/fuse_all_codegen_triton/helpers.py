"""Triton functions the generated kernels call as ``fa.<name>``: the semantics torch has and Triton's
builtins lack (NaN-propagating max/min, first-occurrence argmax, Python-style integer division).

Kept tiny and branch-free; every function works under the interpreter too.
"""
import triton
import triton.language as tl


@triton.jit
def maximum(a, b):
    # torch.maximum: NaN wins. (a > b) is False when either is NaN, so test a for NaN; a NaN b falls
    # through to b. Two nested wheres, not `(a > b) | (a != a)`: with a scalar `a` (a 0-d input
    # broadcast against a block) the interpreter computed `a != a` as a float block and `|` failed.
    return tl.where(a != a, a, tl.where(a > b, a, b))


@triton.jit
def minimum(a, b):
    return tl.where(a != a, a, tl.where(a < b, a, b))


# Reductions are written with Triton's builtin tl.max/tl.min/tl.sum: the interpreter runs those as NumPy
# calls, but a custom combine function one element at a time (100x slower), and on GPUs the extra tree
# reduction is noise next to the memory traffic of the kernel.
@triton.jit
def max_nan(x, axis):
    # torch.max propagates NaN; tl.max ignores it on GPUs
    has_nan = tl.max((x != x).to(tl.int8), axis) != 0
    return tl.where(has_nan, float("nan"), tl.max(x, axis))


@triton.jit
def min_nan(x, axis):
    has_nan = tl.max((x != x).to(tl.int8), axis) != 0
    return tl.where(has_nan, float("nan"), tl.min(x, axis))


@triton.jit
def welford_combine(mean, m2, weight, axis):
    # Chan's combine of per-lane Welford accumulators (mean_i, M2_i, n_i) along `axis`, with tl.sum only
    # (fast in the interpreter, a tree on GPUs): around the weighted mean m0 of the lanes,
    # M2 = sum M2_i + sum n_i d_i^2 - S^2 / n with d_i = mean_i - m0, S = sum n_i d_i, and mean = m0 + S / n
    # (the S terms remove m0's rounding). Lanes without a value (n_i = 0) count nowhere.
    n = tl.sum(weight, axis)
    m0 = tl.sum(weight * mean, axis) / n
    d = tl.where(weight > 0, mean - tl.expand_dims(m0, axis), 0.0)
    s = tl.sum(weight * d, axis)
    shift = s / n
    m2_total = tl.sum(m2, axis) + tl.abs(tl.sum(weight * d * d, axis) - s * shift)
    return m0 + shift, m2_total


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def prod(x, axis):
    return tl.reduce(x, axis, _mul)


@triton.jit
def argmax_combine(a, ai, b, bi):
    # Keep (a, ai) when it is larger, NaN (NaN is the extreme, like torch), or equal with a lower index:
    # the first occurrence wins, whatever order lanes are combined in. Nested wheres rather than `&`/`|`
    # of the NaN tests: with a scalar `b` (a stride-0 input loaded once) the interpreter made `b != b` a
    # float and `&` failed (like `maximum` above).
    a_nan = a != a
    b_nan = b != b
    keep = tl.where(a_nan, tl.where(b_nan, ai < bi, True),
                    tl.where(b_nan, False, tl.where(a == b, ai < bi, a > b)))
    return tl.where(keep, a, b), tl.where(keep, ai, bi)


@triton.jit
def argmin_combine(a, ai, b, bi):
    a_nan = a != a
    b_nan = b != b
    keep = tl.where(a_nan, tl.where(b_nan, ai < bi, True),
                    tl.where(b_nan, False, tl.where(a == b, ai < bi, a < b)))
    return tl.where(keep, a, b), tl.where(keep, ai, bi)


@triton.jit
def argmax(x, index, axis):
    # The lowest index holding the maximum, NaN counting as the maximum (torch.argmax). Integer x never
    # has NaN, and stays integer throughout (no float round trip for int64 values).
    has_nan = tl.expand_dims(tl.max((x != x).to(tl.int8), axis) != 0, axis)
    hit = tl.where(has_nan, x != x, x == tl.expand_dims(tl.max(x, axis), axis))
    return tl.min(tl.where(hit, index.to(tl.int64), 2**62), axis)


@triton.jit
def argmin(x, index, axis):
    has_nan = tl.expand_dims(tl.max((x != x).to(tl.int8), axis) != 0, axis)
    hit = tl.where(has_nan, x != x, x == tl.expand_dims(tl.min(x, axis), axis))
    return tl.min(tl.where(hit, index.to(tl.int64), 2**62), axis)


@triton.jit
def floordiv_int(a, b):
    # Triton's // truncates toward zero (C); Python/torch floor. Fix up when the signs differ.
    q = a // b
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@triton.jit
def remainder_int(a, b):
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def remainder_float(a, b):
    r = a % b  # fmod
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@triton.jit
def floordiv_float(a, b):
    # torch's div_floor_floating: exact for representable quotients, unlike floor(a / b).
    mod = a % b
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    floor_div = tl.floor(div)
    floor_div = tl.where(div - floor_div > 0.5, floor_div + 1.0, floor_div)
    floor_div = tl.where(div == 0, 0.0 * (a / b), floor_div)
    return tl.where(b == 0, a / b, floor_div)


@triton.jit
def pow_int(a, b):
    # Square-and-multiply over the exponent's bits (integer pow has no libdevice function).
    result = a * 0 + 1
    base = a + b * 0
    e = b + a * 0
    for _ in tl.static_range(63):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    return result


# In-kernel random numbers (IR ops rand/randn): Philox4x32-10 (Triton's `tl.randint4x`) of the counter
# (offset low word, offset high word, 0, 0) under the key (seed low word, seed high word). A float in
# [0, 1) is a word's top 24 bits times 2**-24, exactly (tl.rand scales all 31 bits in float32 and can
# round up to 1.0). The C++ prelude's fa_rand/fa_randn compute the same words.
@triton.jit
def rand(seed, offset):
    r0, _, _, _ = tl.randint4x(seed, offset)
    return (r0 >> 8).to(tl.float32) * 5.9604644775390625e-08


@triton.jit
def randn(seed, offset):
    # Box-Muller on the first two words; u1 in (0, 1] keeps the logarithm finite
    r0, r1, _, _ = tl.randint4x(seed, offset)
    u1 = ((r0 >> 8).to(tl.float32) + 1.0) * 5.9604644775390625e-08
    u2 = (r1 >> 8).to(tl.float32) * 5.9604644775390625e-08
    return tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
