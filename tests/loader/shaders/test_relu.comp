#version 450
// Throwaway relu for loader tests: out[i] = max(a[i], 0). Bindings 0 = a, 1 = out.
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) writeonly buffer O { float o[]; };
layout(push_constant) uniform P { uint n; float bias; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) o[i] = max(a[i], 0.0) + p.bias;
}
