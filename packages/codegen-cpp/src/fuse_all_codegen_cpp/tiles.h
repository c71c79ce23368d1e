// fuse-all C++ tile helpers: added to a translation unit only when one of its kernels uses them.
// GCC/Clang vector extensions, no intrinsics header (<immintrin.h> costs compile time): the shuffles below
// compile to AVX unpack/shuffle/permute instructions where the target has them.
typedef uint32_t fa_v8u __attribute__((vector_size(32)));
typedef int32_t fa_v8i __attribute__((vector_size(32)));
#if defined(__clang__)
#define FA_SHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define FA_SHUF(a, b, ...) __builtin_shuffle(a, b, (fa_v8i){__VA_ARGS__})
#endif

// dst[c * dst_stride + r] = src[r * src_stride + c] for an 8x8 block of 4-byte elements (any 4-byte type:
// the bits are moved, not converted). Strides in elements.
static inline void fa_transpose8x8_b32(const void* src_, int64_t src_stride, void* dst_, int64_t dst_stride) {
  // written out straight: with loops over arrays of vectors GCC -O2 keeps them on the stack (3x slower)
  const uint32_t* s = (const uint32_t*)src_;
  uint32_t* d = (uint32_t*)dst_;
  fa_v8u r0, r1, r2, r3, r4, r5, r6, r7;
  __builtin_memcpy(&r0, s, 32); __builtin_memcpy(&r1, s + src_stride, 32);
  __builtin_memcpy(&r2, s + 2 * src_stride, 32); __builtin_memcpy(&r3, s + 3 * src_stride, 32);
  __builtin_memcpy(&r4, s + 4 * src_stride, 32); __builtin_memcpy(&r5, s + 5 * src_stride, 32);
  __builtin_memcpy(&r6, s + 6 * src_stride, 32); __builtin_memcpy(&r7, s + 7 * src_stride, 32);
  const fa_v8u t0 = FA_SHUF(r0, r1, 0, 8, 1, 9, 4, 12, 5, 13), t1 = FA_SHUF(r0, r1, 2, 10, 3, 11, 6, 14, 7, 15);
  const fa_v8u t2 = FA_SHUF(r2, r3, 0, 8, 1, 9, 4, 12, 5, 13), t3 = FA_SHUF(r2, r3, 2, 10, 3, 11, 6, 14, 7, 15);
  const fa_v8u t4 = FA_SHUF(r4, r5, 0, 8, 1, 9, 4, 12, 5, 13), t5 = FA_SHUF(r4, r5, 2, 10, 3, 11, 6, 14, 7, 15);
  const fa_v8u t6 = FA_SHUF(r6, r7, 0, 8, 1, 9, 4, 12, 5, 13), t7 = FA_SHUF(r6, r7, 2, 10, 3, 11, 6, 14, 7, 15);
  const fa_v8u u0 = FA_SHUF(t0, t2, 0, 1, 8, 9, 4, 5, 12, 13), u1 = FA_SHUF(t0, t2, 2, 3, 10, 11, 6, 7, 14, 15);
  const fa_v8u u2 = FA_SHUF(t1, t3, 0, 1, 8, 9, 4, 5, 12, 13), u3 = FA_SHUF(t1, t3, 2, 3, 10, 11, 6, 7, 14, 15);
  const fa_v8u u4 = FA_SHUF(t4, t6, 0, 1, 8, 9, 4, 5, 12, 13), u5 = FA_SHUF(t4, t6, 2, 3, 10, 11, 6, 7, 14, 15);
  const fa_v8u u6 = FA_SHUF(t5, t7, 0, 1, 8, 9, 4, 5, 12, 13), u7 = FA_SHUF(t5, t7, 2, 3, 10, 11, 6, 7, 14, 15);
  r0 = FA_SHUF(u0, u4, 0, 1, 2, 3, 8, 9, 10, 11); r4 = FA_SHUF(u0, u4, 4, 5, 6, 7, 12, 13, 14, 15);
  r1 = FA_SHUF(u1, u5, 0, 1, 2, 3, 8, 9, 10, 11); r5 = FA_SHUF(u1, u5, 4, 5, 6, 7, 12, 13, 14, 15);
  r2 = FA_SHUF(u2, u6, 0, 1, 2, 3, 8, 9, 10, 11); r6 = FA_SHUF(u2, u6, 4, 5, 6, 7, 12, 13, 14, 15);
  r3 = FA_SHUF(u3, u7, 0, 1, 2, 3, 8, 9, 10, 11); r7 = FA_SHUF(u3, u7, 4, 5, 6, 7, 12, 13, 14, 15);
  __builtin_memcpy(d, &r0, 32); __builtin_memcpy(d + dst_stride, &r1, 32);
  __builtin_memcpy(d + 2 * dst_stride, &r2, 32); __builtin_memcpy(d + 3 * dst_stride, &r3, 32);
  __builtin_memcpy(d + 4 * dst_stride, &r4, 32); __builtin_memcpy(d + 5 * dst_stride, &r5, 32);
  __builtin_memcpy(d + 6 * dst_stride, &r6, 32); __builtin_memcpy(d + 7 * dst_stride, &r7, 32);
}
