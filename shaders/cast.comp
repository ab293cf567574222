#version 450
// Element type conversion: dst[i] = src[i] converted to dst's type, as torch's
// .to() converts: through int when both are integers, else through float
// (float -> int truncates toward zero). Bindings: 0 = src, 1 = dst.
// Defines: elem_defines for S and D; INT_PATH when both are integer types.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufSrc { S_T src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufDst { D_T dst[]; };

layout(push_constant) uniform Push {
    uint n;
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
#ifdef INT_PATH
    STORE_D(gid, LOADI_S(gid));
#else
    STORE_D(gid, LOAD_S(gid));
#endif
}
