#version 450
// Embedding gather: out[i, :] = weight[idx[i], :] for the rows of `weight` bound here.
// Bindings: 0 = weight rows [row0, row0 + nrows) (a slice of the [V, D] table),
//           1 = indices (any integer type, any shape, flattened), 2 = out [n_idx, D].
// Each of any dtype (ANY_IN / ANY_OUT in dtype.glslh; specialization constants W_DT, I_DT, Y_DT = 0-2).
// Defines: SAME_TYPE: weight and out share a dtype (a bit copy of its element size);
// INT_PATH: both integers (converted through int), else converted through float.
// A table larger than one binding is split into row blocks, one dispatch each;
// every dispatch writes only the outputs whose index falls in its block, and the
// first one writes zeros for indices outside [0, V) (torch raises; the file may not).
// One invocation per output element.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, W, w, 0)
ANY_IN(1, I, idx, 1)
ANY_OUT(2, Y, y, 2)

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
    int index = loadi_I(i);
    if (index < 0 || index >= p.vocab) {
        if (p.row0 == 0) {
            store_Y(gid, 0);
        }
        return;
    }
    int row = index - p.row0;
    if (row < 0 || row >= p.nrows) {
        return;
    }
    uint src = uint(row) * p.d + k;
#if defined(SAME_TYPE)
#ifndef WORDS  // without narrow storage, an output (so this shared dtype) has 32-bit elements
    if (W_DT == DT_FLOAT16 || W_DT == DT_BFLOAT16) {
        y_u16[gid] = w_u16[src];
        return;
    }
    if (W_DT == DT_INT8 || W_DT == DT_UINT8 || W_DT == DT_BOOL) {
        y_u8[gid] = w_u8[src];
        return;
    }
#endif
    y_i32[gid] = w_i32[src];
#elif defined(INT_PATH)
    store_Y(gid, loadi_W(src));
#else
    store_Y(gid, load_W(src));
#endif
}
