#version 450
// Attention of a few query rows (decode) in one dispatch, reading the key/value cache in place:
//   out[r] = softmax_s(scale * q[r] . k[s] + mask) @ v
// One workgroup of 64 invocations per query row r = (b, hq, l) of q [B, Hq, L, E]; its keys and
// values are head hk = hq / rep of k [B, Hkv, S, E] and v [B, Hkv, S, Ev] (rep = Hq / Hkv: grouped
// heads read their group's cache, no copies). The row's S scores live in shared memory (S <= MAX_S).
// Mask value of (b, hq, l, s): mask[moff + b*smb + hq*smh + l*sml + s*sms] (MASK_FLOAT: added;
// MASK_BOOL: 0 = -inf); CAUSAL: -inf where s > l. A row whose every score is -inf is all zeros,
// a NaN score makes it NaN (as shaders/attention_softmax.comp and torch's reference SDPA).
// Bindings: 0 = q, 1 = k, 2 = v, 3 = out, 4 = mask (a placeholder without a mask).
// Defines: elem_defines for Q, K, V, O, M; LOAD8_K(i, lo, hi) and K_V (gemm.py's 8-element loads:
// 16-byte ones when E % 8 == 0); MASK_FLOAT / MASK_BOOL; CAUSAL.
layout(local_size_x = 64) in;
#include "dtype.glslh"
#include "pairs.glslh"

#define WG 64
#define MAX_S 4096
#define MAX_E 256

layout(std430, set = 0, binding = 0) readonly buffer BufQ { Q_T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufK { K_V k[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufV { V_T v[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufO { O_T o[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufM { M_T mask[]; };

layout(push_constant) uniform Push {
    int L, S, E, Ev, Hq, rep, Hkv;
    int moff, smb, smh, sml, sms;
    float scale;
} p;

#define NEG_INF uintBitsToFloat(0xff800000u)

shared float qs[MAX_E];
shared float sc[MAX_S];
shared float part[WG];

float combine_max(float a, float b) {
    return (b > a || isnan(b)) && !isnan(a) ? b : a;
}

void main() {
    const int lane = int(gl_LocalInvocationID.x);
    const int r = int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
    const int bh = r / p.L;
    const int l = r - bh * p.L;
    const int b = bh / p.Hq;
    const int hq = bh - b * p.Hq;
    const int kv = b * p.Hkv + hq / p.rep;
    const int kbase = kv * p.S * p.E;
    const int vbase = kv * p.S * p.Ev;
    const int mbase = p.moff + b * p.smb + hq * p.smh + l * p.sml;

    for (int e = lane; e < p.E; e += WG) {
        qs[e] = LOAD_Q(r * p.E + e) * p.scale;
    }
    barrier();

    float mx = NEG_INF;
    for (int s = lane; s < p.S; s += WG) {
        float dotp = 0.0;
        for (int e = 0; e < p.E; e += 8) {
            vec4 lo, hi;
            LOAD8_K(kbase + s * p.E + e, lo, hi);
            dotp += dot(lo, vec4(qs[e], qs[e + 1], qs[e + 2], qs[e + 3]))
                  + dot(hi, vec4(qs[e + 4], qs[e + 5], qs[e + 6], qs[e + 7]));
        }
#if defined(MASK_FLOAT)
        dotp += LOAD_M(mbase + s * p.sms);
#elif defined(MASK_BOOL)
        if (LOADI_M(mbase + s * p.sms) == 0) {
            dotp = NEG_INF;
        }
#endif
#ifdef CAUSAL
        if (s > l) {
            dotp = NEG_INF;
        }
#endif
        sc[s] = dotp;
        mx = combine_max(mx, dotp);
    }
    part[lane] = mx;
    barrier();
    for (int half_ = WG / 2; half_ > 0; half_ >>= 1) {
        if (lane < half_) {
            part[lane] = combine_max(part[lane], part[lane + half_]);
        }
        barrier();
    }
    mx = part[0];
    barrier();
    if (isnan(mx) || mx == NEG_INF) {
        const float fill = isnan(mx) ? uintBitsToFloat(0x7FC00000u) : 0.0;
        for (int e = lane; e < p.Ev; e += WG) {
            STORE_O(r * p.Ev + e, fill);
        }
        return;
    }
    float sum = 0.0;
    for (int s = lane; s < p.S; s += WG) {
        const float w = exp(sc[s] - mx);
        sc[s] = w;
        sum += w;
    }
    part[lane] = sum;
    barrier();
    for (int half_ = WG / 2; half_ > 0; half_ >>= 1) {
        if (lane < half_) {
            part[lane] += part[lane + half_];
        }
        barrier();
    }
    const float inv = 1.0 / part[0];
    for (int e = lane; e < p.Ev; e += WG) {
        float acc = 0.0;
        for (int s = 0; s < p.S; ++s) {
            acc += sc[s] * LOAD_V(vbase + s * p.Ev + e);
        }
        STORE_O(r * p.Ev + e, acc * inv);
    }
}
