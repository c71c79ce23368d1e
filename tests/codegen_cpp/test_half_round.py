"""The prelude's float16/bfloat16 conversions and roundings, on every input bit pattern, against the FP16
library's formulas (the ones torch's scalar `c10::Half` / `c10::BFloat16` conversions use, kept here as the
reference): `fa_h2f` on all 2^16 float16s, `fa_f2h`, `fa_round_h` (= reference f2h then h2f) and
`fa_round_b` (= reference f2b then b2f) on all 2^32 floats. Bits must match exactly, NaN included (a NaN
from the reference is a NaN from ours; the payloads agree too: both quiet NaN the same way)."""
from __future__ import annotations

import ctypes

import torch

from fuse_all_codegen_cpp.compiler import load_library
from fuse_all_codegen_cpp.render import prelude

REFERENCE = r"""
static inline float ref_h2f(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
  const float norm = fa_bits_f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denorm = fa_bits_f((two_w >> 17) | (126u << 23)) - 0.5f;
  return fa_bits_f(sign | (two_w < (1u << 27) ? fa_f_bits(denorm) : fa_f_bits(norm)));
}
static inline uint16_t ref_f2h(float f) {
  float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = fa_f_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = fa_bits_f((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = fa_f_bits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
static inline uint16_t ref_f2b(float f) {   // c10::round_to_nearest_even
  const uint32_t u = fa_f_bits(f);
  return f != f ? (uint16_t)0x7FC0u : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

extern "C" void fa_test_h2f(const uint16_t* h, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i++) out[i] = fa_h2f(h[i]);
}

// counts of mismatches: [h2f, f2h, round_h, round_b, f2b]
extern "C" void fa_test_mismatches(int64_t* out) {
  int64_t h2f = 0;
  #pragma omp simd reduction(+:h2f)
  for (uint32_t h = 0; h < 65536u; h++) h2f += fa_f_bits(fa_h2f((uint16_t)h)) != fa_f_bits(ref_h2f((uint16_t)h));
  int64_t f2h = 0, round_h = 0, round_b = 0, f2b = 0;
  for (uint64_t hi = 0; hi < (1ull << 32); hi += (1u << 20)) {
    int64_t a = 0, b = 0, c = 0, d = 0;
    #pragma omp simd reduction(+:a, b, c, d)
    for (uint32_t lo = 0; lo < (1u << 20); lo++) {
      const float x = fa_bits_f((uint32_t)(hi + lo));
      a += fa_f2h(x) != ref_f2h(x);
      b += fa_f_bits(fa_round_h(x)) != fa_f_bits(ref_h2f(ref_f2h(x))) && x == x;
      b += x != x && fa_round_h(x) == fa_round_h(x);
      c += fa_f_bits(fa_round_b(x)) != ((uint32_t)ref_f2b(x) << 16);
      d += fa_f2b(x) != ref_f2b(x);
    }
    f2h += a; round_h += b; round_b += c; f2b += d;
  }
  out[0] = h2f; out[1] = f2h; out[2] = round_h; out[3] = round_b; out[4] = f2b;
}
"""


def _library():
    return load_library(prelude() + REFERENCE)


def test_conversions_and_roundings_equal_the_reference_formulas_on_every_input():
    counts = (ctypes.c_int64 * 5)()
    fn = _library().cdll.fa_test_mismatches
    fn.argtypes, fn.restype = [ctypes.c_void_p], None
    fn(ctypes.addressof(counts))
    assert dict(zip(["h2f", "f2h", "round_h", "round_b", "f2b"], counts)) == \
        {"h2f": 0, "f2h": 0, "round_h": 0, "round_b": 0, "f2b": 0}


def test_every_float16_converts_to_torchs_float_bit_for_bit():
    """NaNs included: a signalling NaN comes back quiet with its payload, as torch's `.float()` gives."""
    halves = torch.arange(65536, dtype=torch.int32).to(torch.uint16)
    out = torch.empty(65536, dtype=torch.float32)
    fn = _library().cdll.fa_test_h2f
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    fn(halves.data_ptr(), out.data_ptr(), 65536)
    expected = halves.view(torch.float16).float()
    assert torch.equal(out.view(torch.int32), expected.view(torch.int32))
