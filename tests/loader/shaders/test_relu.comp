#version 450
// Throwaway relu for loader tests: out[i] = max(a[i], 0) + bias. Bindings 0 = a, 1 = out.
// Workgroups fold into y when there are more than 65535.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; float bias; } p;
void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (i < p.n) o[i] = max(a[i], 0.0) + p.bias;
}
