/* The kernels of one new member's pass during generation (studygroup.model.row_kernels).
 *
 * sg_matvec: one row times a matrix kept as a GGUF file's quantized blocks, without dequantizing it.
 * y (rows,) = W (rows, cols) · x (cols,): W's rows are the file's rows (one output each), each a run
 * of blocks of 32 weights. A weight is rebuilt in float32 exactly as gguf's dequantizer computes it
 * (Q4_0: d·(q − 8); Q4_1: d·q + m, one rounding as the dequantizer's; Q8_0: d·q), then multiplied
 * and summed in float32: the same weights as the float32 matrix, a summation order of its own.
 * The step reads 5 (Q4_1) or 8.5 (Q8_0) bits a weight instead of float32's 32: a step of generation
 * is bound by memory bandwidth, not arithmetic.
 *
 * Rows are split among the OpenMP threads of the process (torch's, once torch is loaded).
 * Block layouts (ggml): Q4_0 {f16 d; u8 qs[16]}, Q4_1 {f16 d, m; u8 qs[16]}, Q8_0 {f16 d; i8 qs[32]};
 * in the 4-bit types weight j is qs[j] & 15 and weight j + 16 is qs[j] >> 4.
 *
 * sg_attend_row: one question row's attention over the key/value cache, every head in one call.
 */
#include <stdint.h>
#include <math.h>
#include <string.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

enum { Q4_0 = 2, Q4_1 = 3, Q8_0 = 8 };  /* GGML's type numbers */

static int block_bytes(int qtype) {
    return qtype == Q4_0 ? 18 : qtype == Q4_1 ? 20 : qtype == Q8_0 ? 34 : 0;
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

/* The 32 weights of one block, as gguf dequantizes them. */
static void block_weights(int qtype, const uint8_t *b, float *w) {
    float d = half(b);
    if (qtype == Q8_0) {
        for (int j = 0; j < 32; j++) w[j] = d * (float)(int8_t)b[2 + j];
        return;
    }
    const uint8_t *qs = b + (qtype == Q4_1 ? 4 : 2);
    float m = qtype == Q4_1 ? half(b + 2) : 0.0f;
    int off = qtype == Q4_0 ? 8 : 0;
    for (int j = 0; j < 16; j++) {
        float lo = (float)((qs[j] & 15) - off), hi = (float)((qs[j] >> 4) - off);
        w[j] = qtype == Q4_1 ? __builtin_fmaf(d, lo, m) : d * lo;
        w[j + 16] = qtype == Q4_1 ? __builtin_fmaf(d, hi, m) : d * hi;
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

static float row_dot(int qtype, const uint8_t *b, const float *x, int nb) {
    const int size = block_bytes(qtype);
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

int sg_vectorized(void) { return 1; }
#else
static float row_dot(int qtype, const uint8_t *b, const float *x, int nb) {
    const int size = block_bytes(qtype);
    float acc = 0.0f, w[32];
    for (int i = 0; i < nb; i++, b += size, x += 32) {
        block_weights(qtype, b, w);
        for (int j = 0; j < 32; j++) acc += w[j] * x[j];
    }
    return acc;
}

int sg_vectorized(void) { return 0; }
#endif

/* y (rows,) = W · x; returns 0, or -1 for a type it does not read or cols not a multiple of 32. */
int sg_matvec(int qtype, const uint8_t *W, const float *x, float *y, int64_t rows, int64_t cols) {
    const int size = block_bytes(qtype);
    if (!size || cols % 32) return -1;
    const int64_t nb = cols / 32;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) y[r] = row_dot(qtype, W + r * nb * size, x, (int)nb);
    return 0;
}

/* out (rows, cols) = W's weights in float32, as gguf dequantizes them (a check of the reading). */
int sg_dequantize(int qtype, const uint8_t *W, float *out, int64_t rows, int64_t cols) {
    const int size = block_bytes(qtype);
    if (!size || cols % 32) return -1;
    for (int64_t i = 0; i < rows * cols / 32; i++) block_weights(qtype, W + i * size, out + i * 32);
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
