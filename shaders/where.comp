#version 450
// Selection with numpy broadcasting: out[i] = cond[ic] != 0 ? a[ia] : b[ib].
// Bindings: 0 = cond (bool: uint8, or an int32 word), 1 = a, 2 = b, 3 = out (contiguous row-major),
// each of any dtype (ANY_IN / ANY_OUT in dtype.glslh; specialization constants C_DT, A_DT, B_DT,
// O_DT = 0-3). Defines: INT_PATH: an integer output (values pass through int, exact past 2^24),
// else through float.
// One invocation per output element; indices from per-operand strides (0 on broadcast dims).
// Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, C, c, 0)
ANY_IN(1, A, a, 1)
ANY_IN(2, B, b, 2)
ANY_OUT(3, O, o, 3)

layout(push_constant) uniform Push {
    uint n;
    uint ndim;     // 1..6 (collapsed dims)
    uint size[6];
    uint sc[6];    // strides in elements of cond, a and b
    uint sa[6];
    uint sb[6];
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    uint ic = 0u, ia = 0u, ib = 0u;
    uint r = gid;
    for (int d = int(p.ndim) - 1; d >= 0; --d) {
        uint q = r / p.size[d];
        uint k = r - q * p.size[d];
        ic += k * p.sc[d];
        ia += k * p.sa[d];
        ib += k * p.sb[d];
        r = q;
    }
    bool take_a = loadi_C(ic) != 0;
#ifdef INT_PATH
    store_O(gid, take_a ? loadi_A(ia) : loadi_B(ib));
#else
    store_O(gid, take_a ? load_A(ia) : load_B(ib));
#endif
}
