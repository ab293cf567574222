#version 450
// Element type conversion: dst[i] = DST_T(src[i]) for int32 <-> float32
// (float -> int truncates toward zero, like torch's .to(torch.int32)).
// Bindings: 0 = src, 1 = dst. Defines SRC_T, DST_T (float or int).
layout(local_size_x = 64) in;

#ifndef SRC_T
#define SRC_T float
#endif
#ifndef DST_T
#define DST_T int
#endif

layout(std430, set = 0, binding = 0) readonly buffer BufSrc { SRC_T src[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufDst { DST_T dst[]; };

layout(push_constant) uniform Push {
    uint n;
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    dst[gid] = DST_T(src[gid]);
}
