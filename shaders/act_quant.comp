#version 450
// Int8 quantization of activations by rows of K elements (ExecuTorch's 8da4w linears: torchao's
// ASYMMETRIC per-token scale and zero point, then the row as those int8 values give it back); fp32 math.
//   CHOOSE, one invocation per row: lo = min(x, 0), hi = max(x, 0),
//     scale = max((hi - lo) / 255, eps), zero = clamp(-128 - roundEven(lo / scale), -128, 127);
//     bindings 0 = x, 1 = scale (out), 2 = zero (out)
//   else, one invocation per element of row r:
//     out = (clamp(roundEven(x * (1 / scale[r])) + zero[r], -128, 127) - zero[r]) * scale[r];
//     bindings 0 = x, 1 = scale, 2 = zero, 3 = out
// Buffers of any dtype (ANY_IN / ANY_OUT, specialization constants 0..3 in binding order).
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x_in, 0)
#ifdef CHOOSE
ANY_OUT(1, S, s_out, 1)
ANY_OUT(2, Z, z_out, 2)
#else
ANY_IN(1, S, s_in, 1)
ANY_IN(2, Z, z_in, 2)
ANY_OUT(3, O, o_out, 3)
#endif

layout(push_constant) uniform Push {
    uint n;  // rows (CHOOSE) or elements
    uint K;
    float eps;
} p;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
             + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
#ifdef CHOOSE
    float lo = 0.0, hi = 0.0;
    for (uint k = 0u; k < p.K; k++) {
        float v = load_X(i * p.K + k);
        lo = min(lo, v);
        hi = max(hi, v);
    }
    float scale = max((hi - lo) / 255.0, p.eps);
    store_S(i, scale);
    store_Z(i, clamp(-128.0 - roundEven(lo / scale), -128.0, 127.0));
#else
    uint row = i / p.K;
    float scale = load_S(row), zero = float(loadi_Z(row));
    float q = clamp(roundEven(load_X(i) * (1.0 / scale)) + zero, -128.0, 127.0);
    store_O(i, (q - zero) * scale);
#endif
}
