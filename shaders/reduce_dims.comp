#version 450
// Sum (or mean) over any set of dims of a contiguous tensor.
// Bindings: 0 = in, 1 = out (contiguous; the kept dims in their original order).
// The caller splits the input dims into kept dims (ksize/kstride) and reduced dims
// (rsize/rstride), each merged where adjacent and contiguous, at most 6 of each.
// Each output element by a workgroup (ROW_GROUP) or an invocation (shaders/rows.glslh):
// invocation `lane` sums reduced elements lane, lane + ROW_LANES, ... (flat index over the
// reduced dims, the innermost fastest) with compensated (Kahan) summation; the partials
// are then added in a tree. Define MEAN to divide by the number of reduced elements;
// elem_defines for X. Specialization constants: 0 = ROW_WG (rows.glslh), 1 = the output's
// dtype (ANY_OUT).
#include "dtype.glslh"
#include "rows.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
ANY_OUT(1, Y, y_out, 1)

layout(push_constant) uniform Push {
    uint n_out;     // output elements
    uint nk;        // kept dims, 0..6
    uint nr;        // reduced dims, 1..6
    uint count;     // reduced elements per output (product of rsize)
    uint ksize[6];
    uint kstride[6];
    uint rsize[6];
    uint rstride[6];
} p;

void main() {
    const uint gid = row_index();
    if (gid >= p.n_out) {
        return;
    }
    uint base = 0u;
    uint r = gid;
    for (int d = int(p.nk) - 1; d >= 0; --d) {
        uint s = p.ksize[d];
        uint q = r / s;
        base += (r - q * s) * p.kstride[d];
        r = q;
    }
    const uint last = p.nr - 1u;
    const uint len = p.rsize[last];
    const uint st = p.rstride[last];

    precise float sum = 0.0;
    precise float comp = 0.0;
    float plain = 0.0;  // uncompensated: the result once an inf or NaN is summed (comp is NaN then)
    // p.count == 0 (an empty reduction): the sum is 0, the mean NaN (as torch)
    for (uint i = row_lane(); i < p.count; i += ROW_LANES) {
        uint t = i / len;
        uint off = base + (i - t * len) * st;
        for (int d = int(last) - 1; d >= 0; --d) {
            uint s = p.rsize[d];
            uint q = t / s;
            off += (t - q * s) * p.rstride[d];
            t = q;
        }
        float e = LOAD_X(off);
        plain += e;
        precise float v = e - comp;
        precise float nsum = sum + v;
        comp = (nsum - sum) - v;
        sum = nsum;
    }
    float total = row_sum(sum - comp);
    plain = row_sum(plain);
    if (isinf(plain) || isnan(plain)) {
        total = plain;
    }
    if (row_lane() == 0u) {
#ifdef MEAN
        store_Y(gid, p.count == 0u ? uintBitsToFloat(0x7FC00000u) : total / float(p.count));
#else
        store_Y(gid, total);
#endif
    }
}
