#version 450
// out[i] = start + i * step: arange, and full / scalar_tensor (step 0).
// Bindings: 0 = out. Defines: elem_defines for O; INT_PATH: an integer output (int32 math,
// exact), else fp32 math.
// One invocation per element. Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) writeonly buffer BufO { O_T o[]; };

layout(push_constant) uniform Push {
    uint n;
    float fstart;
    float fstep;
    int istart;
    int istep;
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
#ifdef INT_PATH
    STORE_O(gid, p.istart + int(gid) * p.istep);
#else
    STORE_O(gid, p.fstart + float(gid) * p.fstep);
#endif
}
