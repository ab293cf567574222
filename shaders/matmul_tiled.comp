#version 450
// Tiled strided batched matmul for products of many rows (prefill, batch >= 32):
//   C[b, m, n] = alpha * sum_k A[b, m, k] * B[b, k, n]  (+ beta * BIAS[m, n])
// Same operands, push constants and bindings as shaders/matmul.comp (element strides, so
// linear's W[N, K] is read in place). A workgroup of 16x16 invocations owns a BM x BN tile
// of C, each invocation an RT x CT block of it in registers (BM = 16 RT, BN = 16 CT). K is
// walked in steps of BK = 8: the workgroup copies A's BM x 8 and B's 8 x BN slices into
// shared memory (one 4-element load per invocation and operand at most, neighbouring
// invocations reading neighbouring bytes whichever way B is laid out), and loads the next
// step's slices while it multiplies.
// Defines: elem_defines for A, B, C and BIAS; A_VEC, B_VEC_K, B_VEC_N with A_V / B_V and
// LOAD4_A / LOAD4_B as in shaders/matmul.comp; HAS_BIAS; RT and CT (4 or 8, default 8).
// Edge tiles clamp their load rows/columns into range and skip out-of-range stores;
// k past K loads zeros.
#ifndef RT
#define RT 8
#endif
#ifndef CT
#define CT 8
#endif
#define BM (16 * RT)
#define BN (16 * CT)
#define BK 8
#define A_CHUNKS (BM * BK / 4)  // 4-element loads per slice of A, and of B
#define B_CHUNKS (BN * BK / 4)
layout(local_size_x = 16, local_size_y = 16, local_size_z = 1) in;
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
layout(std430, set = 0, binding = 2) writeonly buffer BufC { C_T c[]; };
#ifdef HAS_BIAS
layout(std430, set = 0, binding = 3) readonly buffer BufBias { BIAS_T bias[]; };
#endif

layout(push_constant) uniform Push {
    int M, N, K, nb2;
    int aoff, sAm, sAk, sAb1, sAb2;
    int boff, sBk, sBn, sBb1, sBb2;
    int coff, ldc, sCb1, sCb2;
    int biasoff, sbm, sbn;
    float alpha, beta;
} p;

shared vec4 As[BK][BM / 4];  // As[k][m / 4][m % 4] = A[m_tile + m, k0 + k]
shared vec4 Bs[BK][BN / 4];  // Bs[k][n / 4][n % 4] = B[k0 + k, n_tile + n]

// A[row, k..k+3] (row: the element offset of A[m, 0]); zeros past K.
vec4 load_a(int row, int k) {
#ifdef A_VEC
    return k < p.K ? LOAD4_A(row + k) : vec4(0.0);
#else
    vec4 v = vec4(0.0);
    for (int j = 0; j < 4; ++j) {
        if (k + j < p.K) {
            v[j] = LOAD_A(row + (k + j) * p.sAk);
        }
    }
    return v;
#endif
}

#ifdef B_VEC_N
// B[k, n..n+3] (col: the element offset of B[0, n]); zeros past K.
vec4 load_b(int col, int k) {
    return k < p.K ? LOAD4_B(col + k * p.sBk) : vec4(0.0);
}
#else
// B[k..k+3, n] (col: the element offset of B[0, n]); zeros past K.
vec4 load_b(int col, int k) {
#ifdef B_VEC_K
    return k < p.K ? LOAD4_B(col + k) : vec4(0.0);
#else
    vec4 v = vec4(0.0);
    for (int j = 0; j < 4; ++j) {
        if (k + j < p.K) {
            v[j] = LOAD_B(col + (k + j) * p.sBk);
        }
    }
    return v;
#endif
}
#endif

void main() {
    const int tid = int(gl_LocalInvocationIndex);
    const int tx = int(gl_LocalInvocationID.x);
    const int ty = int(gl_LocalInvocationID.y);
    const int n_tile = int(gl_WorkGroupID.x) * BN;
    const int m_tile = int(gl_WorkGroupID.y) * BM;
    const int bz = int(gl_WorkGroupID.z);
    const int b1 = bz / p.nb2;
    const int b2 = bz - b1 * p.nb2;
    const int abase = p.aoff + b1 * p.sAb1 + b2 * p.sAb2;
    const int bbase = p.boff + b1 * p.sBb1 + b2 * p.sBb2;

    // This invocation's share of each slice (invocations past A_CHUNKS / B_CHUNKS load none):
    // A row la_m, k la_k..la_k+3.
    const int la_m = tid >> 1;
    const int la_k = (tid & 1) * 4;
    const bool loads_a = tid < A_CHUNKS;
    const int a_row = abase + min(m_tile + la_m, p.M - 1) * p.sAm;
#ifdef B_VEC_N
    // B row lb_k, columns lb_n..lb_n+3 (N % 4 == 0: a clamped group stays whole).
    const int lb_k = tid / (BN / 4);
    const int lb_n = (tid % (BN / 4)) * 4;
    const int b_col = bbase + min(n_tile + lb_n, p.N - 4) * p.sBn;
#else
    // B column lb_n, k lb_k..lb_k+3.
    const int lb_n = tid >> 1;
    const int lb_k = (tid & 1) * 4;
    const int b_col = bbase + min(n_tile + lb_n, p.N - 1) * p.sBn;
#endif
    const bool loads_b = tid < B_CHUNKS;

    vec4 acc[RT][CT / 4];  // acc[i][h][j] = C(m_tile + ty*RT + i, n_tile + tx*CT + h*4 + j)
    for (int i = 0; i < RT; ++i) {
        for (int h = 0; h < CT / 4; ++h) {
            acc[i][h] = vec4(0.0);
        }
    }
    vec4 ra = loads_a ? load_a(a_row, la_k) : vec4(0.0);
    vec4 rb = loads_b ? load_b(b_col, lb_k) : vec4(0.0);
    for (int k0 = 0; k0 < p.K; k0 += BK) {
        if (loads_a) {
            for (int j = 0; j < 4; ++j) {
                As[la_k + j][la_m >> 2][la_m & 3] = ra[j];
            }
        }
        if (loads_b) {
#ifdef B_VEC_N
            Bs[lb_k][lb_n >> 2] = rb;
#else
            for (int j = 0; j < 4; ++j) {
                Bs[lb_k + j][lb_n >> 2][lb_n & 3] = rb[j];
            }
#endif
        }
        barrier();
        if (k0 + BK < p.K) {  // the next step's slices, in flight while this one multiplies
            if (loads_a) {
                ra = load_a(a_row, k0 + BK + la_k);
            }
            if (loads_b) {
                rb = load_b(b_col, k0 + BK + lb_k);
            }
        }
        for (int k = 0; k < BK; ++k) {
            vec4 bv[CT / 4];
            for (int h = 0; h < CT / 4; ++h) {
                bv[h] = Bs[k][tx * (CT / 4) + h];
            }
            for (int q = 0; q < RT / 4; ++q) {
                const vec4 av = As[k][ty * (RT / 4) + q];
                for (int i = 0; i < 4; ++i) {
                    for (int h = 0; h < CT / 4; ++h) {
                        acc[q * 4 + i][h] += av[i] * bv[h];
                    }
                }
            }
        }
        barrier();
    }

    const int cbase = p.coff + b1 * p.sCb1 + b2 * p.sCb2;
    for (int i = 0; i < RT; ++i) {
        const int m = m_tile + ty * RT + i;
        if (m < p.M) {
            for (int j = 0; j < CT; ++j) {
                const int n = n_tile + tx * CT + j;
                if (n < p.N) {
                    float v = p.alpha * acc[i][j >> 2][j & 3];
#ifdef HAS_BIAS
                    v += p.beta * LOAD_BIAS(p.biasoff + m * p.sbm + n * p.sbn);
#endif
                    STORE_C(cbase + m * p.ldc + n, v);
                }
            }
        }
    }
}
