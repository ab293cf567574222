#version 450
// Rotary position embedding of x [B, S, H, D] by tables cos, sin [T, R] read at rows start + s;
// math in fp32, one rounding to out's type (ExecuTorch's et_vk.apply_rotary_emb*).
//   INTERLEAVED (R = D / 2): pairs (x[2k], x[2k+1]) turn by angle k:
//     out[2k] = x[2k] cos - x[2k+1] sin, out[2k+1] = x[2k] sin + x[2k+1] cos
//   else (HF's rotate_half over the first R of D; the rest pass through):
//     out[d] = x[d] cos[d] + (d < R/2 ? -x[d + R/2] : x[d - R/2]) sin[d]
// Bindings: 0 = x, 1 = cos, 2 = sin, 3 = out, each of any dtype (ANY_IN / ANY_OUT in dtype.glslh;
// specialization constants X_DT, C_DT, N_DT (sin), O_DT = 0-3). Defines: INTERLEAVED.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x, 0)
ANY_IN(1, C, c, 1)
ANY_IN(2, N, n, 2)
ANY_OUT(3, O, o, 3)

layout(push_constant) uniform Push {
    uint total;  // B * S * H * D
    uint S, H, D, R, start;
} p;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
             + gl_LocalInvocationID.x;
    if (i >= p.total) {
        return;
    }
    uint d = i % p.D;
    uint row = (p.start + (i / (p.D * p.H)) % p.S) * p.R;
#ifdef INTERLEAVED
    uint first = i - (d & 1u);
    float re = load_X(first), im = load_X(first + 1u);
    float cv = load_C(row + d / 2u), sv = load_N(row + d / 2u);
    store_O(i, (d & 1u) == 0u ? re * cv - im * sv : re * sv + im * cv);
#else
    if (d >= p.R) {
        store_O(i, load_X(i));
        return;
    }
    uint half_r = p.R / 2u;
    float rot = d < half_r ? -load_X(i + half_r) : load_X(i - half_r);
    store_O(i, load_X(i) * load_C(row + d) + rot * load_N(row + d));
#endif
}
