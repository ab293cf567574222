#version 450
// Embedding gather: out[i, :] = weight[idx[i], :] for the rows of `weight` bound here.
// Bindings: 0 = weight rows [row0, row0 + nrows) (a slice of the [V, D] table),
//           1 = indices (any integer type, any shape, flattened), 2 = out [n_idx, D].
// Defines: elem_defines for W, I and Y; SAME_TYPE: weight and out share a dtype (bit copy);
// INT_PATH: both integers (converted through int), else converted through float.
// A table larger than one binding is split into row blocks, one dispatch each;
// every dispatch writes only the outputs whose index falls in its block, and the
// first one writes zeros for indices outside [0, V) (torch raises; the file may not).
// One invocation per output element.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufW { W_T w[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufIdx { I_T idx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufOut { Y_T y[]; };

layout(push_constant) uniform Push {
    uint n;      // n_idx * D
    uint d;      // embedding dim
    int row0;    // first table row bound
    int nrows;   // rows bound
    int vocab;   // rows of the whole table
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    uint i = gid / p.d;
    uint k = gid - i * p.d;
    int index = LOADI_I(i);
    if (index < 0 || index >= p.vocab) {
        if (p.row0 == 0) {
            STORE_Y(gid, 0);
        }
        return;
    }
    int row = index - p.row0;
    if (row < 0 || row >= p.nrows) {
        return;
    }
    uint src = uint(row) * p.d + k;
#if defined(SAME_TYPE)
    y[gid] = w[src];
#elif defined(INT_PATH)
    STORE_Y(gid, LOADI_W(src));
#else
    STORE_Y(gid, LOAD_W(src));
#endif
}
