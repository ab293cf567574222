#version 450
// Strided copy of elements, bit-exact: T is the unsigned type of the element's
// size (uint, uint16_t or uint8_t), so any dtype copies.
// Bindings: 0 = src, 1 = dst.
// General path: for every index tuple i over `size[0..ndim)`,
//   dst[dst_off + sum(i[d] * dst_stride[d])] = src[src_off + sum(i[d] * src_stride[d])]
// (covers permute, slice with step, cat into a region, expand with stride 0).
// Define CONTIG_VEC4: dst[dst_off + i] = src[src_off + i] over n uvec4s (plain copy;
// the offsets then count uvec4s).
// One invocation per element (or per uvec4). Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

#ifdef CONTIG_VEC4
#undef T
#define T uvec4
#endif
#ifndef T
#define T uint
#endif

layout(std430, set = 0, binding = 0) readonly buffer BufSrc { T src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufDst { T dst[]; };

layout(push_constant) uniform Push {
    uint n;         // number of elements (uvec4s for CONTIG_VEC4)
    uint ndim;      // 1..6
    uint src_off;   // element offsets into the bound ranges
    uint dst_off;
    uint size[6];
    uint src_stride[6];
    uint dst_stride[6];
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
#ifdef CONTIG_VEC4
    dst[p.dst_off + gid] = src[p.src_off + gid];
#else
    uint is = p.src_off;
    uint id = p.dst_off;
    uint r = gid;
    for (int d = int(p.ndim) - 1; d >= 0; --d) {
        uint s = p.size[d];
        uint q = r / s;
        uint c = r - q * s;
        is += c * p.src_stride[d];
        id += c * p.dst_stride[d];
        r = q;
    }
    dst[id] = src[is];
#endif
}
