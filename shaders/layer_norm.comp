#version 450
// Layer norm over the last N elements of each contiguous row (shaders/rows.glslh: a
// workgroup per row with ROW_WG, else an invocation per row).
// Bindings: 0 = in, 1 = out, 2 = weight[N], 3 = bias[N], 4 = mean[rows], 5 = rstd[rows].
// Absent weight/bias are bound to a placeholder and never touched.
// Defines: elem_defines for X, Y, W, B, M (mean), R (rstd); HAS_W, HAS_B; ROW_WG.
// Two passes for the statistics (mean, then the centred sum of squares), biased variance.
#include "dtype.glslh"
#include "rows.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufW { W_T w[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufB { B_T b[]; };
layout(std430, set = 0, binding = 4) writeonly buffer BufMean { M_T mean_out[]; };
layout(std430, set = 0, binding = 5) writeonly buffer BufRstd { R_T rstd_out[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint n;
    float eps;
    uint stat_off;  // index of this dispatch's first row in the bound mean/rstd ranges
} p;

void main() {
    const uint row = row_index();
    if (row >= p.rows) {
        return;
    }
    const uint lane = row_lane();
    const uint base = row * p.n;
    float s = 0.0;
    for (uint k = lane; k < p.n; k += ROW_LANES) {
        s += LOAD_X(base + k);
    }
    const float mean = row_sum(s) / float(p.n);
    float q = 0.0;
    for (uint k = lane; k < p.n; k += ROW_LANES) {
        const float c = LOAD_X(base + k) - mean;
        q += c * c;
    }
    const float rstd = inversesqrt(row_sum(q) / float(p.n) + p.eps);
    for (uint k = lane; k < p.n; k += ROW_LANES) {
        float v = (LOAD_X(base + k) - mean) * rstd;
#ifdef HAS_W
        v *= LOAD_W(k);
#endif
#ifdef HAS_B
        v += LOAD_B(k);
#endif
        STORE_Y(base + k, v);
    }
    if (lane == 0u) {
        STORE_M(p.stat_off + row, mean);
        STORE_R(p.stat_off + row, rstd);
    }
}
