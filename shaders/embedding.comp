#version 450
// Embedding gather: out[i, :] = weight[idx[i], :] for the rows of `weight` bound here.
// Bindings: 0 = weight rows [row0, row0 + nrows) (a slice of the [V, D] table),
//           1 = indices (int32, any shape, flattened), 2 = out [n_idx, D].
// A table larger than one binding is split into row blocks, one dispatch each;
// every dispatch writes only the outputs whose index falls in its block.
// One invocation per output element.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer BufW { float w[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufIdx { int idx[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufOut { float y[]; };

layout(push_constant) uniform Push {
    uint n;      // n_idx * D
    uint d;      // embedding dim
    int row0;    // first table row bound
    int nrows;   // rows bound
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    uint i = gid / p.d;
    uint k = gid - i * p.d;
    int row = idx[i] - p.row0;
    if (row < 0 || row >= p.nrows) {
        return;
    }
    y[gid] = w[uint(row) * p.d + k];
}
