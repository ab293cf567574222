#version 450
// Group norm (aten.native_group_norm) of x [N, C, *]: row r = (n, g) is the contiguous C/G * HW
// elements of group g of sample n (shaders/rows.glslh: a workgroup per row with ROW_GROUP, else an
// invocation per row), normalised by its mean and biased variance, then each element of channel
// c = g * C/G + k / HW times weight[c] plus bias[c].
// Bindings: 0 = x, 1 = y, 2 = weight[C], 3 = bias[C], 4 = mean[rows], 5 = rstd[rows], each of any
// dtype (ANY_IN / ANY_OUT, specialization constants 0..5 in binding order). Absent weight/bias are
// bound to a placeholder and never read. A device of fewer than six storage buffers a stage takes
// the norm in two dispatches of four bindings at most: NORM_ONLY binds 0..3 alone (no statistics
// written), STATS_ONLY binds 0 = x, 1 = mean, 2 = rstd and writes only the statistics (the
// specialization constants keep their ids). Defines: HAS_W, HAS_B; ROW_GROUP; NORM_ONLY or
// STATS_ONLY. Specialization constant 6 = ROW_WG (rows.glslh).
#define ROW_WG_ID 6
#include "dtype.glslh"
#include "rows.glslh"

ANY_IN(0, X, x_in, 0)
#ifdef STATS_ONLY
ANY_OUT(1, M, mean_out, 4)
ANY_OUT(2, R, rstd_out, 5)
#else
ANY_OUT(1, Y, y_out, 1)
ANY_IN(2, W, w_in, 2)
ANY_IN(3, B, b_in, 3)
#ifndef NORM_ONLY
ANY_OUT(4, M, mean_out, 4)
ANY_OUT(5, R, rstd_out, 5)
#endif
#endif

layout(push_constant) uniform Push {
    uint rows;   // N * G
    uint n;      // C/G * HW
    float eps;
    uint hw;     // elements of one channel
    uint groups;
    uint cg;     // channels of one group
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
        s += load_X(base + k);
    }
    const float mean = row_sum(s) / float(p.n);
    float q = 0.0;
    for (uint k = lane; k < p.n; k += ROW_LANES) {
        const float c = load_X(base + k) - mean;
        q += c * c;
    }
    const float rstd = inversesqrt(row_sum(q) / float(p.n) + p.eps);
#ifndef STATS_ONLY
    const uint c0 = (row % p.groups) * p.cg;
    for (uint k = lane; k < p.n; k += ROW_LANES) {
        float v = (load_X(base + k) - mean) * rstd;
#ifdef HAS_W
        v *= load_W(c0 + k / p.hw);
#endif
#ifdef HAS_B
        v += load_B(c0 + k / p.hw);
#endif
        store_Y(base + k, v);
    }
#endif
#ifndef NORM_ONLY
    if (lane == 0u) {
        store_M(row, mean);
        store_R(row, rstd);
    }
#endif
}
