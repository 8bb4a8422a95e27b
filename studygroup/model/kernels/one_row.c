/* The kernels of one new member's pass during generation (studygroup.model.row_kernels).
 *
 * sg_matvec: one row times a matrix kept as a GGUF file's quantized blocks, without dequantizing it.
 * y (rows,) = W (rows, cols) · x (cols,): W's rows are the file's rows (one output each), each a run
 * of blocks (32 weights, or super-blocks of 256 for the K-quants and IQ4_XS). A weight is rebuilt in
 * float32 exactly as gguf's dequantizer (gguf/quants.py, numpy float32) computes it, with its
 * groupings: d·q, d·q + m, (d·sc)·q, (d·sc)·q − (dmin·m); then multiplied and summed in float32: the
 * same weights as the float32 matrix, a summation order of its own. The step reads 4.5 to 8.5 bits a
 * weight instead of float32's 32: a step of generation is bound by memory bandwidth, not arithmetic.
 *
 * Float operations: every product d·sc·q is exact in float32 (d, a half, has 11 significant bits; the
 * integers sc·q at most 13: Q6_K's |sc| ≤ 128 times |q| ≤ 32), so the order of the multiplications
 * cannot change a weight, and the one rounding is that of + m or − dmin·m (dmin·m exact too). The
 * plain path writes numpy's operations as they are (-std=c11: a*b + c is two roundings, never fused);
 * the vectorized paths fuse d·q + m, whose one rounding equals numpy's two because d·q is exact.
 *
 * Paths: AVX-512 (F and BW) for Q4_K and Q6_K, 16 weights to a register, Q4_K's weights looked up in a
 * 16-entry register of its sub-block's weights; AVX2 (with FMA and F16C) for every type, 8 to a
 * register; and a plain one. Each multiplies the same float32 weights; the sums' orders differ (16,
 * 8 or 1 running sums a row, added at the end).
 *
 * Block layouts (ggml's, little-endian; f16 = IEEE half; "nibbles" of 16 bytes hold 32 codes:
 * code j < 16 is qs[j] & 15, code j ≥ 16 is qs[j − 16] >> 4):
 *   Q4_0   (32, 18 bytes)  {f16 d; u8 qs[16]}                      w = d·(q − 8)
 *   Q4_1   (32, 20)        {f16 d, m; u8 qs[16]}                   w = d·q + m
 *   Q5_0   (32, 22)        {f16 d; u32 qh; u8 qs[16]}              q = nibble | bit j of qh << 4; w = d·(q − 16)
 *   Q5_1   (32, 24)        {f16 d, m; u32 qh; u8 qs[16]}           w = d·q + m
 *   Q8_0   (32, 34)        {f16 d; i8 qs[32]}                      w = d·q
 *   IQ4_NL (32, 18)        {f16 d; u8 qs[16]}                      w = d·KVALUES[nibble]
 *   Q2_K   (256, 84)       {u8 scales[16]; u8 qs[64]; f16 d, dmin}
 *          weight i = 128g + 32s + k (g < 2, s < 4, k < 32): q = qs[32g + k] >> 2s & 3; sub-block i / 16
 *          has sc = scales & 15, m = scales >> 4;  w = (d·sc)·q − (dmin·m)
 *   Q3_K   (256, 110)      {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}
 *          low 2 bits as Q2_K's; high bit = hmask[i % 32] >> (i / 32) & 1, and q = low − 4 where it is 0;
 *          16 signed 6-bit scales (i / 16): low 4 bits scales[n % 8] >> 4(n / 8), high 2 bits
 *          scales[8 + n % 4] >> 2(n / 4), minus 32;  w = (d·sc)·q
 *   Q4_K   (256, 144)      {f16 d, dmin; u8 scales[12]; u8 qs[128]}
 *          sub-block j of 32 (j < 8): nibble j % 2 of qs[32(j / 2) + k]; 6-bit sc, m packed as
 *          j < 4: s[j] & 63, s[j + 4] & 63;  j ≥ 4: s[j + 4] & 15 | s[j − 4] >> 6 << 4, s[j + 4] >> 4 | s[j] >> 6 << 4
 *          w = (d·sc)·q − (dmin·m)
 *   Q5_K   (256, 176)      {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}  Q4_K's with bit j of qh[k] << 4
 *   Q6_K   (256, 210)      {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}
 *          weight i = 128g + r: low 4 bits ql[64g + r % 64] >> 4(r / 64), high 2 bits qh[32g + r % 32] >> 2(r / 32);
 *          q − 32;  w = (d·scales[i / 16])·q
 *   IQ4_XS (256, 136)      {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}
 *          sub-block j of 32: nibbles qs[16j ..]; sc = (scales_l[j / 2] >> 4(j % 2) & 15 | (scales_h >> 2j & 3) << 4) − 32;
 *          w = (d·sc)·KVALUES[code]
 *
 * sg_matvec_parts: the same for the parts of a fused matrix (W_Q, W_K, W_V; gate and up) in one
 * call, each output written at its place: the parts' rows split among as many OpenMP threads as the
 * caller asks (torch's count), in one parallel region. sg_matvec uses OpenMP's own count.
 *
 * sg_dequantize_rows: chosen rows of such a matrix as float32, for a pass over many rows.
 *
 * sg_attend_row: one question row's attention over the key/value cache, every head in one call.
 */
#include <stdint.h>
#include <math.h>
#include <string.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

enum { Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13,
       Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23 };  /* GGML's type numbers */

/* IQ4_NL's and IQ4_XS's one table: a 4-bit code's value, non-linear. */
static const int8_t KVALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Weights a block holds (0: a type not read), and its bytes in *bytes. */
static int block_layout(int qtype, int *bytes) {
    switch (qtype) {
    case Q4_0: case IQ4_NL: *bytes = 18; return 32;
    case Q4_1: *bytes = 20; return 32;
    case Q5_0: *bytes = 22; return 32;
    case Q5_1: *bytes = 24; return 32;
    case Q8_0: *bytes = 34; return 32;
    case Q2_K: *bytes = 84; return 256;
    case Q3_K: *bytes = 110; return 256;
    case Q4_K: *bytes = 144; return 256;
    case Q5_K: *bytes = 176; return 256;
    case Q6_K: *bytes = 210; return 256;
    case IQ4_XS: *bytes = 136; return 256;
    default: *bytes = 0; return 0;
    }
}

/* IEEE half -> float, exact (F16C's instruction where the CPU has it). */
static float half(const uint8_t *p) {
    uint16_t h; memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#endif
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
    if (exp == 0x1F) bits = sign | 0x7F800000 | (man << 13);
    else if (exp) bits = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man) bits = sign;
    else {  /* subnormal: normalise */
        exp = 113;
        while (!(man & 0x400)) { man <<= 1; exp--; }
        bits = sign | (exp << 23) | ((man & 0x3FF) << 13);
    }
    float f; memcpy(&f, &bits, 4);
    return f;
}

/* Code j (< 32) of 16 bytes of nibbles. */
static inline int nibble(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }

static inline uint32_t u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* The 32-weight types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL. Each loop has no branch inside, so
 * that the compiler turns it into vector instructions (a pass dequantizes a layer at a time). */
static void small_block(int qtype, const uint8_t *b, float *w) {
    const float d = half(b);
    if (qtype == Q8_0) {
        for (int j = 0; j < 32; j++) w[j] = d * (float)(int8_t)b[2 + j];
    } else if (qtype == Q4_0) {
        for (int j = 0; j < 16; j++) w[j] = d * (float)((b[2 + j] & 15) - 8), w[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
    } else if (qtype == IQ4_NL) {
        for (int j = 0; j < 32; j++) w[j] = d * (float)KVALUES[nibble(b + 2, j)];
    } else if (qtype == Q4_1) {
        const float m = half(b + 2);
        for (int j = 0; j < 16; j++) w[j] = d * (float)(b[4 + j] & 15) + m, w[j + 16] = d * (float)(b[4 + j] >> 4) + m;
    } else {  /* Q5_0, Q5_1: a fifth bit per weight in qh */
        const int one = qtype == Q5_1;
        const uint32_t qh = u32(b + 2 + 2 * one);
        const uint8_t *qs = b + 6 + 2 * one;
        const float m = one ? half(b + 2) : 0.0f;
        int q[32];
        for (int j = 0; j < 16; j++) {
            q[j] = (qs[j] & 15) | (int)((qh >> j & 1) << 4);
            q[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 16) & 1) << 4);
        }
        if (one) for (int j = 0; j < 32; j++) w[j] = d * (float)q[j] + m;
        else for (int j = 0; j < 32; j++) w[j] = d * (float)(q[j] - 16);
    }
}

/* Q2_K: 16 sub-blocks of 16, 2-bit codes, 4-bit scale and min each. Weight 128g + 32s + k. */
static void q2_k(const uint8_t *b, float *w) {
    const uint8_t *scales = b, *qs = b + 16;
    const float d = half(b + 80), dmin = half(b + 82);
    for (int g = 0; g < 2; g++)
        for (int s = 0; s < 4; s++, w += 32)
            for (int k = 0; k < 32; k++) {
                const int sc = scales[8 * g + 2 * s + k / 16];
                const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
                w[k] = dl * (float)(qs[32 * g + k] >> 2 * s & 3) - ml;
            }
}

/* Q3_K: 16 sub-blocks of 16, 3-bit signed codes (2 low bits, a high bit whose absence subtracts 4),
 * signed 6-bit scales. Weight 128g + 32s + k. */
static void q3_k(const uint8_t *b, float *w) {
    const uint8_t *hmask = b, *qs = b + 32, *p = b + 96;
    const float d = half(b + 108);
    float dl[16];
    for (int n = 0; n < 16; n++) dl[n] = d * (float)(((p[n % 8] >> 4 * (n / 8) & 15) | (p[8 + n % 4] >> 2 * (n / 4) & 3) << 4) - 32);
    for (int g = 0; g < 2; g++)
        for (int s = 0; s < 4; s++, w += 32)
            for (int k = 0; k < 32; k++) {
                const int q = (qs[32 * g + k] >> 2 * s & 3) - (hmask[k] >> (4 * g + s) & 1 ? 0 : 4);
                w[k] = dl[8 * g + 2 * s + k / 16] * (float)q;
            }
}

/* Q4_K's and Q5_K's 6-bit scale and min of sub-block j (< 8), from their 12 packed bytes. */
static void scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63, *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4, *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Q4_K (qh NULL) and Q5_K: 8 sub-blocks of 32, 4- or 5-bit codes, 6-bit scale and min each. */
static void q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, float *w) {
    const float d = half(b), dmin = half(b + 2);
    for (int j = 0; j < 8; j++) {
        int sc, m, q[32];
        scale_min(b + 4, j, &sc, &m);
        const float ds = d * (float)sc, dm = dmin * (float)m;
        const uint8_t *codes = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        for (int k = 0; k < 32; k++) q[k] = codes[k] >> shift & 15;
        if (qh) for (int k = 0; k < 32; k++) q[k] |= (qh[k] >> j & 1) << 4;
        for (int k = 0; k < 32; k++) w[32 * j + k] = ds * (float)q[k] - dm;
    }
}

/* Q6_K: 16 sub-blocks of 16, 6-bit signed codes, signed 8-bit scales. Weight 128g + 32s + k. */
static void q6_k(const uint8_t *b, float *w) {
    const int8_t *scales = (const int8_t *)(b + 192);
    const float d = half(b + 208);
    for (int g = 0; g < 2; g++)
        for (int s = 0; s < 4; s++, w += 32) {
            const uint8_t *ql = b + 64 * g + 32 * (s % 2), *qh = b + 128 + 32 * g;
            const float d0 = d * (float)scales[8 * g + 2 * s], d1 = d * (float)scales[8 * g + 2 * s + 1];
            int q[32];
            for (int k = 0; k < 32; k++) q[k] = ((ql[k] >> 4 * (s / 2) & 15) | (qh[k] >> 2 * s & 3) << 4) - 32;
            for (int k = 0; k < 16; k++) w[k] = d0 * (float)q[k], w[k + 16] = d1 * (float)q[k + 16];
        }
}

/* IQ4_XS: 8 sub-blocks of 32, 4-bit codes into KVALUES, signed 6-bit scales. */
static void iq4_xs(const uint8_t *b, float *w) {
    const float d = half(b);
    const unsigned scales_h = b[2] | b[3] << 8;
    for (int j = 0; j < 8; j++) {
        const int sc = ((b[4 + j / 2] >> 4 * (j % 2) & 15) | (scales_h >> 2 * j & 3) << 4) - 32;
        const float dl = d * (float)sc;
        for (int k = 0; k < 32; k++) w[32 * j + k] = dl * (float)KVALUES[nibble(b + 8 + 16 * j, k)];
    }
}

/* The weights of one block (32 or 256), as gguf dequantizes them. */
static void block_weights(int qtype, const uint8_t *b, float *w) {
    switch (qtype) {
    case Q2_K: q2_k(b, w); break;
    case Q3_K: q3_k(b, w); break;
    case Q4_K: q45_k(b, NULL, b + 16, w); break;
    case Q5_K: q45_k(b, b + 16, b + 48, w); break;
    case Q6_K: q6_k(b, w); break;
    case IQ4_XS: iq4_xs(b, w); break;
    default: small_block(qtype, b, w);
    }
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 bytes (the low half of v) as 8 floats. */
#define U8_PS(v) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
#define I8_PS(v) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))

/* Q4_0, Q4_1, Q8_0: each block's weights built in registers. */
static float row_dot_32(int qtype, const uint8_t *b, const float *x, int nb) {
    int size;
    block_layout(qtype, &size);
    const __m128i low = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, w0, w1, w2, w3;
    for (int i = 0; i < nb; i++, b += size, x += 32) {
        __m256 d = _mm256_set1_ps(half(b));
        if (qtype == Q8_0) {
            __m128i r0 = _mm_loadu_si128((const __m128i *)(b + 2)), r1 = _mm_loadu_si128((const __m128i *)(b + 18));
            w0 = _mm256_mul_ps(d, I8_PS(r0));
            w1 = _mm256_mul_ps(d, I8_PS(_mm_srli_si128(r0, 8)));
            w2 = _mm256_mul_ps(d, I8_PS(r1));
            w3 = _mm256_mul_ps(d, I8_PS(_mm_srli_si128(r1, 8)));
        } else if (qtype == Q4_1) {
            __m256 m = _mm256_set1_ps(half(b + 2));
            __m128i raw = _mm_loadu_si128((const __m128i *)(b + 4));
            __m128i lo = _mm_and_si128(raw, low), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
            w0 = _mm256_fmadd_ps(d, U8_PS(lo), m);
            w1 = _mm256_fmadd_ps(d, U8_PS(_mm_srli_si128(lo, 8)), m);
            w2 = _mm256_fmadd_ps(d, U8_PS(hi), m);
            w3 = _mm256_fmadd_ps(d, U8_PS(_mm_srli_si128(hi, 8)), m);
        } else {  /* Q4_0 */
            __m128i raw = _mm_loadu_si128((const __m128i *)(b + 2));
            __m128i lo = _mm_sub_epi8(_mm_and_si128(raw, low), eight);
            __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low), eight);
            w0 = _mm256_mul_ps(d, I8_PS(lo));
            w1 = _mm256_mul_ps(d, I8_PS(_mm_srli_si128(lo, 8)));
            w2 = _mm256_mul_ps(d, I8_PS(hi));
            w3 = _mm256_mul_ps(d, I8_PS(_mm_srli_si128(hi, 8)));
        }
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a1);
        a2 = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), a2);
        a3 = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), a3);
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* The other types' codes are built 16 at a time as signed bytes, then turned into weights. Every
 * weight's product d·sc·q is exact in float32 (see the header), so a fused d·q + m is numpy's value. */

/* a[0], a[1] += w · x for 16 weights w = d·c + m (d·c where !with_m); c: 16 signed bytes. */
static inline void acc16(__m128i c, float d, float m, int with_m, const float *x, __m256 *a) {
    const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
    __m256 w0 = I8_PS(c), w1 = I8_PS(_mm_srli_si128(c, 8));
    w0 = with_m ? _mm256_fmadd_ps(dv, w0, mv) : _mm256_mul_ps(dv, w0);
    w1 = with_m ? _mm256_fmadd_ps(dv, w1, mv) : _mm256_mul_ps(dv, w1);
    a[0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), a[0]);
    a[1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a[1]);
}

/* 0x10 in byte j where bit j of 16 bits is set, else 0. */
static inline __m128i bit_bytes(unsigned bits) {
    const __m128i spread = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m128i select = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    __m128i v = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)bits), spread);
    return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(v, select), select), _mm_set1_epi8(0x10));
}

/* 0xFF in byte k where bytes[k] has the bit `bit` set, else 0. */
static inline __m128i has_bit(__m128i bytes, int bit) {
    const __m128i b = _mm_set1_epi8((char)bit);
    return _mm_cmpeq_epi8(_mm_and_si128(bytes, b), b);
}

static inline __m128i shr_bits(__m128i v, int n, int mask) {  /* (byte >> n) & mask, per byte */
    return _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(n)), _mm_set1_epi8((char)mask));
}

static void block_q5(int qtype, const uint8_t *b, const float *x, __m256 *a) {
    const int one = qtype == Q5_1;
    const float d = half(b), m = one ? half(b + 2) : 0.0f;
    const uint32_t qh = u32(b + 2 + 2 * one);
    const __m128i raw = _mm_loadu_si128((const __m128i *)(b + 6 + 2 * one)), off = _mm_set1_epi8(one ? 0 : 16);
    const __m128i c0 = _mm_or_si128(shr_bits(raw, 0, 15), bit_bytes(qh & 0xFFFF));
    const __m128i c1 = _mm_or_si128(shr_bits(raw, 4, 15), bit_bytes(qh >> 16));
    acc16(_mm_sub_epi8(c0, off), d, m, one, x, a);
    acc16(_mm_sub_epi8(c1, off), d, m, one, x + 16, a + 2);
}

static void block_iq4_nl(const uint8_t *b, const float *x, __m256 *a) {
    const __m128i table = _mm_loadu_si128((const __m128i *)KVALUES), raw = _mm_loadu_si128((const __m128i *)(b + 2));
    const float d = half(b);
    acc16(_mm_shuffle_epi8(table, shr_bits(raw, 0, 15)), d, 0.0f, 0, x, a);
    acc16(_mm_shuffle_epi8(table, shr_bits(raw, 4, 15)), d, 0.0f, 0, x + 16, a + 2);
}

static void block_q2_k(const uint8_t *b, const float *x, __m256 *a) {
    const float d = half(b + 80), dmin = half(b + 82);
    for (int g = 0; g < 2; g++) {
        const __m128i q0 = _mm_loadu_si128((const __m128i *)(b + 16 + 32 * g)), q1 = _mm_loadu_si128((const __m128i *)(b + 32 + 32 * g));
        for (int s = 0; s < 4; s++) {
            const int n = 8 * g + 2 * s;  /* the sub-block of 16 */
            acc16(shr_bits(q0, 2 * s, 3), d * (float)(b[n] & 15), -(dmin * (float)(b[n] >> 4)), 1, x + 16 * n, a);
            acc16(shr_bits(q1, 2 * s, 3), d * (float)(b[n + 1] & 15), -(dmin * (float)(b[n + 1] >> 4)), 1, x + 16 * n + 16, a + 2);
        }
    }
}

static void block_q3_k(const uint8_t *b, const float *x, __m256 *a) {
    const uint8_t *s = b + 96;
    const float d = half(b + 108);
    const __m128i h0 = _mm_loadu_si128((const __m128i *)b), h1 = _mm_loadu_si128((const __m128i *)(b + 16)), four = _mm_set1_epi8(4);
    for (int g = 0; g < 2; g++) {
        const __m128i q0 = _mm_loadu_si128((const __m128i *)(b + 32 + 32 * g)), q1 = _mm_loadu_si128((const __m128i *)(b + 48 + 32 * g));
        for (int sh = 0; sh < 4; sh++) {
            const int n = 8 * g + 2 * sh, bit = 1 << (4 * g + sh);
            const int sc0 = ((s[n % 8] >> 4 * (n / 8) & 15) | (s[8 + n % 4] >> 2 * (n / 4) & 3) << 4) - 32;
            const int sc1 = ((s[(n + 1) % 8] >> 4 * (n / 8) & 15) | (s[8 + (n + 1) % 4] >> 2 * (n / 4) & 3) << 4) - 32;
            acc16(_mm_sub_epi8(shr_bits(q0, 2 * sh, 3), _mm_andnot_si128(has_bit(h0, bit), four)), d * (float)sc0, 0.0f, 0, x + 16 * n, a);
            acc16(_mm_sub_epi8(shr_bits(q1, 2 * sh, 3), _mm_andnot_si128(has_bit(h1, bit), four)), d * (float)sc1, 0.0f, 0, x + 16 * n + 16, a + 2);
        }
    }
}

/* Q4_K (qh NULL) and Q5_K. */
static void block_q45_k(const uint8_t *b, const uint8_t *qh, const uint8_t *qs, const float *x, __m256 *a) {
    const float d = half(b), dmin = half(b + 2);
    const __m128i zero = _mm_setzero_si128();
    const __m128i h0 = qh ? _mm_loadu_si128((const __m128i *)qh) : zero, h1 = qh ? _mm_loadu_si128((const __m128i *)(qh + 16)) : zero;
    const __m128i sixteen = _mm_set1_epi8(16);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        scale_min(b + 4, j, &sc, &m);
        const __m128i r0 = _mm_loadu_si128((const __m128i *)(qs + 32 * (j / 2))), r1 = _mm_loadu_si128((const __m128i *)(qs + 32 * (j / 2) + 16));
        __m128i c0 = shr_bits(r0, 4 * (j % 2), 15), c1 = shr_bits(r1, 4 * (j % 2), 15);
        if (qh) {
            c0 = _mm_or_si128(c0, _mm_and_si128(has_bit(h0, 1 << j), sixteen));
            c1 = _mm_or_si128(c1, _mm_and_si128(has_bit(h1, 1 << j), sixteen));
        }
        const float ds = d * (float)sc, dm = dmin * (float)m;
        acc16(c0, ds, -dm, 1, x + 32 * j, a);
        acc16(c1, ds, -dm, 1, x + 32 * j + 16, a + 2);
    }
}

static void block_q6_k(const uint8_t *b, const float *x, __m256 *a) {
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = half(b + 208);
    const __m128i off = _mm_set1_epi8(32);
    for (int g = 0; g < 2; g++) {
        const uint8_t *ql = b + 64 * g, *qh = b + 128 + 32 * g;
        const __m128i h0 = _mm_loadu_si128((const __m128i *)qh), h1 = _mm_loadu_si128((const __m128i *)(qh + 16));
        for (int s = 0; s < 4; s++) {  /* weights 128g + 32s .. + 31: low bits from ql[32(s % 2) ..] >> 4(s / 2) */
            const __m128i l0 = _mm_loadu_si128((const __m128i *)(ql + 32 * (s % 2))), l1 = _mm_loadu_si128((const __m128i *)(ql + 32 * (s % 2) + 16));
            const __m128i c0 = _mm_or_si128(shr_bits(l0, 4 * (s / 2), 15), _mm_slli_epi16(shr_bits(h0, 2 * s, 3), 4));
            const __m128i c1 = _mm_or_si128(shr_bits(l1, 4 * (s / 2), 15), _mm_slli_epi16(shr_bits(h1, 2 * s, 3), 4));
            const int n = 8 * g + 2 * s;
            acc16(_mm_sub_epi8(c0, off), d * (float)sc[n], 0.0f, 0, x + 16 * n, a);
            acc16(_mm_sub_epi8(c1, off), d * (float)sc[n + 1], 0.0f, 0, x + 16 * n + 16, a + 2);
        }
    }
}

static void block_iq4_xs(const uint8_t *b, const float *x, __m256 *a) {
    const __m128i table = _mm_loadu_si128((const __m128i *)KVALUES);
    const float d = half(b);
    const unsigned scales_h = b[2] | b[3] << 8;
    for (int j = 0; j < 8; j++) {
        const int sc = ((b[4 + j / 2] >> 4 * (j % 2) & 15) | (scales_h >> 2 * j & 3) << 4) - 32;
        const __m128i raw = _mm_loadu_si128((const __m128i *)(b + 8 + 16 * j));
        acc16(_mm_shuffle_epi8(table, shr_bits(raw, 0, 15)), d * (float)sc, 0.0f, 0, x + 32 * j, a);
        acc16(_mm_shuffle_epi8(table, shr_bits(raw, 4, 15)), d * (float)sc, 0.0f, 0, x + 32 * j + 16, a + 2);
    }
}

/* The other types: a block at a time into four accumulators. */
static float row_dot_codes(int qtype, const uint8_t *b, const float *x, int nb) {
    int size;
    const int n = block_layout(qtype, &size);
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < nb; i++, b += size, x += n) {
        switch (qtype) {
        case Q5_0: case Q5_1: block_q5(qtype, b, x, a); break;
        case IQ4_NL: block_iq4_nl(b, x, a); break;
        case Q2_K: block_q2_k(b, x, a); break;
        case Q3_K: block_q3_k(b, x, a); break;
        case Q4_K: block_q45_k(b, NULL, b + 16, x, a); break;
        case Q5_K: block_q45_k(b, b + 16, b + 48, x, a); break;
        case Q6_K: block_q6_k(b, x, a); break;
        case IQ4_XS: block_iq4_xs(b, x, a); break;
        }
    }
    return hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
/* A Q4_K block's 8 products d·sc (ds) and dmin·m (dm), exact, its 12 bytes of 6-bit scales and
 * mins (`scale_min`) unpacked four at a time. */
static inline void k_scales(const uint8_t *b, float *ds, float *dm) {
    uint32_t s[3], sc[2], m[2];
    memcpy(s, b + 4, 12);
    sc[0] = s[0] & 0x3F3F3F3F, m[0] = s[1] & 0x3F3F3F3F;
    sc[1] = (s[2] & 0x0F0F0F0F) | (s[0] >> 6 & 0x03030303) << 4;
    m[1] = (s[2] >> 4 & 0x0F0F0F0F) | (s[1] >> 6 & 0x03030303) << 4;
    const __m256 vs = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc)));
    const __m256 vm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)m)));
    _mm256_storeu_ps(ds, _mm256_mul_ps(_mm256_set1_ps(half(b)), vs));
    _mm256_storeu_ps(dm, _mm256_mul_ps(_mm256_set1_ps(half(b + 2)), vm));
}

/* Q4_K and Q6_K, 16 weights to a register (the types of a Q4_K_M file's matrices).
 *
 * Q4_K: a sub-block's 16 possible weights (d·sc)·q − (dmin·m), q = 0 … 15, are computed once into a
 * register (one fused d·sc·q − dmin·m each: numpy's value, as d·sc·q is exact), and each code picks
 * its weight from it (vpermps reads the low 4 bits of each 32-bit lane: the byte's low nibble, and
 * after a shift by 4 its high one). The weights multiplied are the dequantizer's, bit for bit. */
static float row_dot_q4_k(const uint8_t *b, const float *x, int nb) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    float ds[8], dm[8];
    for (int i = 0; i < nb; i++, b += 144, x += 256) {
        k_scales(b, ds, dm);
        for (int j = 0; j < 8; j += 2) {  /* sub-blocks j (low nibbles) and j + 1 (high) share 32 bytes */
            const __m512 t0 = _mm512_fmsub_ps(_mm512_set1_ps(ds[j]), iota, _mm512_set1_ps(dm[j]));
            const __m512 t1 = _mm512_fmsub_ps(_mm512_set1_ps(ds[j + 1]), iota, _mm512_set1_ps(dm[j + 1]));
            const uint8_t *qs = b + 16 + 16 * j;
            const float *xj = x + 32 * j;
            const __m512i c0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
            const __m512i c1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + 16)));
            a0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(c0, t0), _mm512_loadu_ps(xj), a0);
            a1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(c1, t0), _mm512_loadu_ps(xj + 16), a1);
            a2 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(c0, 4), t1), _mm512_loadu_ps(xj + 32), a2);
            a3 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(c1, 4), t1), _mm512_loadu_ps(xj + 48), a3);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Q6_K: 32 codes built at a time in bytes, then 16 at a time (d·sc)·(q − 32), one exact product. */
static float row_dot_q6_k(const uint8_t *b, const float *x, int nb) {
    const __m256i low = _mm256_set1_epi8(15), two = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    for (int i = 0; i < nb; i++, b += 210, x += 256) {
        float ds[16];  /* d·sc per 16 weights, exact */
        _mm512_storeu_ps(ds, _mm512_mul_ps(_mm512_set1_ps(half(b + 208)),
                                           _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 192))))));
        for (int g = 0; g < 2; g++) {
            const __m256i h = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * g));
            for (int s = 0; s < 4; s++) {  /* weights 128g + 32s .. + 31 */
                const __m256i l = _mm256_loadu_si256((const __m256i *)(b + 64 * g + 32 * (s % 2)));
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(l, 4 * (s / 2)), low);
                const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * s), two), 4);
                const __m256i c = _mm256_sub_epi8(_mm256_or_si256(lo, hi), off);
                const int n = 8 * g + 2 * s;
                const __m512 w0 = _mm512_mul_ps(_mm512_set1_ps(ds[n]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(c))));
                const __m512 w1 = _mm512_mul_ps(_mm512_set1_ps(ds[n + 1]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(c, 1))));
                a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + 16 * n), a0);
                a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16 * n + 16), a1);
            }
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}
#endif

static float row_dot(int qtype, const uint8_t *b, const float *x, int nb) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
    if (qtype == Q4_K) return row_dot_q4_k(b, x, nb);
    if (qtype == Q6_K) return row_dot_q6_k(b, x, nb);
#endif
    if (qtype == Q4_0 || qtype == Q4_1 || qtype == Q8_0) return row_dot_32(qtype, b, x, nb);
    return row_dot_codes(qtype, b, x, nb);
}

/* 2: Q4_K and Q6_K through AVX-512, the rest AVX2; 1: AVX2; 0 (below): the plain path. */
#if defined(__AVX512F__) && defined(__AVX512BW__)
int sg_vectorized(void) { return 2; }
#else
int sg_vectorized(void) { return 1; }
#endif
#else
/* A row of nb blocks times x, each block's weights rebuilt by block_weights: every type's
 * plain path, for a CPU without AVX2. */
static float row_dot(int qtype, const uint8_t *b, const float *x, int nb) {
    int size;
    const int n = block_layout(qtype, &size);
    float acc = 0.0f, w[256];
    for (int i = 0; i < nb; i++, b += size, x += n) {
        block_weights(qtype, b, w);
        for (int j = 0; j < n; j++) acc += w[j] * x[j];
    }
    return acc;
}


int sg_vectorized(void) { return 0; }
#endif

/* y (rows,) = W · x; returns 0, or -1 for a type it does not read or cols not a multiple of its block. */
int sg_matvec(int qtype, const uint8_t *W, const float *x, float *y, int64_t rows, int64_t cols) {
    int size;
    const int n = block_layout(qtype, &size);
    if (!n || cols % n) return -1;
    const int64_t nb = cols / n;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) y[r] = row_dot(qtype, W + r * nb * size, x, (int)nb);
    return 0;
}

/* y = the rows of n_parts matrices, one after the other, times x (cols,): part p is W[p] (rows[p], cols)
 * of type qtypes[p], and its row r goes to y[at + to[p][r]] (to[p] NULL: y[at + r]), at the rows of
 * the parts before it. One parallel region of `threads` threads for all the parts (the caller's
 * count: torch's), each thread a share of each part's rows, no wait between the parts. Returns 0,
 * or -1 (nothing written) for a type it does not read or cols not a multiple of a part's block. */
int sg_matvec_parts(int n_parts, const int *qtypes, const uint8_t *const *W, const int64_t *rows,
                    const int64_t *const *to, const float *x, float *y, int64_t cols, int threads) {
    for (int p = 0; p < n_parts; p++) {
        int size;
        const int n = block_layout(qtypes[p], &size);
        if (!n || cols % n) return -1;
    }
    #pragma omp parallel num_threads(threads > 0 ? threads : 1)
    {
        int64_t at = 0;
        for (int p = 0; p < n_parts; p++) {
            int size;
            const int64_t nb = cols / block_layout(qtypes[p], &size), stride = nb * size;
            const uint8_t *Wp = W[p];
            const int64_t *top = to[p];
            float *yp = y + at;
            #pragma omp for schedule(static) nowait
            for (int64_t r = 0; r < rows[p]; r++) yp[top ? top[r] : r] = row_dot(qtypes[p], Wp + r * stride, x, (int)nb);
            at += rows[p];
        }
    }
    return 0;
}

/* out (rows, cols) = W's weights in float32, as gguf dequantizes them (a check of the reading). */
int sg_dequantize(int qtype, const uint8_t *W, float *out, int64_t rows, int64_t cols) {
    int size;
    const int n = block_layout(qtype, &size);
    if (!n || cols % n) return -1;
    for (int64_t i = 0; i < rows * cols / n; i++) block_weights(qtype, W + i * size, out + i * n);
    return 0;
}

/* out (n, cols): row i = the weights of W's row rows[i] (W's rows `stride` bytes apart), as gguf
 * dequantizes them. A caller splits a matrix's rows among its threads (one call each). */
int sg_dequantize_rows(int qtype, const uint8_t *W, int64_t stride, const int64_t *rows, int64_t n, float *out,
                       int64_t cols) {
    int size;
    const int per = block_layout(qtype, &size);
    if (!per || cols % per || stride != cols / per * size) return -1;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *b = W + rows[i] * stride;
        for (int64_t j = 0; j < cols / per; j++) block_weights(qtype, b + j * size, out + i * cols + j * per);
    }
    return 0;
}

/* One question row's attention over the key/value cache, for every query head at once:
 *   scores[h, j] = q[h] · K[h / g, start + j] · scale,  a[h] = softmax(scores[h]),  z[h] = Σ_j a[h, j] V[h / g, start + j]
 * q (H, d); K, V (H_kv, capacity, d), rows start .. start + S − 1 used; g = H / H_kv query heads per
 * key/value head. weights (H, S), its rows ldw floats apart, receives a; z (H, d) the weighted sums.
 * Softmax as torch's: exp(s − max) / Σ. */
void sg_attend_row(const float *q, const float *K, const float *V, int64_t capacity, int64_t start, int64_t S,
                   int H, int H_kv, int d, float scale, float *weights, int64_t ldw, float *z) {
    const int g = H / H_kv;
    #pragma omp parallel for schedule(static) if (S * H > 65536)
    for (int h = 0; h < H; h++) {
        const float *qh = q + (int64_t)h * d, *Kh = K + ((int64_t)(h / g) * capacity + start) * d;
        const float *Vh = V + ((int64_t)(h / g) * capacity + start) * d;
        float *a = weights + (int64_t)h * ldw, *zh = z + (int64_t)h * d, top = -__builtin_inff(), sum = 0.0f;
        for (int64_t j = 0; j < S; j++) {
            float s = 0.0f;
            #pragma omp simd reduction(+:s)
            for (int i = 0; i < d; i++) s += qh[i] * Kh[j * d + i];
            a[j] = s * scale;
            top = a[j] > top ? a[j] : top;
        }
        for (int64_t j = 0; j < S; j++) { a[j] = expf(a[j] - top); sum += a[j]; }
        for (int i = 0; i < d; i++) zh[i] = 0.0f;
        for (int64_t j = 0; j < S; j++) {
            a[j] /= sum;
            #pragma omp simd
            for (int i = 0; i < d; i++) zh[i] += a[j] * Vh[j * d + i];
        }
    }
}
