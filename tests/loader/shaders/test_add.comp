#version 450
// Throwaway same-shape add for loader tests: out[i] = a[i] + b[i]. Bindings 0 = a, 1 = b, 2 = out.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) o[i] = a[i] + b[i];
}
