// fuse-all C++ prelude: the small helpers every generated translation unit starts with.
// Deliberately no <cmath>/<algorithm>/ATen headers: <cmath> alone costs ~0.2 s of compile time, more than
// compiling a whole small graph. Math functions are declared by the renderer (with `omp declare simd`
// where glibc's libmvec has a vector variant); everything else uses GCC/Clang builtins.
#include <stdint.h>
#include <omp.h>

// @MATH_DECLARATIONS@

// ---- float16 / bfloat16: stored as uint16_t, computed in float ----------------------------------------
// Branch-free bit conversions (after the FP16 library): GCC vectorises them, while `_Float16` conversions
// stay scalar in GCC 12 (no F16C `vcvtph2ps`/`vcvtps2ph` from `omp simd` loops). All round to nearest even,
// keep inf and make NaN quiet, bit-identical to torch (tests/codegen_cpp/test_half_round.py: every input).
// No float arithmetic here sees or makes a subnormal float: on AMD Zen 4 a vector op on one costs ~3x (a
// float16 load as `(h & 0x7FFF) << 13` times 2^112, 4 ops fewer, made a chain over data with 1/16
// float16 subnormals 1.4x slower), and float16 subnormals are common (softmax outputs).
static inline float fa_bits_f(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline uint32_t fa_f_bits(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float fa_h2f(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
  const float norm = fa_bits_f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denorm = fa_bits_f((two_w >> 17) | (126u << 23)) - 0.5f;
  return fa_bits_f(sign | (two_w < (1u << 27) ? fa_f_bits(denorm) : fa_f_bits(norm)));
}
static inline uint16_t fa_f2h(float f) {
  float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
  const uint32_t w = fa_f_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = fa_bits_f((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = fa_f_bits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
static inline float fa_b2f(uint16_t h) { return fa_bits_f((uint32_t)h << 16); }
static inline uint16_t fa_f2b(float f) {
  const uint32_t u = fa_f_bits(f);
  return f != f ? (uint16_t)0x7FC0u : (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
// A float rounded to the nearest float16 (ties to even), kept as a float: a cast to float16, and every
// float16 ATen op's result. Adding and subtracting 2^13 times x's binade leaves the FPU to round x at the
// float16 ulp of that binade (below float16's normal range: at the ulp of 2^-14, the subnormal spacing);
// from 65520 on, inf. Bit-identical to fa_h2f(fa_f2h(x)) on all 2^32 floats (NaN for NaN), and ~2.5x
// faster vectorised (8 vector ops instead of ~20): float16 pointwise chains round after every op.
static inline float fa_round_h(float x) {
  const float ax = __builtin_fabsf(x);
  uint32_t binade = fa_f_bits(ax) & 0x7F800000u;
  binade = binade < 0x38800000u ? 0x38800000u : binade;
  const float shift = fa_bits_f(binade + (13u << 23));
  const float r = (ax + shift) - shift;
  return __builtin_copysignf(ax >= 65520.0f ? __builtin_inff() : r, x);
}
// A float rounded to the nearest bfloat16, kept as a float (fa_b2f(fa_f2b(f)) without the 16-bit pack
// and unpack GCC emitted for that: 6 vector ops instead of ~10).
static inline float fa_round_b(float f) {
  const uint32_t u = fa_f_bits(f);
  return f != f ? fa_bits_f(0x7FC00000u) : fa_bits_f((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
}

// ---- NaN-propagating max/min (torch.maximum, amax) and their vectorisable OpenMP reductions ----------
static inline float fa_max(float a, float b) { return (a > b || a != a) ? a : b; }
static inline float fa_min(float a, float b) { return (a < b || a != a) ? a : b; }
static inline double fa_max(double a, double b) { return (a > b || a != a) ? a : b; }
static inline double fa_min(double a, double b) { return (a < b || a != a) ? a : b; }
#pragma omp declare reduction(fa_max : float : omp_out = fa_max(omp_out, omp_in)) initializer(omp_priv = -__builtin_inff())
#pragma omp declare reduction(fa_min : float : omp_out = fa_min(omp_out, omp_in)) initializer(omp_priv = __builtin_inff())
#pragma omp declare reduction(fa_max : double : omp_out = fa_max(omp_out, omp_in)) initializer(omp_priv = -__builtin_inf())
#pragma omp declare reduction(fa_min : double : omp_out = fa_min(omp_out, omp_in)) initializer(omp_priv = __builtin_inf())

// argmax/argmin step: the first extreme wins; NaN counts as the extreme (torch). `idx < 0`: nothing seen.
template <class T> static inline bool fa_argmax_takes(T v, int64_t idx, T best) {
  return idx < 0 || v > best || (v != v && best == best);
}
template <class T> static inline bool fa_argmin_takes(T v, int64_t idx, T best) {
  return idx < 0 || v < best || (v != v && best == best);
}

// Tiled (column) reductions: tiles as wide as possible (rows are then read sequentially), but narrow
// enough that every thread gets one when the other outer dims (`rows`) don't provide the parallelism.
static inline int64_t fa_tile_width(int64_t width, int64_t rows, int64_t max_tile) {
  const int64_t threads = omp_get_max_threads();
  const int64_t per_row = rows >= threads ? 1 : (threads + rows - 1) / rows;
  int64_t w = ((width + per_row - 1) / per_row + 15) / 16 * 16;
  return w < 32 ? 32 : (w > max_tile ? max_tile : w);
}

// ---- float sums: blocks of SUM_BLOCK (render.py) elements, vector lanes inside, then combined pairwise --
// One running accumulator over n elements has an error growing like n (5e-5 relative at 5M elements);
// blocks of 16384 plus a pairwise tree over the blocks keep it near eager's cascade sum.
// `level[k]` holds the sum of 2^k consecutive blocks when bit k of `n` is set (a binary counter).
template <class T> struct fa_cascade {
  T level[64];
  uint64_t n = 0;
  inline void add(T v) {
    int k = 0;
    for (uint64_t c = n; c & 1; c >>= 1, ++k) v = level[k] + v;
    level[k] = v;
    ++n;
  }
  inline T total() const {      // the smallest (most recent) partials first
    T s = 0;
    for (int k = 0; k < 64; ++k)
      if ((n >> k) & 1) s = s + level[k];
    return s;
  }
};
// Tiled (column) sums keep one accumulator per column; every FA_TILE_LEVEL_ROWS rows level k is added into
// level k + 1 (and cleared): each column sum is then a tree of fan-out 64 instead of one long chain.
#define FA_TILE_LEVEL_BITS 6
#define FA_TILE_LEVELS 5
// Called after every 64th row: level 0 (`acc`) goes into level 1, and so on while the row count is a
// multiple of 64^(k+2). `levels` holds levels 1.. as rows of `stride` columns.
template <class T> static inline void fa_tile_flush(T* acc, T* levels, int64_t stride, int64_t w, int64_t rows) {
  T* lo = acc;
  for (int k = 0; k < FA_TILE_LEVELS - 1; ++k) {
    T* up = levels + k * stride;
    #pragma omp simd
    for (int64_t j = 0; j < w; ++j) { up[j] = up[j] + lo[j]; lo[j] = 0; }
    if (k + 1 == FA_TILE_LEVELS - 1 || (rows & (((int64_t)1 << (FA_TILE_LEVEL_BITS * (k + 2))) - 1)) != 0) return;
    lo = up;
  }
}
template <class T> static inline void fa_tile_total(T* acc, const T* levels, int64_t stride, int64_t w) {
  for (int k = 0; k < FA_TILE_LEVELS - 1; ++k) {
    #pragma omp simd
    for (int64_t j = 0; j < w; ++j) acc[j] = acc[j] + levels[k * stride + j];
  }
}

// ---- Python-style integer and float division --------------------------------------------------------
// Integer division by zero traps in C (torch raises instead); we return 0 rather than kill the process.
#define FA_SIGNED(T) ((T)-1 < (T)0)
template <class T> static inline T fa_floordiv(T a, T b) {
  if (b == 0) return 0;
  if (FA_SIGNED(T) && b == (T)-1) return (T)(0ull - (unsigned long long)a);  // INT_MIN / -1 traps too
  const T q = a / b, r = a % b;
  return (T)(q - ((r != 0) & ((r < 0) != (b < 0))));
}
template <class T> static inline T fa_remainder(T a, T b) {
  if (b == 0 || (FA_SIGNED(T) && b == (T)-1)) return 0;
  const T r = a % b;
  return (T)((r != 0 && ((r < 0) != (b < 0))) ? r + b : r);
}
template <class T> static inline T fa_fmod_int(T a, T b) {
  return (b == 0 || (FA_SIGNED(T) && b == (T)-1)) ? (T)0 : (T)(a % b);
}
// ---- expf, inline and branch-free ----------------------------------------------------------------------
// libmvec's vector expf leaves its fast path for any lane beyond ~±87 (masked attention scores of -inf or
// -1e4, softmax tails): 5-12 ns per element there instead of 0.3. This one stays vectorised for every
// input: exp(x) = 2^k e^r with a Cody-Waite reduction and Cephes' minimax polynomial (<= 1 ulp against
// float64 over all floats), and 2^k applied in two halves so subnormal results come out right.
// k = round(x / ln2) comes from the 1.5 * 2^23 trick (its integer read from the bits): no float -> int
// conversion (undefined for NaN and huge x) and no clamping of x; out-of-range lanes are selected at the
// end. AMD EPYC, 512-bit vectors, 4096 floats in L1: 0.16 ns per element (0.25 with the clamps it replaces;
// SLEEF's expf_u10, Inductor's, 0.15); with -inf lanes (causal masks) the same.
static inline float fa_expf(float x) {
  const float t = x * 1.44269504088896341f + 12582912.0f;
  const float k = t - 12582912.0f;
  const float r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.0f;
  int32_t ki = (int32_t)(fa_f_bits(t) - 0x4B400000u);
  // lanes past the range are replaced below; k = 0 keeps their scaling out of slow subnormal multiplies
  ki = ki < -150 ? 0 : (ki > 128 ? 128 : ki);
  const int32_t k1 = ki >> 1, k2 = ki - k1;
  const float y = p * fa_bits_f((uint32_t)(k1 + 127) << 23) * fa_bits_f((uint32_t)(k2 + 127) << 23);
  return x < -104.0f ? 0.0f : (x > 88.8f ? __builtin_inff() : y);   // NaN: r, p and y are NaN
}

// libm by type, so the float/double helpers below are one template each
static inline float fa_fmod(float a, float b) { return fmodf(a, b); }
static inline double fa_fmod(double a, double b) { return fmod(a, b); }
static inline float fa_log(float a) { return logf(a); }
static inline double fa_log(double a) { return log(a); }
static inline float fa_exp(float a) { return fa_expf(a); }
static inline double fa_exp(double a) { return exp(a); }
static inline float fa_erf(float a) { return erff(a); }
static inline double fa_erf(double a) { return erf(a); }

// torch's div_floor_floating and its fmod-based remainder
template <class T> static inline T fa_floordiv_float(T a, T b) {
  if (b == 0) return a / b;
  const T mod = fa_fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return __builtin_copysign(0.0, a / b);
  const T fl = __builtin_floor(div);
  return div - fl > (T)0.5 ? fl + 1 : fl;
}
template <class T> static inline T fa_remainder_float(T a, T b) {
  const T mod = fa_fmod(a, b);
  return (mod != 0 && ((b < 0) != (mod < 0))) ? mod + b : mod;
}


// ---- shifts and integer pow with torch's out-of-range behaviour --------------------------------------
template <class T> static inline T fa_shl(T a, T b) {
  const int bits = 8 * (int)sizeof(T);
  return (b < 0 || b >= bits) ? (T)0 : (T)((unsigned long long)a << b);
}
template <class T> static inline T fa_shr(T a, T b) {
  const int bits = 8 * (int)sizeof(T);
  if (FA_SIGNED(T)) return (T)(a >> ((b < 0 || b >= bits) ? bits - 1 : b));
  return (b < 0 || b >= bits) ? (T)0 : (T)(a >> b);
}
// max/min of symbolic sizes (torch's Max/Min in index expressions): plain comparisons, no NaN rules
template <class T> static inline T fa_sym_max(T a, T b) { return a > b ? a : b; }
template <class T> static inline T fa_sym_min(T a, T b) { return a < b ? a : b; }
template <class T> static inline T fa_ipow(T base, T exp) {
  if (exp < 0) return base == 1 ? (T)1 : (base == (T)-1 ? ((exp & 1) ? (T)-1 : (T)1) : (T)0);
  unsigned long long result = 1, b = (unsigned long long)base;
  for (unsigned long long e = (unsigned long long)exp; e; e >>= 1, b *= b)
    if (e & 1) result *= b;
  return (T)result;
}

// ---- erfinv: torch's calc_erfinv (rational approximation + two Newton steps) -------------------------
template <class T> static inline T fa_erfinv(T y) {
  const T ay = y < 0 ? -y : y;
  const T z0 = y * y;
  const T num0 = ((T(-0.140543331) * z0 + T(0.914624893)) * z0 + T(-1.645349621)) * z0 + T(0.886226899);
  const T dem0 = (((T(0.012229801) * z0 + T(-0.329097515)) * z0 + T(1.442710462)) * z0 + T(-2.118377725)) * z0 + 1;
  const T z1 = __builtin_sqrt(-fa_log((1 - ay) / 2));
  const T num1 = ((T(1.641345311) * z1 + T(3.429567803)) * z1 + T(-1.624906493)) * z1 + T(-1.970840454);
  const T dem1 = (T(1.637067800) * z1 + T(3.543889200)) * z1 + 1;
  T x = ay <= T(0.7) ? y * num0 / dem0 : T(__builtin_copysign(num1, y)) / dem1;
  const T k = T(1.1283791670955126);  // 2 / sqrt(pi)
  x = x - (fa_erf(x) - y) / (k * fa_exp(-x * x));
  x = x - (fa_erf(x) - y) / (k * fa_exp(-x * x));
  return ay > 1 ? T(__builtin_nan("")) : (ay == 1 ? T(__builtin_copysign(__builtin_inf(), y)) : x);
}

// ---- in-kernel random numbers (IR ops rand/randn): the Triton target's fa.rand/fa.randn, word for word --
// Philox4x32-10 of the counter (offset low, offset high, 0, 0) under the key (seed low, seed high), as
// Triton's tl.randint4x; a float in [0, 1) is a word's top 24 bits times 2**-24 (exact).
static inline void fa_philox(int64_t seed, int64_t offset, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)(uint64_t)offset, c1 = (uint32_t)((uint64_t)offset >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)(uint64_t)seed, k1 = (uint32_t)((uint64_t)seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p2 = (uint64_t)0xCD9E8D57u * c2;
    const uint32_t n0 = (uint32_t)(p2 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p2; c3 = (uint32_t)p0; c0 = n0; c2 = n2;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
static inline float fa_rand(int64_t seed, int64_t offset) {
  uint32_t r[4];
  fa_philox(seed, offset, r);
  return (float)(r[0] >> 8) * 5.9604644775390625e-08f;
}
static inline float fa_randn(int64_t seed, int64_t offset) {
  uint32_t r[4];
  fa_philox(seed, offset, r);
  const float u1 = ((float)(r[0] >> 8) + 1.0f) * 5.9604644775390625e-08f;
  const float u2 = (float)(r[1] >> 8) * 5.9604644775390625e-08f;
  return __builtin_sqrtf(-2.0f * fa_log(u1)) * cosf(6.283185307179586f * u2);
}
