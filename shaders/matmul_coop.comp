#version 450
// fp16 products on the tensor cores (VK_NV_cooperative_matrix), for products of many rows:
//   C[b, m, n] = alpha * sum_k A[b, m, k] * B[b, k, n]  (+ beta * BIAS[m, n])
// The operands and push constants of shaders/matmul_tiled.comp (element strides; linear's
// W[N, K] read in place), with A and B fp16, A k-contiguous and B either k-contiguous (B_VEC_K:
// W[N, K], k^T) or n-contiguous (B_VEC_N), every row start a multiple of 8 elements and K a
// multiple of 8: the kernel reads them in 16-byte chunks of 8 halves.
// A workgroup of SG_M x SG_N subgroups of 32 invocations (the caller checks the device's subgroup
// size) owns a BM x BN tile of C, each subgroup FM x FN 16 x 16 fragments of it, accumulated in
// fp32 (fcoopmatNV<32>) from 16 x 16 x 16 fp16 products. K is walked in steps of BK = 32 through
// two shared-memory stages: while the subgroups multiply the slices of A (BM x BK) and B (BK x BN)
// in one stage (rows padded by one chunk against bank conflicts), the next step's chunks are loaded
// from memory into registers and then stored into the other stage, one barrier a step. Edge tiles
// clamp their load rows and columns into range; k past the split's end loads zeros; each fragment
// goes out through a 16 x 16 fp32 patch of shared memory per subgroup (in the first stage's A, no
// longer read), so only in-range elements are stored, scaled by alpha, with the bias added, in C's
// dtype. Every loop over fragments and chunks is unrolled: the fragments live in registers.
// Split-K (nsplit > 1) as in shaders/matmul_tiled.comp: partial tiles into an fp32 scratch,
// shaders/matmul_reduce.comp sums them.
// Defines: SG_M, SG_N, FM, FN; B_VEC_K or B_VEC_N; elem_defines for C (and BIAS with HAS_BIAS).
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_control_flow_attributes : require
#define BK 32
#define BM (SG_M * FM * 16)
#define BN (SG_N * FN * 16)
#define SUBGROUPS (SG_M * SG_N)
#define THREADS (32 * SUBGROUPS)
#define ROW4 (BK / 8 + 1)  // uvec4s per padded row of As (and of a k-contiguous Bs)
#define A_CHUNKS (BM * BK / 8)
#define B_CHUNKS (BN * BK / 8)
#define A_LOADS ((A_CHUNKS + THREADS - 1) / THREADS)
#define B_LOADS ((B_CHUNKS + THREADS - 1) / THREADS)
#define A_STAGE (BM * ROW4)
layout(local_size_x = THREADS, local_size_y = 1, local_size_z = 1) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufA { uvec4 a8[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { uvec4 b8[]; };
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
    int nsplit, kchunk, sCs;
    float alpha, beta;
} p;

// Stage s of A: As[s * A_STAGE + m * ROW4 + k / 8] = A[m_tile + m, k0 + k .. k0 + k + 7].
shared uvec4 As[2 * A_STAGE];
#ifdef B_VEC_N
#define BROW4 (BN / 8 + 1)
#define B_STAGE (BK * BROW4)
shared uvec4 Bs[2 * B_STAGE];  // Bs[s * B_STAGE + k * BROW4 + n / 8] = B[k0 + k, n_tile + n .. + 7]
#else
#define B_STAGE (BN * ROW4)
shared uvec4 Bs[2 * B_STAGE];  // Bs[s * B_STAGE + n * ROW4 + k / 8] = B[k0 + k .. + 7, n_tile + n]
#endif

void main() {
    const int tid = int(gl_LocalInvocationIndex);
    const int sg = int(gl_SubgroupID);
    const int lane = int(gl_SubgroupInvocationID);
    const int sg_m = sg / SG_N;
    const int sg_n = sg - sg_m * SG_N;
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

    // This invocation's chunks: load i is chunk tid + i * THREADS (none past A_CHUNKS / B_CHUNKS).
    // A: row chunk / (BK / 8), k offset (chunk % (BK / 8)) * 8 within the step.
    int a_at[A_LOADS], a_k[A_LOADS], a_src[A_LOADS];
    [[unroll]] for (int i = 0; i < A_LOADS; ++i) {
        const int chunk = tid + i * THREADS;
        const int m = chunk / (BK / 8);
        a_k[i] = (chunk % (BK / 8)) * 8;
        a_at[i] = m * ROW4 + a_k[i] / 8;
        a_src[i] = abase + min(m_tile + m, p.M - 1) * p.sAm;
    }
    int b_at[B_LOADS], b_k[B_LOADS], b_src[B_LOADS];
    [[unroll]] for (int i = 0; i < B_LOADS; ++i) {
        const int chunk = tid + i * THREADS;
#ifdef B_VEC_N
        // k b_k, columns n..n+7 (N % 8 == 0: a clamped chunk stays whole).
        b_k[i] = chunk / (BN / 8);
        const int n = (chunk % (BN / 8)) * 8;
        b_at[i] = b_k[i] * BROW4 + n / 8;
        b_src[i] = bbase + min(n_tile + n, p.N - 8) * p.sBn;
#else
        // column n, k b_k..b_k+7.
        const int n = chunk / (BK / 8);
        b_k[i] = (chunk % (BK / 8)) * 8;
        b_at[i] = n * ROW4 + b_k[i] / 8;
        b_src[i] = bbase + min(n_tile + n, p.N - 1) * p.sBn;
#endif
    }

    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[FM][FN];
    [[unroll]] for (int i = 0; i < FM; ++i) {
        [[unroll]] for (int j = 0; j < FN; ++j) {
            acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
        }
    }
    uvec4 ra[A_LOADS], rb[B_LOADS];
    int stage = 0;
    for (int k0 = kbegin; k0 < kend; k0 += BK) {
        // This step's chunks go into this stage: loaded here for the first step, else while the
        // step before multiplied.
        if (k0 == kbegin) {
            [[unroll]] for (int i = 0; i < A_LOADS; ++i) {
                const int k = k0 + a_k[i];
                ra[i] = k < kend ? a8[(a_src[i] + k) >> 3] : uvec4(0);
            }
            [[unroll]] for (int i = 0; i < B_LOADS; ++i) {
                const int k = k0 + b_k[i];
                rb[i] = k < kend ? b8[(b_src[i] + k * p.sBk) >> 3] : uvec4(0);
            }
            [[unroll]] for (int i = 0; i < A_LOADS; ++i) {
                if (tid + i * THREADS < A_CHUNKS) {
                    As[a_at[i]] = ra[i];
                }
            }
            [[unroll]] for (int i = 0; i < B_LOADS; ++i) {
                if (tid + i * THREADS < B_CHUNKS) {
                    Bs[b_at[i]] = rb[i];
                }
            }
            barrier();
        }
        const bool more = k0 + BK < kend;
        if (more) {  // the next step's chunks, in flight while this one multiplies
            [[unroll]] for (int i = 0; i < A_LOADS; ++i) {
                const int k = k0 + BK + a_k[i];
                ra[i] = k < kend ? a8[(a_src[i] + k) >> 3] : uvec4(0);
            }
            [[unroll]] for (int i = 0; i < B_LOADS; ++i) {
                const int k = k0 + BK + b_k[i];
                rb[i] = k < kend ? b8[(b_src[i] + k * p.sBk) >> 3] : uvec4(0);
            }
        }
        const int as0 = stage * A_STAGE, bs0 = stage * B_STAGE;
        [[unroll]] for (int kk = 0; kk < BK; kk += 16) {
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[FM];
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fb[FN];
            [[unroll]] for (int i = 0; i < FM; ++i) {
                coopMatLoadNV(fa[i], As, as0 + ((sg_m * FM + i) * 16) * ROW4 + kk / 8, ROW4, false);
            }
            [[unroll]] for (int j = 0; j < FN; ++j) {
#ifdef B_VEC_N
                coopMatLoadNV(fb[j], Bs, bs0 + kk * BROW4 + (sg_n * FN + j) * 2, BROW4, false);
#else
                coopMatLoadNV(fb[j], Bs, bs0 + ((sg_n * FN + j) * 16) * ROW4 + kk / 8, ROW4, true);
#endif
            }
            [[unroll]] for (int i = 0; i < FM; ++i) {
                [[unroll]] for (int j = 0; j < FN; ++j) {
                    acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
                }
            }
        }
        if (more) {  // into the other stage, last read in the step before this one's barrier
            [[unroll]] for (int i = 0; i < A_LOADS; ++i) {
                if (tid + i * THREADS < A_CHUNKS) {
                    As[(A_STAGE - as0) + a_at[i]] = ra[i];
                }
            }
            [[unroll]] for (int i = 0; i < B_LOADS; ++i) {
                if (tid + i * THREADS < B_CHUNKS) {
                    Bs[(B_STAGE - bs0) + b_at[i]] = rb[i];
                }
            }
        }
        barrier();
        stage ^= 1;
    }

    // Subgroup sg's patch: As[sg * 64 ..] as 256 fp32 bits, row m of the fragment at uvec4 4 m.
    const int cbase = p.coff + b1 * p.sCb1 + b2 * p.sCb2 + split * p.sCs;
    [[unroll]] for (int i = 0; i < FM; ++i) {
        [[unroll]] for (int j = 0; j < FN; ++j) {
            coopMatStoreNV(acc[i][j], As, sg * 64, 4, false);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            const int m0 = m_tile + (sg_m * FM + i) * 16;
            const int n0 = n_tile + (sg_n * FN + j) * 16;
            [[unroll]] for (int t = 0; t < 8; ++t) {
                const int e = lane + 32 * t;
                const int m = m0 + e / 16;
                const int n = n0 + e % 16;
                if (m < p.M && n < p.N) {
                    float v = p.alpha * uintBitsToFloat(As[sg * 64 + e / 4][e % 4]);
#ifdef HAS_BIAS
                    v += p.beta * LOAD_BIAS(p.biasoff + m * p.sbm + n * p.sbn);
#endif
                    STORE_C(cbase + m * p.ldc + n, v);
                }
            }
            subgroupBarrier();  // every lane has read the patch before the next fragment overwrites it
        }
    }
}
