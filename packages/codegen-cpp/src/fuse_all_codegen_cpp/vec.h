// fuse-all C++ explicit-vector helpers (vector_loops.py): added to a translation unit only when one of its
// kernels has a float16 loop written with explicit vectors. GCC 12 leaves float <-> float16 conversions
// scalar in `omp simd` loops, so the prelude's portable conversions emulate them with integer ops (~8 vector
// ops per rounding, ~11 per load); with F16C one `vcvtps2ph` + `vcvtph2ps` pair rounds (both round to
// nearest even, keep inf and subnormals, overflow to inf, make NaN quiet: torch's own vectorised kernels use
// the same instructions). GCC builtins and vector extensions, no intrinsics header (<immintrin.h> costs
// ~0.3 s of compile time). `FA_VEC` is the lane count, 0 where the target has no F16C (then every kernel
// takes its `#else` branch: the portable `omp simd` loop); -DFA_NO_VEC forces that branch (tests).
#if !defined(FA_NO_VEC) && defined(__GNUC__) && !defined(__clang__) && defined(__F16C__) && defined(__AVX512F__)
#define FA_VEC 16
typedef float fa_vf __attribute__((vector_size(64)));
typedef int32_t fa_vi __attribute__((vector_size(64)));
typedef short fa_vh __attribute__((vector_size(32)));
static inline fa_vf fa_vh2f(fa_vh h) { return __builtin_ia32_vcvtph2ps512_mask(h, (fa_vf){}, (unsigned short)-1, 4); }
static inline fa_vh fa_vf2h(fa_vf f) { return __builtin_ia32_vcvtps2ph512_mask(f, 0, (fa_vh){}, (unsigned short)-1); }
#elif !defined(FA_NO_VEC) && defined(__GNUC__) && !defined(__clang__) && defined(__F16C__) && defined(__AVX2__)
#define FA_VEC 8
typedef float fa_vf __attribute__((vector_size(32)));
typedef int32_t fa_vi __attribute__((vector_size(32)));
typedef short fa_vh __attribute__((vector_size(16)));
static inline fa_vf fa_vh2f(fa_vh h) { return __builtin_ia32_vcvtph2ps256(h); }
static inline fa_vh fa_vf2h(fa_vf f) { return __builtin_ia32_vcvtps2ph256(f, 0); }   // imm 0: nearest even
#else
#define FA_VEC 0
#endif

#if FA_VEC
// loads and stores of FA_VEC consecutive elements (unaligned)
static inline fa_vf fa_vload_h(const uint16_t* p) { fa_vh h; __builtin_memcpy(&h, p, sizeof h); return fa_vh2f(h); }
static inline void fa_vstore_h(uint16_t* p, fa_vf v) { const fa_vh h = fa_vf2h(v); __builtin_memcpy(p, &h, sizeof h); }
static inline fa_vf fa_vload_f(const float* p) { fa_vf v; __builtin_memcpy(&v, p, sizeof v); return v; }
static inline void fa_vstore_f(float* p, fa_vf v) { __builtin_memcpy(p, &v, sizeof v); }
// the prelude's scalar helpers, overloaded for vectors (a renderer template such as `fa_round_h({a})` or
// sigmoid's `1 / (1 + fa_expf(-{a}))` then reads the same for both)
static inline fa_vf fa_round_h(fa_vf x) { return fa_vh2f(fa_vf2h(x)); }
static inline fa_vf fa_vabs(fa_vf x) { return (fa_vf)((fa_vi)x & 0x7FFFFFFF); }
// accumulators (vector_loops.VECTOR_REDUCTIONS): lanes start at the identity, update as the scalar ones
static inline fa_vf fa_vsplat(float x) { fa_vf v; for (int i = 0; i < FA_VEC; ++i) v[i] = x; return v; }
static inline fa_vf fa_max(fa_vf a, fa_vf b) { return (a > b) | (a != a) ? a : b; }
static inline fa_vf fa_min(fa_vf a, fa_vf b) { return (a < b) | (a != a) ? a : b; }
// the lanes of an accumulator combined: sums pairwise, max/min NaN-propagating (prelude's fa_max)
static inline float fa_vsum(fa_vf v) {
  float s[FA_VEC];
  __builtin_memcpy(s, &v, sizeof v);
  for (int w = FA_VEC / 2; w; w /= 2)
    for (int i = 0; i < w; ++i) s[i] = s[i] + s[i + w];
  return s[0];
}
static inline float fa_vmax(fa_vf v) { float m = v[0]; for (int i = 1; i < FA_VEC; ++i) m = fa_max(m, v[i]); return m; }
static inline float fa_vmin(fa_vf v) { float m = v[0]; for (int i = 1; i < FA_VEC; ++i) m = fa_min(m, v[i]); return m; }
// fa_expf lane by lane: the same operations in the same order (bit-identical results; test_f16c.py)
static inline fa_vf fa_expf(fa_vf x) {
  const fa_vf t = x * 1.44269504088896341f + 12582912.0f;
  const fa_vf k = t - 12582912.0f;
  const fa_vf r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  const fa_vf zero = {};
  fa_vf p = zero + 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  fa_vi ki = (fa_vi)t - 0x4B400000;
  ki = ki < -150 ? 0 : (ki > 128 ? 128 : ki);
  const fa_vi k1 = ki >> 1, k2 = ki - k1;
  const fa_vf y = p * (fa_vf)((k1 + 127) << 23) * (fa_vf)((k2 + 127) << 23);
  return x < -104.0f ? zero : (x > 88.8f ? zero + __builtin_inff() : y);   // NaN: r, p and y are NaN
}
#endif
