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
// Each row by a workgroup (ROW_GROUP) or an invocation (shaders/rows.glslh); specialization
// constant 0 = ROW_WG.
#include "dtype.glslh"
#include "rows.glslh"

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
    const int idx = int(row_index());
    if (idx >= p.nrows) {
        return;
    }
    const int lane = int(row_lane());
    const int lanes = int(ROW_LANES);
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
    for (int s = lane; s < p.S; s += lanes) {
        const float v = score(sbase, mbase, l, s);
        mx = (v > mx || isnan(v)) && !isnan(mx) ? v : mx;
    }
    mx = row_max(mx);
    if (isnan(mx) || mx == NEG_INF) {
        const float fill = isnan(mx) ? uintBitsToFloat(0x7FC00000u) : 0.0;
        for (int s = lane; s < p.S; s += lanes) {
            sc[sbase + s] = fill;
        }
        return;
    }
    // Each invocation rereads only the elements it wrote.
    float sum = 0.0;
    for (int s = lane; s < p.S; s += lanes) {
        const float e = exp(score(sbase, mbase, l, s) - mx);
        sc[sbase + s] = e;
        sum += e;
    }
    const float inv = 1.0 / row_sum(sum);
    for (int s = lane; s < p.S; s += lanes) {
        sc[sbase + s] *= inv;
    }
}
