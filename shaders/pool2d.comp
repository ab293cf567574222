#version 450
// 2-D max / average pooling over the last two dims of a contiguous [..., H, W] tensor
// (planes = product of the leading dims). One invocation per output element; the
// linear index folds the y group count into x (idx = gid.y * (numGroups.x * 64) + gid.x).
// Bindings: 0 = x, 1 = out, each of any float dtype (ANY_IN / ANY_OUT, specialization constants 0
// and 1; sums in fp32), 2 = indices (int32, with INDICES).
// Defines: WORDS and DT_* (dtype.glslh), MAX_POOL (else
// average pooling; max pooling propagates NaN like torch), INDICES (max pooling also writes
// the flat index iy * W + ix of each maximum in its plane, as torch's max_pool2d_with_indices:
// the first maximum of the window, or its first NaN).
// Average pooling divisor, like torch: divisor_override if nonzero, else the window
// clipped to the padded input (count_include_pad) or to the input itself.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x_in, 0)
ANY_OUT(1, O, o_out, 1)
#ifdef INDICES
layout(std430, set = 0, binding = 2) writeonly buffer BufI { int indices[]; };
#endif

layout(push_constant) uniform Push {
    int total;          // planes * OH * OW
    int H, W, OH, OW;
    int KH, KW, sy, sx, py, px, dy, dx;
    int count_include_pad, divisor_override;
} p;

void main() {
    const int idx = int(gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u + gl_GlobalInvocationID.x);
    if (idx >= p.total) {
        return;
    }
    const int ox = idx % p.OW;
    const int oy = (idx / p.OW) % p.OH;
    const int plane = idx / (p.OW * p.OH);
    const int base = plane * p.H * p.W;
    const int ys = oy * p.sy - p.py;
    const int xs = ox * p.sx - p.px;
#ifdef MAX_POOL
    float best = uintBitsToFloat(0xff800000u);  // -inf
    int at = -1;
    for (int ky = 0; ky < p.KH; ++ky) {
        const int iy = ys + ky * p.dy;
        if (iy < 0 || iy >= p.H) {
            continue;
        }
        for (int kx = 0; kx < p.KW; ++kx) {
            const int ix = xs + kx * p.dx;
            if (ix < 0 || ix >= p.W) {
                continue;
            }
            const float v = load_X(uint(base + iy * p.W + ix));
            if (v > best || isnan(v) || at < 0) {
                best = v;
                at = iy * p.W + ix;
            }
            if (isnan(best)) {
                break;
            }
        }
    }
    store_O(uint(idx), best);
#ifdef INDICES
    indices[idx] = at;
#endif
#else
    const int ye_pad = min(ys + p.KH, p.H + p.py);
    const int xe_pad = min(xs + p.KW, p.W + p.px);
    const int pool_size = (ye_pad - ys) * (xe_pad - xs);
    const int y0 = max(ys, 0);
    const int x0 = max(xs, 0);
    const int y1 = min(ye_pad, p.H);
    const int x1 = min(xe_pad, p.W);
    if (y0 >= y1 || x0 >= x1) {
        store_O(uint(idx), 0.0);
        return;
    }
    float sum = 0.0;
    for (int iy = y0; iy < y1; ++iy) {
        for (int ix = x0; ix < x1; ++ix) {
            sum += load_X(uint(base + iy * p.W + ix));
        }
    }
    int divisor;
    if (p.divisor_override != 0) {
        divisor = p.divisor_override;
    } else if (p.count_include_pad != 0) {
        divisor = pool_size;
    } else {
        divisor = (y1 - y0) * (x1 - x0);
    }
    store_O(uint(idx), sum / float(divisor));
#endif
}
