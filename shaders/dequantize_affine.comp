#version 450
// torchao's dequantize_affine of a 2-D integer tensor: out[r, c] = (q[r, c] - zp[b]) * s[b], b the
// block (r / block_r, c / block_c) in row-major order over the block grid. The subtraction and
// the product are fp32, as torchao computes them. One invocation per element.
// Bindings: 0 = q, 1 = scale, 2 = out, 3 = zero_point (HAS_ZP).
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufQ { Q_T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufS { S_T s[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufO { O_T o[]; };
#ifdef HAS_ZP
layout(std430, set = 0, binding = 3) readonly buffer BufZ { Z_T zp[]; };
#endif

layout(push_constant) uniform Push {
    uint n;        // elements
    uint cols;
    uint block_r;
    uint block_c;
    uint grid_c;   // blocks a row of the grid: cols / block_c
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    uint r = gid / p.cols;
    uint c = gid - r * p.cols;
    uint b = (r / p.block_r) * p.grid_c + c / p.block_c;
    float v = float(LOADI_Q(gid));
#ifdef HAS_ZP
    v -= LOAD_Z(b);
#endif
    STORE_O(gid, v * LOAD_S(b));
}
