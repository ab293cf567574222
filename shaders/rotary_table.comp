#version 450
// A rotary embedding's cos and sin tables from the positions, as transformers' rotary modules make
// them (vkx.loader.build.fuse_rotary): for row r < p.rows and i < H = p.half, with
// angle = float(pos[r]) * inv[i] in fp32,
//   cos[r][i] = cos[r][i + H] = cos(angle) * p.cos_scale
//   sin[r][i] = sin[r][i + H] = sin(angle) * p.sin_scale
// each rounded once, to the outputs' dtype: the unfused ops' values (shaders/trig.glslh's sin and
// cos, as shaders/unary.comp's).
// Bindings: 0 = pos, 1 = inv, 2 = cos, 3 = sin. Defines: elem_defines for P, F (read), C and S
// (one dtype). One invocation per (r, i). Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

#define T float
#define GE(a, b) ((a) >= (b))
#define EQ(a, b) ((a) == (b))
#include "trig.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufP { P_T pos[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufF { F_T inv[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufC { C_T cos_out[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufS { S_T sin_out[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint half_;
    float cos_scale;
    float sin_scale;
} p;

void main() {
    const uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
                     + gl_LocalInvocationID.x;
    if (gid >= p.rows * p.half_) {
        return;
    }
    const uint r = gid / p.half_;
    const uint i = gid - r * p.half_;
    precise const float angle = LOAD_P(r) * LOAD_F(i);  // one product, as the unfused multiply
    const float c = cos_(angle) * p.cos_scale;
    const float s = sin_(angle) * p.sin_scale;
    const uint at = r * 2u * p.half_ + i;
    STORE_C(at, c);
    STORE_C(at + p.half_, c);
    STORE_S(at, s);
    STORE_S(at + p.half_, s);
}
