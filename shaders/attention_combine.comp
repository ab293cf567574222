#version 450
// The P partials of shaders/attention_decode.comp's split along the sequence, merged into each
// query row's output: with partial i = (m_i, l_i, a_i[Ev]) and M = max m_i,
//   out[r][e] = sum_i exp(m_i - M) * a_i[e] / sum_i exp(m_i - M) * l_i.
// A NaN m_i makes the row NaN; M = -inf (every score masked) makes it zeros.
// One workgroup of 64 per row, its lanes over e. Bindings: 0 = part (fp32), 1 = out.
// Defines: elem_defines for O.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufP { float part[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufO { O_T o[]; };

layout(push_constant) uniform Push {
    int rows, P, Ev;
} p;

#define NEG_INF uintBitsToFloat(0xff800000u)

void main() {
    const int r = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
    if (r >= p.rows) {
        return;
    }
    const int lane = int(gl_LocalInvocationID.x);
    const int stride = p.Ev + 2;
    const int base = r * p.P * stride;
    float top = NEG_INF;
    bool nan_ = false;
    for (int i = 0; i < p.P; ++i) {
        const float m = part[base + i * stride];
        nan_ = nan_ || isnan(m);
        top = isnan(m) ? top : max(top, m);
    }
    if (nan_ || top == NEG_INF) {
        const float fill = nan_ ? uintBitsToFloat(0x7FC00000u) : 0.0;
        for (int e = lane; e < p.Ev; e += 64) {
            STORE_O(r * p.Ev + e, fill);
        }
        return;
    }
    float den = 0.0;
    for (int i = 0; i < p.P; ++i) {
        den += exp(part[base + i * stride] - top) * part[base + i * stride + 1];
    }
    for (int e = lane; e < p.Ev; e += 64) {
        float num = 0.0;
        for (int i = 0; i < p.P; ++i) {
            num += exp(part[base + i * stride] - top) * part[base + i * stride + 2 + e];
        }
        STORE_O(r * p.Ev + e, num / den);
    }
}
