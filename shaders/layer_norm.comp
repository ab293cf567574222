#version 450
// Layer norm over the last N elements of each contiguous row (shaders/rows.glslh: a
// workgroup per row with ROW_GROUP, else an invocation per row).
// Bindings: 0 = in, 1 = out, 2 = weight[N], 3 = bias[N], 4 = mean[rows], 5 = rstd[rows].
// Absent weight/bias are bound to a placeholder and never touched.
// A device of fewer than six storage buffers a stage takes the norm in two dispatches of four
// bindings at most: NORM_ONLY binds 0..3 alone (no statistics written), STATS_ONLY binds
// 0 = in, 1 = mean, 2 = rstd and writes only the statistics.
// Defines: elem_defines for X and Y (the row's reads and writes; X alone with STATS_ONLY); HAS_W,
// HAS_B; ROW_GROUP; NORM_ONLY or STATS_ONLY.
// Specialization constants: 0 = ROW_WG (rows.glslh); weight, bias, mean and rstd are of any dtype
// (ANY_IN / ANY_OUT, 1..4 in that order, whichever are bound).
// Two passes for the statistics (mean, then the centred sum of squares), biased variance.
#include "dtype.glslh"
#include "rows.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
#ifdef STATS_ONLY
ANY_OUT(1, M, mean_out, 3)
ANY_OUT(2, R, rstd_out, 4)
#else
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };
ANY_IN(2, W, w_in, 1)
ANY_IN(3, B, b_in, 2)
#ifndef NORM_ONLY
ANY_OUT(4, M, mean_out, 3)
ANY_OUT(5, R, rstd_out, 4)
#endif
#endif

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
#ifndef STATS_ONLY
    for (uint k = lane; k < p.n; k += ROW_LANES) {
        float v = (LOAD_X(base + k) - mean) * rstd;
#ifdef HAS_W
        v *= load_W(k);
#endif
#ifdef HAS_B
        v += load_B(k);
#endif
        STORE_Y(base + k, v);
    }
#endif
#ifndef NORM_ONLY
    if (lane == 0u) {
        store_M(p.stat_off + row, mean);
        store_R(p.stat_off + row, rstd);
    }
#endif
}
