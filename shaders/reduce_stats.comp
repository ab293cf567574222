#version 450
// The largest or smallest element (or its index), or the variance, over any set of dims.
// Bindings: 0 = in, 1 = out (contiguous; the kept dims in their original order).
// The dims come split and merged as for reduce_dims.comp (ksize/kstride, rsize/rstride, at most
// 6 of each); an output's `count` reduced elements are walked in flat order (the innermost
// reduced dim fastest), so an index is the flat index over the reduced dims. Without ROW_GROUP
// one invocation walks one output; with it (rows.glslh) a workgroup does, its lanes taking every
// ROW_WG-th element and combining (value, first index) pairs in shared memory (a long row: the
// vocabulary's logits of a greedy decode step).
// Defines (one op kind): MAX or MIN (the value), ARGMAX or ARGMIN (its first index; NaN counts
// as the largest and the smallest, as in torch: NaN wins), VAR (the two-pass variance divided by
// count - correction); elem_defines for X; ROW_GROUP. Math in fp32.
// Specialization constants: 0 = ROW_WG (rows.glslh), 1 = the output's dtype (ANY_OUT; none with
// SPLIT).
// A long row of few outputs (the greedy tail) is cut in two passes, so that more than one
// workgroup an output reads it: SPLIT (pass 1) gives workgroup w segment w % segments of output
// w / segments, the seg_len elements of its walk from (w % segments) * seg_len, and writes that
// segment's (value bits, index) to pairs[w] (binding 1, no Y); COMBINE (pass 2) reads an
// output's `count` pairs from binding 0 (no X) as it would read elements, each with its index.
#include "dtype.glslh"
#include "rows.glslh"

#ifdef COMBINE
layout(std430, set = 0, binding = 0) readonly buffer BufPairs { uvec2 pairs_in[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
#endif
#ifdef SPLIT
layout(std430, set = 0, binding = 1) writeonly buffer BufPairs { uvec2 pairs_out[]; };
#else
ANY_OUT(1, Y, y_out, 1)
#endif

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
    uint seg_len;  // SPLIT: the elements of a segment
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

#if !defined(VAR)
// Whether element (e, i) goes before (best, at) in the order the result takes: NaN first, then the
// larger (MAX, ARGMAX) or smaller value, then the smaller index. NONE: no element (a lane that
// had none).
#define NONE 0xFFFFFFFFu
bool before(float e, uint i, float best, uint at) {
    if (i == NONE || at == NONE) {
        return i != NONE;
    }
    if (isnan(e) || isnan(best)) {
        return isnan(e) && (!isnan(best) || i < at);
    }
#if defined(MAX) || defined(ARGMAX)
    return e > best || (e == best && i < at);
#else
    return e < best || (e == best && i < at);
#endif
}
#ifdef ROW_GROUP
shared float best_part[ROW_WG];
shared uint at_part[ROW_WG];
#endif
#endif

void main() {
#ifdef SPLIT
    const uint segments = (p.count + p.seg_len - 1u) / p.seg_len;
    const uint w = row_index();
    const uint gid = w / segments;
    const uint begin = (w - gid * segments) * p.seg_len;
    const uint end = min(p.count, begin + p.seg_len);
#else
    const uint gid = row_index();
    const uint begin = 0u;
    const uint end = p.count;
#endif
    if (gid >= p.n_out) {
        return;
    }
    const uint lane = row_lane();
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
    for (uint i = lane; i < p.count; i += ROW_LANES) {
        sum += LOAD_X(offset_of(base, i));
    }
    const float mean = row_sum(sum) / float(p.count);
    precise float squares = 0.0;
    for (uint i = lane; i < p.count; i += ROW_LANES) {
        float d = LOAD_X(offset_of(base, i)) - mean;
        squares += d * d;
    }
    squares = row_sum(squares);
    if (lane == 0u) {
        store_Y(gid, squares / max(float(p.count) - p.correction, 0.0));
    }
#else
    float best = 0.0;
    uint at = NONE;
    for (uint i = begin + lane; i < end && !isnan(best); i += ROW_LANES) {
#ifdef COMBINE
        const uvec2 pair = pairs_in[gid * p.count + i];
        const float e = uintBitsToFloat(pair.x);
        const uint index = pair.y;
#else
        const float e = LOAD_X(offset_of(base, i));
        const uint index = i;
#endif
        if (before(e, index, best, at)) {
            best = e;
            at = index;
        }
    }
#ifdef ROW_GROUP
    best_part[lane] = best;
    at_part[lane] = at;
    barrier();
    for (uint half_ = ROW_WG / 2u; half_ > 0u; half_ >>= 1) {
        if (lane < half_ && before(best_part[lane + half_], at_part[lane + half_], best_part[lane], at_part[lane])) {
            best_part[lane] = best_part[lane + half_];
            at_part[lane] = at_part[lane + half_];
        }
        barrier();
    }
    best = best_part[0];
    at = at_part[0];
#endif
    if (lane == 0u) {
#ifdef SPLIT
        pairs_out[row_index()] = uvec2(floatBitsToUint(best), at);  // a segment is never empty
#else
#ifndef COMBINE
        if (at == NONE) {  // nothing reduced (count 0): element 0, as a walk from it would give
            at = 0u;
            best = LOAD_X(offset_of(base, 0u));
        }
#endif
#if defined(MAX) || defined(MIN)
        store_Y(gid, best);
#else
        store_Y(gid, int(at));
#endif
#endif
    }
#endif
}
