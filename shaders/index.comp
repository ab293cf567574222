#version 450
// Advanced indexing by K index tensors on the leading dims of src (x[i0, i1, ...]):
//   out[b, r] = src[i0[b], ..., i{K-1}[b], r]
// b runs over the index tensors' broadcast shape (collapsed to at most 4 dims), r over the
// elements of src past its first K dims.
// Bindings: 0 = src, 1..INDICES = the index tensors (unused ones bind index 0 again), INDICES + 1 =
// out, each of any dtype (ANY_IN / ANY_OUT in dtype.glslh; specialization constants S_DT,
// I0_DT.., O_DT = 0 to INDICES + 1).
// Defines: INT_PATH: an integer output (through int), else through float. INDICES: the index
// bindings, 3 where not defined (a device of fewer storage buffers a stage binds the op's 1 or 2).
// An index outside [-size, size) gives 0 (torch raises; the file may not).
// One invocation per output element. Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

#ifndef INDICES
#define INDICES 3
#endif

ANY_IN(0, S, s, 0)
ANY_IN(1, I0, i0, 1)
#if INDICES > 1
ANY_IN(2, I1, i1, 2)
#endif
#if INDICES > 2
ANY_IN(3, I2, i2, 3)
#endif
ANY_OUT(INDICES + 1, O, o, INDICES + 1)

layout(push_constant) uniform Push {
    uint n;
    uint nb;         // collapsed broadcast dims, 1..4
    uint k;          // index tensors, 1..3
    uint rest;       // elements of src past its first k dims
    uint bsize[4];
    uint istride[12];  // index tensor j's strides over the broadcast dims: istride[4 * j + d]
    int size[3];     // src's first k sizes
    uint stride[3];  // and their strides in elements
} p;

int index_at(uint j, uint e) {
#if INDICES == 1
    return loadi_I0(e);
#else
    if (j == 0u) {
        return loadi_I0(e);
    }
#if INDICES == 2
    return loadi_I1(e);
#else
    if (j == 1u) {
        return loadi_I1(e);
    }
    return loadi_I2(e);
#endif
#endif
}

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    uint b = gid / p.rest;
    uint src = gid - b * p.rest;
    uint e[3] = uint[3](0u, 0u, 0u);
    for (int d = int(p.nb) - 1; d >= 0; --d) {
        uint q = b / p.bsize[d];
        uint c = b - q * p.bsize[d];
        for (uint j = 0u; j < p.k; ++j) {
            e[j] += c * p.istride[4u * j + uint(d)];
        }
        b = q;
    }
    for (uint j = 0u; j < p.k; ++j) {
        int i = index_at(j, e[j]);
        i = i < 0 ? i + p.size[j] : i;
        if (i < 0 || i >= p.size[j]) {
            store_O(gid, 0);
            return;
        }
        src += uint(i) * p.stride[j];
    }
#ifdef INT_PATH
    store_O(gid, loadi_S(src));
#else
    store_O(gid, load_S(src));
#endif
}
