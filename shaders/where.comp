#version 450
// Selection with numpy broadcasting: out[i] = cond[ic] != 0 ? a[ia] : b[ib].
// Bindings: 0 = cond (bool), 1 = a, 2 = b, 3 = out (contiguous row-major).
// Defines: elem_defines for C, A, B and O; INT_PATH: an integer output (values pass
// through int, exact past 2^24), else through float.
// One invocation per output element; indices from per-operand strides (0 on broadcast dims).
// Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufC { C_T c[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufA { A_T a[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufB { B_T b[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufO { O_T o[]; };

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
    bool take_a = LOADI_C(ic) != 0;
#ifdef INT_PATH
    STORE_O(gid, take_a ? LOADI_A(ia) : LOADI_B(ib));
#else
    STORE_O(gid, take_a ? LOAD_A(ia) : LOAD_B(ib));
#endif
}
