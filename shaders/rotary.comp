#version 450
// Rotary position embedding of x [B, S, H, D] by tables cos, sin [T, R] read at rows start + s;
// math in fp32, one rounding to out's type (ExecuTorch's et_vk.apply_rotary_emb*).
//   INTERLEAVED (R = D / 2): pairs (x[2k], x[2k+1]) turn by angle k:
//     out[2k] = x[2k] cos - x[2k+1] sin, out[2k+1] = x[2k] sin + x[2k+1] cos
//   else (HF's rotate_half over the first R of D; the rest pass through):
//     out[d] = x[d] cos[d] + (d < R/2 ? -x[d + R/2] : x[d - R/2]) sin[d]
// Bindings: 0 = x, 1 = cos, 2 = sin, 3 = out. Defines: elem_defines for X, C, N (sin), O.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufX { X_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufC { C_T c[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufN { N_T n[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufO { O_T o[]; };

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
    float re = LOAD_X(first), im = LOAD_X(first + 1u);
    float cv = LOAD_C(row + d / 2u), sv = LOAD_N(row + d / 2u);
    STORE_O(i, (d & 1u) == 0u ? re * cv - im * sv : re * sv + im * cv);
#else
    if (d >= p.R) {
        STORE_O(i, LOAD_X(i));
        return;
    }
    uint half_r = p.R / 2u;
    float rot = d < half_r ? -LOAD_X(i + half_r) : LOAD_X(i - half_r);
    STORE_O(i, LOAD_X(i) * LOAD_C(row + d) + rot * LOAD_N(row + d));
#endif
}
