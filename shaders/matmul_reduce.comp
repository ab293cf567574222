#version 450
// The second pass of a split-K matmul (shaders/matmul_tiled.comp with nsplit > 1):
//   C[b, m, n] = alpha * sum_s P[s, b, m, n]  (+ beta * BIAS[m, n])
// P is the fp32 scratch of nsplit partial products, each contiguous [batch, M, N] and sPs
// elements apart; C is addressed as in shaders/matmul.comp (coff, ldc, batch strides).
// One invocation per element of C: x over n, y over m, z over the batch (b1 * nb2 + b2).
// Bindings: 0 = P, 1 = C, 2 = BIAS (only with HAS_BIAS); C and BIAS of any dtype (ANY_OUT / ANY_IN,
// specialization constants 0 and 1). Defines: HAS_BIAS; WORDS and DT_* (dtype.glslh).
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufP { float part[]; };
ANY_OUT(1, C, c, 0)
#ifdef HAS_BIAS
ANY_IN(2, BIAS, bias, 1)
#endif

layout(push_constant) uniform Push {
    int M, N, nb2, nsplit, sPs;
    int coff, ldc, sCb1, sCb2;
    int biasoff, sbm, sbn;
    float alpha, beta;
} p;

void main() {
    const int n = int(gl_GlobalInvocationID.x);
    const int m = int(gl_GlobalInvocationID.y);
    const int bz = int(gl_GlobalInvocationID.z);
    if (n >= p.N) {
        return;
    }
    const int at = (bz * p.M + m) * p.N + n;
    float sum = 0.0;
    for (int s = 0; s < p.nsplit; ++s) {
        sum += part[at + s * p.sPs];
    }
    float v = p.alpha * sum;
#ifdef HAS_BIAS
    v += p.beta * load_BIAS(uint(p.biasoff + m * p.sbm + n * p.sbn));
#endif
    const int b1 = bz / p.nb2;
    store_C(uint(p.coff + b1 * p.sCb1 + (bz - b1 * p.nb2) * p.sCb2 + m * p.ldc + n), v);
}
