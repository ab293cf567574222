#version 450
// Transposed 2-D convolution (torch's conv_transpose2d), NCHW contiguous, one invocation per output
// element, gathering what scatters onto it:
//   out[n, oc, oy, ox] = bias[oc] + sum_{ic in group g, ky, kx} x[n, ic, iy, ix] * w[ic, oc - g*cout_g, ky, kx]
//   where oy + py - ky*dy = iy*sy and ox + px - kx*dx = ix*sx (0 <= iy < H, 0 <= ix < W), g = oc / cout_g.
// Weight layout [Cin, cout_g, KH, KW]. Bindings: 0 = x, 1 = w, 2 = out, 3 = bias (bound to x when
// absent: read only with HAS_BIAS), each of any float dtype (ANY_IN / ANY_OUT, specialization constants
// 0..3); fp32 sums, one rounding on the store. Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, X, x_in, 0)
ANY_IN(1, W, w_in, 1)
ANY_OUT(2, O, o_out, 2)
ANY_IN(3, B, b_in, 3)

layout(push_constant) uniform Push {
    uint total;
    int Cin, H, W, Cout, OH, OW;
    int KH, KW, sy, sx, py, px, dy, dx;
    int cin_g, cout_g;
} p;

void main() {
    uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
             + gl_LocalInvocationID.x;
    if (i >= p.total) {
        return;
    }
    int ox = int(i % uint(p.OW));
    int oy = int((i / uint(p.OW)) % uint(p.OH));
    int oc = int((i / uint(p.OW * p.OH)) % uint(p.Cout));
    int n = int(i / uint(p.OW * p.OH * p.Cout));
    int g = oc / p.cout_g;
    int ocg = oc - g * p.cout_g;
    float acc = 0.0;
#ifdef HAS_BIAS
    acc = load_B(uint(oc));
#endif
    for (int ky = 0; ky < p.KH; ++ky) {
        int ty = oy + p.py - ky * p.dy;
        if (ty < 0 || ty % p.sy != 0 || ty / p.sy >= p.H) {
            continue;
        }
        int iy = ty / p.sy;
        for (int kx = 0; kx < p.KW; ++kx) {
            int tx = ox + p.px - kx * p.dx;
            if (tx < 0 || tx % p.sx != 0 || tx / p.sx >= p.W) {
                continue;
            }
            int ix = tx / p.sx;
            for (int c = 0; c < p.cin_g; ++c) {
                int ic = g * p.cin_g + c;
                float xv = load_X(uint(((n * p.Cin + ic) * p.H + iy) * p.W + ix));
                float wv = load_W(uint(((ic * p.cout_g + ocg) * p.KH + ky) * p.KW + kx));
                acc += xv * wv;
            }
        }
    }
    store_O(i, acc);
}
