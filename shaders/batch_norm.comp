#version 450
// Inference batch norm on a contiguous [N, C, inner...] tensor:
//   y = (x - mean[c]) * rsqrt(var[c] + eps) [* w[c]] [+ b[c]]
// Bindings: 0 = in, 1 = out, 2 = running_mean, 3 = running_var, 4 = weight, 5 = bias
// (weight/bias are placeholders unless HAS_W / HAS_B).
// Defines: elem_defines for X (the stream read); HAS_W, HAS_B. The output and the per-channel
// tables are of any dtype (ANY_OUT / ANY_IN, specialization constants 0..4 in binding order).
// One invocation per element; a tensor larger than one binding is split into
// element ranges (in/out bound as sub-ranges starting at `first`).
// A device of fewer than six storage buffers a stage first gathers the per-channel factors into
// an fp32 table t[4c..4c+3] = (mean, rsqrt(var + eps), w, b), then applies it with the same fp32
// arithmetic, each pass within three bindings (the specialization constants keep their ids):
//   TABLE_STATS   0 = running_mean, 1 = running_var, 2 = t; an invocation a channel (n = C)
//   TABLE_AFFINE  0 = weight, 1 = bias, 2 = t (those HAS_W / HAS_B name); likewise
//   FROM_TABLE    0 = in, 1 = out, 2 = t; an invocation an element
layout(local_size_x = 64) in;
#include "dtype.glslh"

#ifdef TABLE_STATS
ANY_IN(0, M, rmean, 1)
ANY_IN(1, V, rvar, 2)
#elif defined(TABLE_AFFINE)
ANY_IN(0, W, w_in, 3)
ANY_IN(1, B, b_in, 4)
#else
layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
ANY_OUT(1, Y, y_out, 0)
#endif
#if defined(TABLE_STATS) || defined(TABLE_AFFINE)
layout(std430, set = 0, binding = 2) writeonly buffer Table { float t[]; };
#elif defined(FROM_TABLE)
layout(std430, set = 0, binding = 2) readonly buffer Table { float t[]; };
#else
ANY_IN(2, M, rmean, 1)
ANY_IN(3, V, rvar, 2)
ANY_IN(4, W, w_in, 3)
ANY_IN(5, B, b_in, 4)
#endif

layout(push_constant) uniform Push {
    uint n;      // elements in this dispatch (channels in a table pass)
    uint c;      // channels
    uint inner;  // elements per (n, c) plane
    float eps;
    uint first;  // index of this dispatch's first element in the whole tensor
} p;

// Channel c's factors: read from the table, or from the bound tensors.
#ifdef FROM_TABLE
#define CH_MEAN(c) t[4u * (c)]
#define CH_RSTD(c) t[4u * (c) + 1u]
#define CH_W(c) t[4u * (c) + 2u]
#define CH_B(c) t[4u * (c) + 3u]
#else
#define CH_MEAN(c) load_M(c)
#define CH_RSTD(c) inversesqrt(load_V(c) + p.eps)
#define CH_W(c) load_W(c)
#define CH_B(c) load_B(c)
#endif

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
#ifdef TABLE_STATS
    t[4u * gid] = CH_MEAN(gid);
    t[4u * gid + 1u] = CH_RSTD(gid);
#elif defined(TABLE_AFFINE)
#ifdef HAS_W
    t[4u * gid + 2u] = CH_W(gid);
#endif
#ifdef HAS_B
    t[4u * gid + 3u] = CH_B(gid);
#endif
#else
    uint ch = ((p.first + gid) / p.inner) % p.c;
    float v = (LOAD_X(gid) - CH_MEAN(ch)) * CH_RSTD(ch);
#ifdef HAS_W
    v *= CH_W(ch);
#endif
#ifdef HAS_B
    v += CH_B(ch);
#endif
    store_Y(gid, v);
#endif
}
