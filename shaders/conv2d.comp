#version 450
// Direct 2-D convolution (cross-correlation, like torch), NCHW contiguous:
//   out[n, oc, oy, ox] = bias[oc] + sum_{ic in group(oc), ky, kx}
//       w[oc, ic - g*cin_g, ky, kx] * x[n, ic, oy*sy - py + ky*dy, ox*sx - px + kx*dx]
// (zero outside the input). Weight layout [Cout, cin_g, KH, KW].
// Bindings: 0 = x, 1 = w, 2 = out, 3 = bias (only with HAS_BIAS).
// Each invocation computes OCB output channels (of one group) x 4 output columns:
// gid.x = column tile, gid.y = oy, gid.z = (n * groups + g) * oc_tiles + oc_tile.
// Defines: elem_defines for X, W, O (any float type; fp32 accumulation), HAS_BIAS, CLAMP (clamp to
// [out_min, out_max], NaN stays NaN), WORDS and DT_* (dtype.glslh: the bias is an ANY_IN buffer).
// Specialization constants: 0..2 the workgroup size, 3 OCB (1..4), 4 the bias's dtype (HAS_BIAS).
layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;
layout(constant_id = 3) const int OCB = 4;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) readonly buffer BufX { X_T x[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufW { W_T w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufO { O_T o[]; };
#ifdef HAS_BIAS
ANY_IN(3, BIAS, bias_in, 4)
#endif

layout(push_constant) uniform Push {
    int N, Cin, H, W;
    int Cout, OH, OW;
    int KH, KW, sy, sx, py, px, dy, dx;
    int groups, cin_g, cout_g, oc_tiles, nz;
    int xoff, woff, ooff, boff;
    float out_min, out_max;  // read only with CLAMP (et_vk.conv_with_clamp)
} p;

void main() {
    const int ox0 = int(gl_GlobalInvocationID.x) * 4;
    const int oy = int(gl_GlobalInvocationID.y);
    const int z = int(gl_GlobalInvocationID.z);
    if (ox0 >= p.OW || oy >= p.OH || z >= p.nz) {
        return;
    }
    const int t = z % p.oc_tiles;
    const int ng = z / p.oc_tiles;
    const int g = ng % p.groups;
    const int n = ng / p.groups;
    const int ocg0 = t * OCB;                 // first output channel within the group
    const int oc0 = g * p.cout_g + ocg0;
    const int ksize = p.KH * p.KW;

    int wrow[OCB];  // offset of w[oc_j, 0, 0, 0] (clamped inside the group)
    for (int j = 0; j < OCB; ++j) {
        wrow[j] = p.woff + (g * p.cout_g + min(ocg0 + j, p.cout_g - 1)) * p.cin_g * ksize;
    }
    int ix0[4];
    for (int q = 0; q < 4; ++q) {
        ix0[q] = (ox0 + q) * p.sx - p.px;
    }
    const int iy0 = oy * p.sy - p.py;

    float acc[OCB][4];
    for (int j = 0; j < OCB; ++j) {
        for (int q = 0; q < 4; ++q) {
            acc[j][q] = 0.0;
        }
    }

    const int HW = p.H * p.W;
    int xplane = p.xoff + (n * p.Cin + g * p.cin_g) * HW;
    for (int ic = 0; ic < p.cin_g; ++ic, xplane += HW) {
        const int wic = ic * ksize;
        for (int ky = 0; ky < p.KH; ++ky) {
            const int iy = iy0 + ky * p.dy;
            if (iy < 0 || iy >= p.H) {
                continue;
            }
            const int xrow = xplane + iy * p.W;
            const int wk = wic + ky * p.KW;
            for (int kx = 0; kx < p.KW; ++kx) {
                vec4 xv;
                for (int q = 0; q < 4; ++q) {
                    const int ix = ix0[q] + kx * p.dx;
                    const bool inside = ix >= 0 && ix < p.W;
                    const float v = LOAD_X(xrow + clamp(ix, 0, p.W - 1));
                    xv[q] = inside ? v : 0.0;
                }
                for (int j = 0; j < OCB; ++j) {
                    const float wv = LOAD_W(wrow[j] + wk + kx);
                    for (int q = 0; q < 4; ++q) {
                        acc[j][q] += wv * xv[q];
                    }
                }
            }
        }
    }

    const int OHW = p.OH * p.OW;
    for (int j = 0; j < OCB; ++j) {
        if (ocg0 + j < p.cout_g) {
            const int oc = oc0 + j;
#ifdef HAS_BIAS
            const float bv = load_BIAS(uint(p.boff + oc));
#else
            const float bv = 0.0;
#endif
            const int obase = p.ooff + (n * p.Cout + oc) * OHW + oy * p.OW;
            for (int q = 0; q < 4; ++q) {
                if (ox0 + q < p.OW) {
                    float v = acc[j][q] + bv;
#ifdef CLAMP
                    v = isnan(v) ? v : clamp(v, p.out_min, p.out_max);
#endif
                    STORE_O(obase + ox0 + q, v);
                }
            }
        }
    }
}
