#version 450
// The largest or smallest element (or its index), or the variance, over any set of dims.
// Bindings: 0 = in, 1 = out (contiguous; the kept dims in their original order).
// The dims come split and merged as for reduce_dims.comp (ksize/kstride, rsize/rstride, at most
// 6 of each); one invocation walks one output's `count` reduced elements in flat order (the
// innermost reduced dim fastest), so an index is the flat index over the reduced dims.
// Defines (one op kind): MAX or MIN (the value), ARGMAX or ARGMIN (its first index; NaN counts
// as the largest and the smallest, as in torch: NaN wins), VAR (the two-pass variance divided by
// count - correction); elem_defines for X and Y. Math in fp32.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T y[]; };

layout(push_constant) uniform Push {
    uint n_out;
    uint nk;
    uint nr;
    uint count;
    float correction;  // VAR: the divisor is count - correction
    uint ksize[6];
    uint kstride[6];
    uint rsize[6];
    uint rstride[6];
} p;

uint offset_of(uint base, uint i) {
    const uint last = p.nr - 1u;
    uint t = i / p.rsize[last];
    uint off = base + (i - t * p.rsize[last]) * p.rstride[last];
    for (int d = int(last) - 1; d >= 0; --d) {
        uint s = p.rsize[d];
        uint q = t / s;
        off += (t - q * s) * p.rstride[d];
        t = q;
    }
    return off;
}

void main() {
    const uint gid = gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u + gl_GlobalInvocationID.x;
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
#ifdef VAR
    precise float sum = 0.0;
    for (uint i = 0u; i < p.count; ++i) {
        sum += LOAD_X(offset_of(base, i));
    }
    const float mean = sum / float(p.count);
    precise float squares = 0.0;
    for (uint i = 0u; i < p.count; ++i) {
        float d = LOAD_X(offset_of(base, i)) - mean;
        squares += d * d;
    }
    STORE_Y(gid, squares / max(float(p.count) - p.correction, 0.0));
#else
    float best = LOAD_X(offset_of(base, 0u));
    uint at = 0u;
    for (uint i = 1u; i < p.count && !isnan(best); ++i) {
        float e = LOAD_X(offset_of(base, i));
#if defined(MAX) || defined(ARGMAX)
        bool better = e > best || isnan(e);
#else
        bool better = e < best || isnan(e);
#endif
        if (better) {
            best = e;
            at = i;
        }
    }
#if defined(MAX) || defined(MIN)
    STORE_Y(gid, best);
#else
    STORE_Y(gid, int(at));
#endif
#endif
}
