#version 450
// Masked, numerically stable softmax over the rows of attention scores, in place:
//   p[r, s] = softmax_s(scores[r, s] + mask) with mask = the float mask (MASK_FLOAT),
//   -inf where the bool mask is 0 (MASK_BOOL), -inf where s > l (CAUSAL, top-left).
// A row whose every score is -inf becomes all zeros (like torch's SDPA).
// Rows are [batch, L] with batch = b1 * nb2 + b2; row r = row0 + invocation index.
// Element s of row r is scores[soff + r*S + s]; its mask value is
// mask[moff + b1*smb1 + b2*smb2 + l*sml + s*sms].
// Bindings: 0 = scores (fp32, read-write), 1 = mask (only with MASK_FLOAT / MASK_BOOL;
// elem_defines for M: a bool mask is one byte per element, a float mask any float type).
// One invocation per row; the y group count folds into x.
layout(local_size_x = 64) in;
#include "dtype.glslh"

layout(std430, set = 0, binding = 0) buffer BufS { float sc[]; };
#if defined(MASK_FLOAT) || defined(MASK_BOOL)
layout(std430, set = 0, binding = 1) readonly buffer BufM { M_T mask[]; };
#endif

layout(push_constant) uniform Push {
    int nrows, row0, L, S, nb2;
    int soff;
    int moff, smb1, smb2, sml, sms;
} p;

#define NEG_INF uintBitsToFloat(0xff800000u)

float score(int sbase, int mbase, int l, int s) {
    float v = sc[sbase + s];
#if defined(MASK_FLOAT)
    v += LOAD_M(mbase + s * p.sms);
#elif defined(MASK_BOOL)
    if (LOADI_M(mbase + s * p.sms) == 0) {
        v = NEG_INF;
    }
#endif
#ifdef CAUSAL
    if (s > l) {
        v = NEG_INF;
    }
#endif
    return v;
}

void main() {
    const int idx = int(gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u + gl_GlobalInvocationID.x);
    if (idx >= p.nrows) {
        return;
    }
    const int r = p.row0 + idx;
    const int bt = r / p.L;
    const int l = r - bt * p.L;
    const int b1 = bt / p.nb2;
    const int b2 = bt - b1 * p.nb2;
    const int sbase = p.soff + r * p.S;
    const int mbase = p.moff + b1 * p.smb1 + b2 * p.smb2 + l * p.sml;

    // A NaN score makes the row NaN (softmax propagates NaN, as torch's reference SDPA does).
    // isnan, not a comparison trick: GLSL's max and NVIDIA's compiler both drop NaN operands.
    float mx = NEG_INF;
    bool has_nan = false;
    for (int s = 0; s < p.S; ++s) {
        const float v = score(sbase, mbase, l, s);
        has_nan = has_nan || isnan(v);
        mx = v > mx ? v : mx;
    }
    if (has_nan || mx == NEG_INF) {
        const float fill = has_nan ? uintBitsToFloat(0x7FC00000u) : 0.0;
        for (int s = 0; s < p.S; ++s) {
            sc[sbase + s] = fill;
        }
        return;
    }
    float sum = 0.0;
    for (int s = 0; s < p.S; ++s) {
        const float e = exp(score(sbase, mbase, l, s) - mx);
        sc[sbase + s] = e;
        sum += e;
    }
    const float inv = 1.0 / sum;
    for (int s = 0; s < p.S; ++s) {
        sc[sbase + s] *= inv;
    }
}
