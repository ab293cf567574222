#version 450
// out = self reversed along the dims whose bit is set in p.flip (aten.flip), of any dtype (ANY_IN /
// ANY_OUT, specialization constants X_DT, O_DT = 0, 1; the same dtype: floats copy through fp32,
// exactly, the others through int). At most 6 dims, collapsed by the builder.
// One invocation per output element. Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x_in, 0)
ANY_OUT(1, O, o_out, 1)

layout(push_constant) uniform Push {
    uint n;
    uint ndim;
    uint flip;
    uint size[6];
} p;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
             + gl_LocalInvocationID.x;
    if (i >= p.n) {
        return;
    }
    uint r = i, src = 0u, stride = 1u;
    for (int d = int(p.ndim) - 1; d >= 0; --d) {
        uint s = p.size[d];
        uint c = r % s;
        r /= s;
        if ((p.flip & (1u << uint(d))) != 0u) {
            c = s - 1u - c;
        }
        src += c * stride;
        stride *= s;
    }
    if (X_DT == DT_FLOAT32 || X_DT == DT_FLOAT16 || X_DT == DT_BFLOAT16) {
        store_O(i, load_X(src));
    } else {
        store_O(i, loadi_X(src));
    }
}
