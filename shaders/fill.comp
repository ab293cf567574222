#version 450
// out[i] = one value, converted to out's type. Bindings: 0 = out.
// Defines: elem_defines for O; FILL_INT: `value` is an int32 (else the bits of a float32).
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) writeonly buffer BufO { O_T o[]; };

layout(push_constant) uniform Push {
    uint n;
    uint value;
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
#ifdef FILL_INT
    STORE_O(gid, int(p.value));
#else
    STORE_O(gid, uintBitsToFloat(p.value));
#endif
}
