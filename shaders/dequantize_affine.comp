#version 450
// torchao's dequantize_affine of a 2-D integer tensor: out[r, c] = (q[r, c] - zp[b]) * s[b], b the
// block (r / block_r, c / block_c) in row-major order over the block grid. The subtraction and
// the product are fp32, as torchao computes them. One invocation per element.
// Bindings: 0 = q, 1 = scale, 2 = out, 3 = zero_point (HAS_ZP), each of any dtype (ANY_IN / ANY_OUT,
// specialization constants 0..3 in binding order; WORDS and DT_* defines).
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, Q, q, 0)
ANY_IN(1, S, s, 1)
ANY_OUT(2, O, o, 2)
#ifdef HAS_ZP
ANY_IN(3, Z, zp, 3)
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
    float v = float(loadi_Q(gid));
#ifdef HAS_ZP
    v -= load_Z(b);
#endif
    store_O(gid, v * load_S(b));
}
