#version 450
// Gather along one dim: out[i] = src[i with its coordinate on DIM replaced by index[i]].
// Bindings: 0 = src, 1 = index (any integer type), 2 = out (index's shape), contiguous.
// Defines: elem_defines for S, I and O; INT_PATH: an integer output (through int), else
// through float. An index outside [-len, len) gives 0 (torch raises; the file may not).
// One invocation per output element. Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufS { S_T s[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufI { I_T idx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufO { O_T o[]; };

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
    int j = LOADI_I(gid);
    j = j < 0 ? j + p.len : j;
    if (j < 0 || j >= p.len) {
        STORE_O(gid, 0);
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
    STORE_O(gid, LOADI_S(src));
#else
    STORE_O(gid, LOAD_S(src));
#endif
}
