#version 450
// Softmax / log-softmax along one dim of a contiguous tensor viewed as [outer, D, inner].
// Bindings: 0 = in, 1 = out. Defines: elem_defines for X and Y; LOG for log-softmax; ROW_GROUP.
// Specialization constant 0 = ROW_WG (rows.glslh).
// Each (outer, inner) row by a workgroup (ROW_GROUP) or an invocation (shaders/rows.glslh);
// three passes over the row: max, sum of exp(x - max), then the write (max-subtracted,
// numerically stable). A NaN in the row makes the whole row NaN, as in torch.
#include "dtype.glslh"
#include "rows.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };

layout(push_constant) uniform Push {
    uint rows;   // outer * inner
    uint d;      // length of the softmax dim
    uint inner;  // product of the dims after it (stride of the softmax dim)
} p;

#define NEG_INF uintBitsToFloat(0xff800000u)

void main() {
    const uint row = row_index();
    if (row >= p.rows) {
        return;
    }
    const uint lane = row_lane();
    const uint o = row / p.inner;
    const uint j = row - o * p.inner;
    const uint base = o * p.d * p.inner + j;
    const uint st = p.inner;

    float m = NEG_INF;
    for (uint k = lane; k < p.d; k += ROW_LANES) {
        const float v = LOAD_X(base + k * st);
        m = (v > m || isnan(v)) && !isnan(m) ? v : m;  // GLSL's max leaves NaN undefined
    }
    m = row_max(m);
    float s = 0.0;
    for (uint k = lane; k < p.d; k += ROW_LANES) {
        s += exp(LOAD_X(base + k * st) - m);
    }
    s = row_sum(s);
#ifdef LOG
    const float shift = m + log(s);
    for (uint k = lane; k < p.d; k += ROW_LANES) {
        STORE_Y(base + k * st, LOAD_X(base + k * st) - shift);
    }
#else
    const float inv = 1.0 / s;
    for (uint k = lane; k < p.d; k += ROW_LANES) {
        STORE_Y(base + k * st, exp(LOAD_X(base + k * st) - m) * inv);
    }
#endif
}
