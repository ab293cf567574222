#version 450
// RMS norm over the last N elements: y = x * rsqrt(mean(x^2) + eps) [* w], each contiguous
// row by a workgroup (ROW_GROUP) or an invocation (shaders/rows.glslh).
// Bindings: 0 = in, 1 = out, 2 = weight[N] (placeholder unless HAS_W).
// Defines: elem_defines for X and Y (the row's reads and writes); HAS_W; ROW_GROUP.
// Specialization constants: 0 = ROW_WG (rows.glslh), 1 = the weight's dtype (ANY_IN).
#include "dtype.glslh"
#include "rows.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };
ANY_IN(2, W, w_in, 1)

layout(push_constant) uniform Push {
    uint rows;
    uint n;
    float eps;
} p;

void main() {
    const uint row = row_index();
    if (row >= p.rows) {
        return;
    }
    const uint lane = row_lane();
    const uint base = row * p.n;
    float q = 0.0;
    for (uint k = lane; k < p.n; k += ROW_LANES) {
        const float v = LOAD_X(base + k);
        q += v * v;
    }
    const float r = inversesqrt(row_sum(q) / float(p.n) + p.eps);
    for (uint k = lane; k < p.n; k += ROW_LANES) {
#ifdef HAS_W
        STORE_Y(base + k, LOAD_X(base + k) * r * load_W(k));
#else
        STORE_Y(base + k, LOAD_X(base + k) * r);
#endif
    }
}
