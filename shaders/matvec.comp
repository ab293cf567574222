#version 450
// Matrix-vector product, one row of activations against a k-contiguous B (linear's
// W[N, K], or k^T in attention), split over K inside a workgroup:
//   C[b, n] = alpha * sum_k A[b, k] * B[b, k, n]  (+ beta * BIAS[n])
// A[b, k] is a[aoff + b1*sAb1 + b2*sAb2 + k] and B[b, k, n] is b[boff + b1*sBb1 + b2*sBb2
// + n*sBn + k]; C[b, n] is c[coff + b1*sCb1 + b2*sCb2 + n]; batch z = b1*nb2 + b2.
// Workgroup (x, 0, z) owns ROWS output columns: its WG invocations walk K in chunks of
// eight elements (invocation i reads chunks i, i + WG, ...: neighbours read neighbouring
// bytes, 16 at a time), the ROWS columns' loads of a chunk issued together, then add their
// partial sums (partials.glslh: subgroup adds, or a shared-memory tree). The weight streams
// once; A is read once per ROWS columns. WG and ROWS are specialization constants 0 and 1.
// Bindings: 0 = A, 1 = B, 2 = C, 3 = BIAS (only with HAS_BIAS); C and BIAS of any dtype (ANY_OUT /
// ANY_IN, specialization constants 2 and 3).
// Defines: read defines for A and B; A_V / B_V (the array element type) and
// LOAD8_A(i, lo, hi) / LOAD8_B(i, lo, hi) (elements i..i+7 into two vec4s: two vec4 loads
// for fp32, one uvec4 of four 16-bit pairs for fp16/bf16, or eight scalar loads);
// K_TAIL when K % 8 != 0 (then both arrays hold scalars); HAS_BIAS; SUBGROUP; WORDS and DT_*.
// GLU (one batch, no bias, no K_TAIL): binding 3 = B2, a second weight laid out as B (its row 0 at
// element p.b2off), read in the same workgroup, and C[n] = silu(alpha * sum_k A[k] B[k, n])
// * (alpha * sum_k A[k] B2[k, n]): SwiGLU's gate and up products and their product in one dispatch.
// SEGMENTS (one batch, no bias, no K_TAIL): three products of A in one dispatch, C = A B over the
// first ceil(N / ROWS) workgroups, C2 = A B2 (bindings 3, 4) over the next ceil(N2 / ROWS), C3 =
// A B3 (5, 6) over the rest, each weight laid out as B from its element 0 (an attention's q, k
// and v products); C2 and C3 of any dtype (specialization constants 3 and 4).
// NORM (with GLU, SEGMENTS or neither; one batch, no bias, no K_TAIL): A is an RMSNorm's input,
// the products are of its output, A[k] * G[k] * rsqrt(mean(A^2) + p.eps): binding NORM_BINDING =
// G (the norm's weight, K elements), the squares summed in the same sweep, each sum scaled once.
#include "partials.glslh"
#include "dtype.glslh"
#include "pairs.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufA { A_V a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { B_V b[]; };
ANY_OUT(2, C, c, 2)
#ifdef HAS_BIAS
ANY_IN(3, BIAS, bias, 3)
#endif
#ifdef GLU
layout(std430, set = 0, binding = 3) readonly buffer BufB2 { B_V bup[]; };
#endif
#ifdef SEGMENTS
layout(std430, set = 0, binding = 3) readonly buffer BufB2 { B_V w2[]; };
ANY_OUT(4, C2, c2, 3)
layout(std430, set = 0, binding = 5) readonly buffer BufB3 { B_V w3[]; };
ANY_OUT(6, C3, c3, 4)
#endif
#ifdef NORM
layout(std430, set = 0, binding = NORM_BINDING) readonly buffer BufG { G_V g[]; };
#define NORM_A squares += dot(x0, x0) + dot(x1, x1); { vec4 g0, g1; LOAD8_G(k, g0, g1); x0 *= g0; x1 *= g1; }
#else
#define NORM_A
#endif
#ifdef GLU
// the up weight's row r beside the gate's, in SWEEP
#define GLU_STEP(r) LOAD8_B2(brow[r] - p.boff + p.b2off + k, w0, w1); acc2[r] += dot(x0, w0) + dot(x1, w1);
#else
#define GLU_STEP(r)
#endif
// The workgroup's walk over K in chunks of eight, its rows' weights read with LOAD8 (a macro, so
// that SEGMENTS picks its weight once a workgroup, not once a load: llvmpipe ran a branch a load
// at half the speed).
#define SWEEP(LOAD8) \
    for (int k = lid * 8; k < K8; k += WG * 8) { \
        vec4 x0, x1, w0, w1; \
        LOAD8_A(abase + k, x0, x1); \
        NORM_A \
        for (int r = 0; r < ROWS; ++r) { \
            LOAD8(brow[r] + k, w0, w1); \
            acc[r] += dot(x0, w0) + dot(x1, w1); \
            GLU_STEP(r) \
        } \
    }

layout(push_constant) uniform Push {
    int N, K, nb2;
    int aoff, sAb1, sAb2;
    int boff, sBn, sBb1, sBb2;
    int coff, sCb1, sCb2;
    int biasoff, sbn;
    float alpha, beta;
    int b2off;
    int N2, N3;  // SEGMENTS: the second and third products' columns
#ifdef NORM
    float eps;
#endif
} p;

void main() {
    const int lid = int(gl_LocalInvocationID.x);
    int wg = int(gl_WorkGroupID.x);
    int N = p.N;
#ifdef SEGMENTS
    int seg = 0;
    const int wg1 = (p.N + ROWS - 1) / ROWS, wg2 = (p.N2 + ROWS - 1) / ROWS;
    if (wg >= wg1 + wg2) {
        seg = 2;
        wg -= wg1 + wg2;
        N = p.N3;
    } else if (wg >= wg1) {
        seg = 1;
        wg -= wg1;
        N = p.N2;
    }
#endif
    const int n0 = wg * ROWS;
    const int bz = int(gl_WorkGroupID.z);
    const int b1 = bz / p.nb2;
    const int b2 = bz - b1 * p.nb2;
    const int abase = p.aoff + b1 * p.sAb1 + b2 * p.sAb2;
    int brow[ROWS];  // element offset of B[0, n0 + r]; rows past N repeat the last one
    for (int r = 0; r < ROWS; ++r) {
        brow[r] = p.boff + b1 * p.sBb1 + b2 * p.sBb2 + min(n0 + r, N - 1) * p.sBn;
    }

    float acc[ROWS];
    for (int r = 0; r < ROWS; ++r) {
        acc[r] = 0.0;
    }
#ifdef GLU
    float acc2[ROWS];
    for (int r = 0; r < ROWS; ++r) {
        acc2[r] = 0.0;
    }
#endif
    float squares = 0.0;  // NORM: of A's elements this invocation read
    const int K8 = p.K & ~7;
#ifdef SEGMENTS
    if (seg == 0) {
        SWEEP(LOAD8_B)
    } else if (seg == 1) {
        SWEEP(LOAD8_B2)
    } else {
        SWEEP(LOAD8_B3)
    }
#else
    SWEEP(LOAD8_B)
#endif
#ifdef K_TAIL
    for (int k = K8 + lid; k < p.K; k += WG) {
        const float x = LOAD_A(abase + k);
        for (int r = 0; r < ROWS; ++r) {
            acc[r] += x * LOAD_B(brow[r] + k);
        }
    }
#endif

    for (int r = 0; r < ROWS; ++r) {
        put_partial(r, acc[r]);
#ifdef GLU
        put_partial(ROWS + r, acc2[r]);
#endif
    }
#ifdef NORM
    put_partial(SUMS, squares);
#endif
    barrier();
    fold_partials();
    if (lid < ROWS && n0 + lid < N) {
        const int n = n0 + lid;
#ifdef NORM
        const float alpha = p.alpha * inversesqrt(row_total(SUMS) / float(p.K) + p.eps);
#else
        const float alpha = p.alpha;
#endif
        float v = alpha * row_total(lid);
#ifdef GLU
        v = v / (1.0 + exp(-v)) * (alpha * row_total(ROWS + lid));
#endif
#ifdef HAS_BIAS
        v += p.beta * load_BIAS(uint(p.biasoff + n * p.sbn));
#endif
#ifdef SEGMENTS
        if (seg == 1) {
            store_C2(uint(n), v);
        } else if (seg == 2) {
            store_C3(uint(n), v);
        } else {
            store_C(uint(n), v);
        }
#else
        store_C(uint(p.coff + b1 * p.sCb1 + b2 * p.sCb2 + n), v);
#endif
    }
}
