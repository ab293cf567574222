#version 450
// 2-D resampling of [planes, H, W] to [planes, Ho, Wo]: one invocation per output element.
// Bindings: 0 = in, 1 = out (contiguous). Defines (op kind and flag): BILINEAR (else nearest),
// ALIGN_CORNERS (bilinear: source = dst * step, else (dst + 0.5) * step - 0.5 clamped at 0);
// WORDS and DT_* (dtype.glslh): in and out are of any float dtype (ANY_IN / ANY_OUT,
// specialization constants 0 and 1). The steps (source pixels per output pixel) are push constants.
// Math in fp32, as torch's CPU kernels. Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x_in, 0)
ANY_OUT(1, Y, y_out, 1)

layout(push_constant) uniform Push {
    uint n;       // output elements
    uint h_in;
    uint w_in;
    uint h_out;
    uint w_out;
    float step_h;
    float step_w;
} p;

#ifdef BILINEAR
// The two source rows (or columns) around output coordinate `o` and the weight of the second.
void around(uint o, float step, uint size, out uint i0, out uint i1, out float t) {
#ifdef ALIGN_CORNERS
    float s = float(o) * step;
#else
    float s = max((float(o) + 0.5) * step - 0.5, 0.0);
#endif
    i0 = min(uint(s), size - 1u);
    i1 = min(i0 + 1u, size - 1u);
    t = s - float(i0);
}
#endif

void main() {
    const uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
                     + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    const uint ox = gid % p.w_out;
    const uint oy = (gid / p.w_out) % p.h_out;
    const uint base = (gid / (p.w_out * p.h_out)) * p.h_in * p.w_in;
#ifdef BILINEAR
    uint y0, y1, x0, x1;
    float ty, tx;
    around(oy, p.step_h, p.h_in, y0, y1, ty);
    around(ox, p.step_w, p.w_in, x0, x1, tx);
    float top = (1.0 - tx) * load_X(base + y0 * p.w_in + x0) + tx * load_X(base + y0 * p.w_in + x1);
    float bottom = (1.0 - tx) * load_X(base + y1 * p.w_in + x0) + tx * load_X(base + y1 * p.w_in + x1);
    store_Y(gid, (1.0 - ty) * top + ty * bottom);
#else
    uint sy = min(uint(floor(float(oy) * p.step_h)), p.h_in - 1u);
    uint sx = min(uint(floor(float(ox) * p.step_w)), p.w_in - 1u);
    store_Y(gid, load_X(base + sy * p.w_in + sx));
#endif
}
