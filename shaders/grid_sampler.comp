#version 450
// grid_sampler_2d (torch's grid_sample) of x [N, C, H, W] at grid [N, Ho, Wo, 2] (x, y in [-1, 1]):
// out [N, C, Ho, Wo], one invocation per output element; fp32 math.
//   the source point: align_corners: (g + 1) / 2 * (size - 1), else ((g + 1) * size - 1) / 2;
//   border padding clamps it to [0, size - 1]; zeros padding reads 0 outside the input.
//   bilinear: the four neighbours by their areas; nearest: the neighbour at roundEven.
// Bindings: 0 = x, 1 = grid, 2 = out, of any float dtype (ANY_IN / ANY_OUT, constants 0..2).
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x_in, 0)
ANY_IN(1, G, g_in, 1)
ANY_OUT(2, O, o_out, 2)

layout(push_constant) uniform Push {
    uint total;
    int C, H, W, Ho, Wo;
    uint nearest;  // 0: bilinear, 1: nearest
    uint border;   // 0: zeros, 1: border
    uint align_corners;
} p;

float source(float g, int size) {
    float v = p.align_corners != 0u ? (g + 1.0) * 0.5 * float(size - 1) : ((g + 1.0) * float(size) - 1.0) * 0.5;
    return p.border != 0u ? clamp(v, 0.0, float(size - 1)) : v;
}

float at(uint plane, int y, int x) {
    if (y < 0 || y >= p.H || x < 0 || x >= p.W) {
        return 0.0;
    }
    return load_X(plane + uint(y * p.W + x));
}

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
             + gl_LocalInvocationID.x;
    if (i >= p.total) {
        return;
    }
    uint ox = i % uint(p.Wo);
    uint oy = (i / uint(p.Wo)) % uint(p.Ho);
    uint c = (i / uint(p.Wo * p.Ho)) % uint(p.C);
    uint n = i / uint(p.Wo * p.Ho * p.C);
    uint gi = ((n * uint(p.Ho) + oy) * uint(p.Wo) + ox) * 2u;
    float sx = source(load_G(gi), p.W), sy = source(load_G(gi + 1u), p.H);
    uint plane = (n * uint(p.C) + c) * uint(p.H * p.W);
    float v;
    if (p.nearest != 0u) {
        v = at(plane, int(roundEven(sy)), int(roundEven(sx)));
    } else {
        float x0 = floor(sx), y0 = floor(sy);
        float fx = sx - x0, fy = sy - y0;
        int ix = int(x0), iy = int(y0);
        v = at(plane, iy, ix) * (1.0 - fx) * (1.0 - fy) + at(plane, iy, ix + 1) * fx * (1.0 - fy)
          + at(plane, iy + 1, ix) * (1.0 - fx) * fy + at(plane, iy + 1, ix + 1) * fx * fy;
    }
    store_O(i, v);
}
