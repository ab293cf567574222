#version 450
// Gather along one dim: out[i] = src[i with its coordinate on DIM replaced by index[i]].
// Bindings: 0 = src, 1 = index (any integer type), 2 = out (index's shape), contiguous, each of any
// dtype (ANY_IN / ANY_OUT in dtype.glslh; specialization constants S_DT, I_DT, O_DT = 0-2).
// Defines: INT_PATH: an integer output (through int), else through float. An index outside
// [-len, len) gives 0 (torch raises; the file may not).
// One invocation per output element. Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, S, s, 0)
ANY_IN(1, I, idx, 1)
ANY_OUT(2, O, o, 2)

layout(push_constant) uniform Push {
    uint n;
    uint ndim;       // rank of index and src, 1..6
    uint dim;        // the gathered dim
    int len;         // src's size on dim
    uint size[6];    // index's shape
    uint stride[6];  // src's contiguous strides
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    int j = loadi_I(gid);
    j = j < 0 ? j + p.len : j;
    if (j < 0 || j >= p.len) {
        store_O(gid, 0);
        return;
    }
    uint src = 0u;
    uint r = gid;
    for (int d = int(p.ndim) - 1; d >= 0; --d) {
        uint q = r / p.size[d];
        uint k = r - q * p.size[d];
        src += (uint(d) == p.dim ? uint(j) : k) * p.stride[d];
        r = q;
    }
#ifdef INT_PATH
    store_O(gid, loadi_S(src));
#else
    store_O(gid, load_S(src));
#endif
}
