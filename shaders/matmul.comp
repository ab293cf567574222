#version 450
// General strided batched matmul, register-blocked 4x4:
//   C[b, m, n] = alpha * sum_k A[b, m, k] * B[b, k, n]  (+ beta * BIAS[m, n])
// Element (m, k) of A is a[aoff + b1*sAb1 + b2*sAb2 + m*sAm + k*sAk]; B likewise
// with (k, n) and sBk/sBn, so a transposed operand (linear's W[N, K]) needs no copy.
// The batch index is two-level: z = b1*nb2 + b2. C is row-major with row stride ldc
// (ldc > N when a dispatch writes a column slice; the slice start is folded into coff).
// Bindings: 0 = A, 1 = B, 2 = C, 3 = BIAS (only with HAS_BIAS).
// Specialization constants: 0, 1 = the workgroup's x (over column tiles) and y (over row tiles);
// 2 = TM, rows per invocation tile (4, or 1 for M == 1, e.g. one token); 3, 4 = the dtypes of C and
// BIAS (ANY_OUT / ANY_IN: any dtype).
// Defines:
//   read defines for A and B (any float type; accumulation is fp32); WORDS and DT_* (dtype.glslh)
//   A_VEC    A is k-contiguous (sAk == 1) and K, sAm, sAb*, aoff are multiples of 4
//   B_VEC_K  B is k-contiguous (sBk == 1) and K, sBn, sBb*, boff are multiples of 4
//   B_VEC_N  B is n-contiguous (sBn == 1) and N, sBk, sBb*, boff are multiples of 4
//   with each: A_V / B_V (the array element type) and LOAD4_A(i) / LOAD4_B(i), elements
//   i..i+3 (i a multiple of 4) as a vec4 in one load: a vec4, or a uvec2 of 16-bit pairs
//   HAS_BIAS add beta * bias[biasoff + m*sbm + n*sbn]
// Each invocation owns a TMx4 output tile; edge tiles clamp their load indices (no
// branches in the k loop) and skip out-of-range stores.
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z = 1) in;
layout(constant_id = 2) const int TM = 4;
#include "dtype.glslh"
#include "pairs.glslh"

#ifdef A_VEC
layout(std430, set = 0, binding = 0) readonly buffer BufA { A_V a4[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer BufA { A_T a[]; };
#endif
#if defined(B_VEC_K) || defined(B_VEC_N)
layout(std430, set = 0, binding = 1) readonly buffer BufB { B_V b4[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer BufB { B_T b[]; };
#endif
ANY_OUT(2, C, c, 3)
#ifdef HAS_BIAS
ANY_IN(3, BIAS, bias, 4)
#endif

layout(push_constant) uniform Push {
    int M, N, K, nb2;
    int aoff, sAm, sAk, sAb1, sAb2;
    int boff, sBk, sBn, sBb1, sBb2;
    int coff, ldc, sCb1, sCb2;
    int biasoff, sbm, sbn;
    float alpha, beta;
} p;

void main() {
    const int n0 = int(gl_GlobalInvocationID.x) * 4;
    const int m0 = int(gl_GlobalInvocationID.y) * TM;
    if (n0 >= p.N || m0 >= p.M) {
        return;
    }
    const int bz = int(gl_GlobalInvocationID.z);
    const int b1 = bz / p.nb2;
    const int b2 = bz - b1 * p.nb2;
    const int abase = p.aoff + b1 * p.sAb1 + b2 * p.sAb2;
    const int bbase = p.boff + b1 * p.sBb1 + b2 * p.sBb2;

    int ar[TM];  // element offset of A[m_i, 0]
    int bc[4];   // element offset of B[0, n_j]
    for (int i = 0; i < TM; ++i) {
        ar[i] = abase + min(m0 + i, p.M - 1) * p.sAm;
    }
    for (int j = 0; j < 4; ++j) {
        bc[j] = bbase + min(n0 + j, p.N - 1) * p.sBn;
    }

    vec4 acc[TM];  // acc[i][j] = C tile (m0 + i, n0 + j)
    for (int i = 0; i < TM; ++i) {
        acc[i] = vec4(0.0);
    }

    const int K4 = p.K & ~3;
    for (int k = 0; k < K4; k += 4) {
        vec4 av[TM];
        for (int i = 0; i < TM; ++i) {
#ifdef A_VEC
            av[i] = LOAD4_A(ar[i] + k);
#else
            const int o = ar[i] + k * p.sAk;
            av[i] = vec4(LOAD_A(o), LOAD_A(o + p.sAk), LOAD_A(o + 2 * p.sAk), LOAD_A(o + 3 * p.sAk));
#endif
        }
#ifdef B_VEC_N
        // Four rows of B, each a vec4 over the tile's columns.
        const int r = bbase + k * p.sBk + n0;
        const vec4 r0 = LOAD4_B(r);
        const vec4 r1 = LOAD4_B(r + p.sBk);
        const vec4 r2 = LOAD4_B(r + 2 * p.sBk);
        const vec4 r3 = LOAD4_B(r + 3 * p.sBk);
        for (int i = 0; i < TM; ++i) {
            acc[i] += av[i].x * r0 + av[i].y * r1 + av[i].z * r2 + av[i].w * r3;
        }
#else
        vec4 bv[4];
        for (int j = 0; j < 4; ++j) {
#ifdef B_VEC_K
            bv[j] = LOAD4_B(bc[j] + k);
#else
            const int o = bc[j] + k * p.sBk;
            bv[j] = vec4(LOAD_B(o), LOAD_B(o + p.sBk), LOAD_B(o + 2 * p.sBk), LOAD_B(o + 3 * p.sBk));
#endif
        }
        for (int i = 0; i < TM; ++i) {
            acc[i] += vec4(dot(av[i], bv[0]), dot(av[i], bv[1]), dot(av[i], bv[2]), dot(av[i], bv[3]));
        }
#endif
    }

    // K tail (K % 4 != 0): only reachable when A and B are scalar, or B is B_VEC_N.
#if !defined(A_VEC) && !defined(B_VEC_K)
    for (int k = K4; k < p.K; ++k) {
#ifdef B_VEC_N
        const vec4 row = LOAD4_B(bbase + k * p.sBk + n0);
#else
        const vec4 row = vec4(LOAD_B(bc[0] + k * p.sBk), LOAD_B(bc[1] + k * p.sBk),
                              LOAD_B(bc[2] + k * p.sBk), LOAD_B(bc[3] + k * p.sBk));
#endif
        for (int i = 0; i < TM; ++i) {
            acc[i] += LOAD_A(ar[i] + k * p.sAk) * row;
        }
    }
#endif

    const int cbase = p.coff + b1 * p.sCb1 + b2 * p.sCb2;
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + i;
        if (m < p.M) {
            for (int j = 0; j < 4; ++j) {
                const int n = n0 + j;
                if (n < p.N) {
                    float v = p.alpha * acc[i][j];
#ifdef HAS_BIAS
                    v += p.beta * load_BIAS(uint(p.biasoff + m * p.sbm + n * p.sbn));
#endif
                    store_C(uint(cbase + m * p.ldc + n), v);
                }
            }
        }
    }
}
