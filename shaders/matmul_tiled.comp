#version 450
// Tiled strided batched matmul for products of many rows (prefill, batch >= 32):
//   C[b, m, n] = alpha * sum_k A[b, m, k] * B[b, k, n]  (+ beta * BIAS[m, n])
// Same operands and bindings as shaders/matmul.comp (element strides, so linear's W[N, K]
// is read in place); the push constants add the split-K fields. A workgroup of 16x16
// invocations owns a BM x BN tile of C, each invocation RT x CT elements of it in registers
// (BM = 16 RT, BN = 16 CT; in blocks of 4 x 4, 64 rows / columns apart). K is walked in
// steps of BK: the workgroup copies A's BM x BK and B's BK x BN slices into shared memory
// in 4-element chunks, BK / 4 neighbouring invocations reading one row's consecutive chunks
// along k (A, and a k-contiguous B such as W[N, K]) or BN / 4 reading one k's consecutive
// chunks along n (an n-contiguous B), and loads the next step's chunks into registers while
// it multiplies.
// Split-K (nsplit > 1): workgroup z = batch * nsplit + s walks k in [s * kchunk, (s+1) * kchunk)
// and stores its partial tile at C + s * sCs (the caller binds an fp32 scratch as C, with
// alpha 1 and no bias); shaders/matmul_reduce.comp sums the partials into the real C.
// Specialization constants: 0, 1 = RT and CT (4 or 8), 2 = BK (8, 16 or 32); 3, 4 = the dtypes of
// C and BIAS (ANY_OUT / ANY_IN: any dtype). Defines: read defines for A and B; A_VEC, B_VEC_K,
// B_VEC_N with A_V / B_V and LOAD4_A / LOAD4_B as in shaders/matmul.comp; HAS_BIAS; WORDS and
// DT_* (dtype.glslh). Edge tiles clamp their load rows/columns into range and skip out-of-range
// stores; k past the split's end loads zeros.
layout(constant_id = 0) const int RT = 8;
layout(constant_id = 1) const int CT = 8;
layout(constant_id = 2) const int BK = 8;
#define BM (16 * RT)
#define BN (16 * CT)
#define THREADS 256
#define A_CHUNKS (BM * BK / 4)  // 4-element loads per slice of A, and of B
#define B_CHUNKS (BN * BK / 4)
#define A_LOADS ((A_CHUNKS + THREADS - 1) / THREADS)  // per invocation
#define B_LOADS ((B_CHUNKS + THREADS - 1) / THREADS)
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
    int nsplit, kchunk, sCs;
    float alpha, beta;
} p;

shared vec4 As[BK][BM / 4];  // As[k][m / 4][m % 4] = A[m_tile + m, k0 + k]
shared vec4 Bs[BK][BN / 4];  // Bs[k][n / 4][n % 4] = B[k0 + k, n_tile + n]

// A[row, k..k+3] (row: the element offset of A[m, 0]); zeros from kend on.
vec4 load_a(int row, int k, int kend) {
#ifdef A_VEC
    return k < kend ? LOAD4_A(row + k) : vec4(0.0);
#else
    vec4 v = vec4(0.0);
    for (int j = 0; j < 4; ++j) {
        if (k + j < kend) {
            v[j] = LOAD_A(row + (k + j) * p.sAk);
        }
    }
    return v;
#endif
}

#ifdef B_VEC_N
// B[k, n..n+3] (col: the element offset of B[0, n]); zeros from kend on.
vec4 load_b(int col, int k, int kend) {
    return k < kend ? LOAD4_B(col + k * p.sBk) : vec4(0.0);
}
#else
// B[k..k+3, n] (col: the element offset of B[0, n]); zeros from kend on.
vec4 load_b(int col, int k, int kend) {
#ifdef B_VEC_K
    return k < kend ? LOAD4_B(col + k) : vec4(0.0);
#else
    vec4 v = vec4(0.0);
    for (int j = 0; j < 4; ++j) {
        if (k + j < kend) {
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
    const int zs = int(gl_WorkGroupID.z);
    const int bz = zs / p.nsplit;
    const int split = zs - bz * p.nsplit;
    const int b1 = bz / p.nb2;
    const int b2 = bz - b1 * p.nb2;
    const int abase = p.aoff + b1 * p.sAb1 + b2 * p.sAb2;
    const int bbase = p.boff + b1 * p.sBb1 + b2 * p.sBb2;
    const int kbegin = split * p.kchunk;
    const int kend = min(p.K, kbegin + p.kchunk);

    // This invocation's chunks: load i is chunk tid + i * THREADS (past A_CHUNKS / B_CHUNKS: none).
    // A: row m = chunk / (BK / 4), k offset (chunk % (BK / 4)) * 4 within the step.
    int a_row[A_LOADS], a_m[A_LOADS], a_k[A_LOADS];
    for (int i = 0; i < A_LOADS; ++i) {
        const int chunk = tid + i * THREADS;
        a_m[i] = chunk / (BK / 4);
        a_k[i] = (chunk % (BK / 4)) * 4;
        a_row[i] = abase + min(m_tile + a_m[i], p.M - 1) * p.sAm;
    }
    int b_col[B_LOADS], b_n[B_LOADS], b_k[B_LOADS];
    for (int i = 0; i < B_LOADS; ++i) {
        const int chunk = tid + i * THREADS;
#ifdef B_VEC_N
        // k b_k, columns b_n..b_n+3 (N % 4 == 0: a clamped group stays whole).
        b_k[i] = chunk / (BN / 4);
        b_n[i] = (chunk % (BN / 4)) * 4;
        b_col[i] = bbase + min(n_tile + b_n[i], p.N - 4) * p.sBn;
#else
        // column b_n, k b_k..b_k+3.
        b_n[i] = chunk / (BK / 4);
        b_k[i] = (chunk % (BK / 4)) * 4;
        b_col[i] = bbase + min(n_tile + b_n[i], p.N - 1) * p.sBn;
#endif
    }

    // acc[q*4 + i][h][j] = C(m_tile + q*64 + ty*4 + i, n_tile + h*64 + tx*4 + j): neighbouring
    // invocations read neighbouring vec4s of As and Bs (no bank conflicts) and store neighbouring
    // 16-byte runs of C.
    vec4 acc[RT][CT / 4];
    for (int i = 0; i < RT; ++i) {
        for (int h = 0; h < CT / 4; ++h) {
            acc[i][h] = vec4(0.0);
        }
    }
    vec4 ra[A_LOADS], rb[B_LOADS];
    for (int i = 0; i < A_LOADS; ++i) {
        ra[i] = tid + i * THREADS < A_CHUNKS ? load_a(a_row[i], kbegin + a_k[i], kend) : vec4(0.0);
    }
    for (int i = 0; i < B_LOADS; ++i) {
        rb[i] = tid + i * THREADS < B_CHUNKS ? load_b(b_col[i], kbegin + b_k[i], kend) : vec4(0.0);
    }
    for (int k0 = kbegin; k0 < kend; k0 += BK) {
        for (int i = 0; i < A_LOADS; ++i) {
            if (tid + i * THREADS < A_CHUNKS) {
                for (int j = 0; j < 4; ++j) {
                    As[a_k[i] + j][a_m[i] >> 2][a_m[i] & 3] = ra[i][j];
                }
            }
        }
        for (int i = 0; i < B_LOADS; ++i) {
            if (tid + i * THREADS < B_CHUNKS) {
#ifdef B_VEC_N
                Bs[b_k[i]][b_n[i] >> 2] = rb[i];
#else
                for (int j = 0; j < 4; ++j) {
                    Bs[b_k[i] + j][b_n[i] >> 2][b_n[i] & 3] = rb[i][j];
                }
#endif
            }
        }
        barrier();
        if (k0 + BK < kend) {  // the next step's slices, in flight while this one multiplies
            for (int i = 0; i < A_LOADS; ++i) {
                if (tid + i * THREADS < A_CHUNKS) {
                    ra[i] = load_a(a_row[i], k0 + BK + a_k[i], kend);
                }
            }
            for (int i = 0; i < B_LOADS; ++i) {
                if (tid + i * THREADS < B_CHUNKS) {
                    rb[i] = load_b(b_col[i], k0 + BK + b_k[i], kend);
                }
            }
        }
        for (int k = 0; k < BK; ++k) {
            vec4 bv[CT / 4];
            for (int h = 0; h < CT / 4; ++h) {
                bv[h] = Bs[k][h * 16 + tx];
            }
            for (int q = 0; q < RT / 4; ++q) {
                const vec4 av = As[k][q * 16 + ty];
                for (int i = 0; i < 4; ++i) {
                    for (int h = 0; h < CT / 4; ++h) {
                        acc[q * 4 + i][h] += av[i] * bv[h];
                    }
                }
            }
        }
        barrier();
    }

    const int cbase = p.coff + b1 * p.sCb1 + b2 * p.sCb2 + split * p.sCs;
    for (int i = 0; i < RT; ++i) {
        const int m = m_tile + (i >> 2) * 64 + ty * 4 + (i & 3);
        if (m < p.M) {
            for (int j = 0; j < CT; ++j) {
                const int n = n_tile + (j >> 2) * 64 + tx * 4 + (j & 3);
                if (n < p.N) {
                    float v = p.alpha * acc[i][j >> 2][j & 3];
#ifdef HAS_BIAS
                    v += p.beta * load_BIAS(uint(p.biasoff + m * p.sbm + n * p.sbn));
#endif
                    store_C(uint(cbase + m * p.ldc + n), v);
                }
            }
        }
    }
}
