#version 450
// Sum (or mean) over any set of dims of a contiguous tensor.
// Bindings: 0 = in, 1 = out (contiguous; the kept dims in their original order).
// The caller splits the input dims into kept dims (ksize/kstride) and reduced dims
// (rsize/rstride), each merged where adjacent and contiguous, at most 6 of each.
// One invocation per output element; it walks its reduced elements with the
// innermost reduced dim as a plain strided loop. Compensated (Kahan) summation.
// Define MEAN to divide by the number of reduced elements; elem_defines for X and Y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };

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
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
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
    uint last = p.nr - 1u;
    uint len = p.rsize[last];
    uint st = p.rstride[last];
    uint outer = p.count / len;  // 0 for an empty reduction: the sum is 0, the mean NaN (as torch)

    precise float sum = 0.0;
    precise float comp = 0.0;
    float plain = 0.0;  // uncompensated: the result once an inf or NaN is summed (comp is NaN then)
    for (uint o = 0u; o < outer; ++o) {
        uint off = base;
        uint t = o;
        for (int d = int(last) - 1; d >= 0; --d) {
            uint s = p.rsize[d];
            uint q = t / s;
            off += (t - q * s) * p.rstride[d];
            t = q;
        }
        for (uint k = 0u; k < len; ++k) {
            float e = LOAD_X(off + k * st);
            plain += e;
            precise float v = e - comp;
            precise float nsum = sum + v;
            comp = (nsum - sum) - v;
            sum = nsum;
        }
    }
    if (isinf(plain) || isnan(plain)) {
        sum = plain;
    }
#ifdef MEAN
    STORE_Y(gid, p.count == 0u ? uintBitsToFloat(0x7FC00000u) : sum / float(p.count));
#else
    STORE_Y(gid, sum);
#endif
}
