"""The prelude's float16/bfloat16 roundings, on every float32 bit pattern: `fa_round_h` (float arithmetic,
what every float16 ATen result goes through) equals the round trip through the bit conversions
`fa_h2f(fa_f2h(x))` (loads and stores, bit-identical to torch), and `fa_round_b` gives a bfloat16 value."""
from __future__ import annotations

import ctypes

from fuse_all_codegen_cpp.compiler import load_library
from fuse_all_codegen_cpp.render import prelude

CHECK = r"""
extern "C" void fa_test_round_mismatches(int64_t* out) {
  int64_t half = 0, bfloat = 0;
  for (uint64_t hi = 0; hi < (1ull << 32); hi += (1u << 20)) {
    int64_t h = 0, b = 0;
    #pragma omp simd reduction(+:h, b)
    for (uint32_t lo = 0; lo < (1u << 20); lo++) {
      const float x = fa_bits_f((uint32_t)(hi + lo));
      const float fast = fa_round_h(x), exact = fa_h2f(fa_f2h(x));
      h += (exact != exact) ? (fast == fast) : (fa_f_bits(fast) != fa_f_bits(exact));
      const float r = fa_round_b(x);
      b += (x != x) ? (r == r) : ((fa_f_bits(r) & 0xFFFFu) != 0u || fa_round_b(r) != r);
    }
    half += h;
    bfloat += b;
  }
  out[0] = half;
  out[1] = bfloat;
}
"""


def test_float16_rounding_equals_the_bit_conversions_on_all_floats():
    lib = load_library(prelude() + CHECK)
    counts = (ctypes.c_int64 * 2)()
    fn = lib.cdll.fa_test_round_mismatches
    fn.argtypes, fn.restype = [ctypes.c_void_p], None
    fn(ctypes.addressof(counts))
    assert list(counts) == [0, 0]
