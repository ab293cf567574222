#version 450
// Attention of a few query rows (decode) reading the key/value cache in place, split along the
// sequence (flash-decoding):
//   out[r] = softmax_s(scale * q[r] . k[s] + mask) @ v
// Workgroup (j, r), 64 invocations, takes query row r = (b, hq, l) of q [B, Hq, L, E] and the
// positions [j * chunk, (j + 1) * chunk) of its keys and values, head hk = hq / rep of
// k [B, Hkv, S, E] and v [B, Hkv, S, Ev] (rep = Hq / Hkv: grouped heads read their group's cache,
// no copies); the chunk's scores live in shared memory (chunk <= MAX_CHUNK). With one split
// (P == 1) it writes out[r]. With several it writes its partial, part[(r * P + j) * (Ev + 2) + ...]
// = (max score m, sum of exp(score - m), sum of exp(score - m) * v[s] over Ev), fp32, and counts
// itself in arrivals[r]; the row's last workgroup to arrive merges the P partials into out[r]
// (with M = max m_i: out[r][e] = sum_i exp(m_i - M) * a_i[e] / sum_i exp(m_i - M) * l_i) and sets
// arrivals[r] back to 0, so the counters stay zero between dispatches (zeroed once, at load).
// A masked position's key and value are not read (a cache longer than the context costs its
// mask, not its bytes).
// Mask value of (b, hq, l, s): mask[moff + b*smb + hq*smh + l*sml + s*sms] (MASK_FLOAT: added;
// MASK_BOOL: 0 = -inf); CAUSAL: -inf where s > l. A row whose every score is -inf is all zeros,
// a NaN score makes it NaN (as shaders/attention_softmax.comp and torch's reference SDPA).
// Bindings: 0 = q, 1 = k, 2 = v, 3 = out, 4 = mask (a placeholder without a mask), 5 = part and
// 6 = arrivals (placeholders with one split); QKVO_ONLY: 0-3 alone, no mask and one split (a
// device of fewer storage buffers a stage).
// Defines: elem_defines for Q, K, V, O, M (not with QKVO_ONLY); LOAD8_K(i, lo, hi), K_V,
// LOAD8_V(i, lo, hi) and V_V (gemm.py's 16-byte loads of 8 elements; E and Ev are multiples of 8);
// MASK_FLOAT / MASK_BOOL; CAUSAL; QKVO_ONLY.
// The weighted sum of values gives each position Ev / 8 lanes (one 16-byte load each) and the
// workgroup's 64 / (Ev / 8) such groups take every that-many-th position, so many loads are in
// flight at once; the groups' sums meet in shared memory.
layout(local_size_x = 64) in;
#include "dtype.glslh"
#include "pairs.glslh"

#define WG 64
#define MAX_CHUNK 1024
#define MAX_E 256
#define UNROLL 4

layout(std430, set = 0, binding = 0) readonly buffer BufQ { Q_T q[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufK { K_V k[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufV { V_V v[]; };
layout(std430, set = 0, binding = 3) writeonly buffer BufO { O_T o[]; };
#ifndef QKVO_ONLY
layout(std430, set = 0, binding = 4) readonly buffer BufM { M_T mask[]; };
// coherent: partials and counts cross workgroups within the dispatch
layout(std430, set = 0, binding = 5) coherent buffer BufP { float part[]; };
layout(std430, set = 0, binding = 6) coherent buffer BufA { uint arrivals[]; };
#endif

layout(push_constant) uniform Push {
    int L, S, E, Ev, Hq, rep, Hkv;
    int moff, smb, smh, sml, sms;
    float scale;
    int chunk, P;
} p;

#define NEG_INF uintBitsToFloat(0xff800000u)

shared vec4 qs[MAX_E / 4];  // q * scale
shared float sc[MAX_CHUNK];
shared float red[WG];
shared vec4 vsum[WG * 2];  // each lane's two vec4s of its group's weighted sum
shared bool last;

float combine_max(float a, float b) {
    return (b > a || isnan(b)) && !isnan(a) ? b : a;
}

// scale * q . k[s] plus the mask's addend, -inf where masked (its key then not read)
float position_score(int s, int l, int kbase, int mbase) {
    bool masked = false;
    float add = 0.0;
#if defined(MASK_FLOAT)
    add = LOAD_M(mbase + s * p.sms);
    masked = add == NEG_INF;
#elif defined(MASK_BOOL)
    masked = LOADI_M(mbase + s * p.sms) == 0;
#endif
#ifdef CAUSAL
    masked = masked || s > l;
#endif
    if (masked) {
        return NEG_INF;
    }
    float score = add;
    for (int e = 0; e < p.E; e += 8) {
        vec4 lo, hi;
        LOAD8_K(kbase + s * p.E + e, lo, hi);
        score += dot(lo, qs[e >> 2]) + dot(hi, qs[(e >> 2) + 1]);
    }
    return score;
}

// out[r] of a row whose scores are all -inf (zeros) or hold a NaN (NaNs)
void fill_row(int r, int lane, bool nan_) {
    const float fill = nan_ ? uintBitsToFloat(0x7FC00000u) : 0.0;
    for (int e = lane; e < p.Ev; e += WG) {
        STORE_O(r * p.Ev + e, fill);
    }
}

#ifndef QKVO_ONLY
// After every lane wrote its share of this workgroup's partial of row r: the row's last workgroup
// to arrive merges the row's P partials into out[r] and zeroes its count.
void merge_if_last(int r, int lane) {
    memoryBarrierBuffer();  // this lane's partial visible device-wide before the count says so
    barrier();
    if (lane == 0) {
        last = atomicAdd(arrivals[r], 1u) == uint(p.P - 1);
    }
    barrier();
    if (!last) {
        return;
    }
    memoryBarrierBuffer();
    const int stride = p.Ev + 2;
    const int base = r * p.P * stride;
    float top = NEG_INF;
    bool nan_ = false;
    for (int i = 0; i < p.P; ++i) {
        const float m = part[base + i * stride];
        nan_ = nan_ || isnan(m);
        top = isnan(m) ? top : max(top, m);
    }
    if (nan_ || top == NEG_INF) {
        fill_row(r, lane, nan_);
    } else {
        float den = 0.0;
        for (int i = 0; i < p.P; ++i) {
            den += exp(part[base + i * stride] - top) * part[base + i * stride + 1];
        }
        for (int e = lane; e < p.Ev; e += WG) {
            float num = 0.0;
            for (int i = 0; i < p.P; ++i) {
                num += exp(part[base + i * stride] - top) * part[base + i * stride + 2 + e];
            }
            STORE_O(r * p.Ev + e, num / den);
        }
    }
    if (lane == 0) {
        arrivals[r] = 0u;
    }
}
#endif

void main() {
    const int lane = int(gl_LocalInvocationID.x);
    const int j = int(gl_WorkGroupID.x);
    const int r = int(gl_WorkGroupID.y);
    const int bh = r / p.L;
    const int l = r - bh * p.L;
    const int b = bh / p.Hq;
    const int hq = bh - b * p.Hq;
    const int kv = b * p.Hkv + hq / p.rep;
    const int kbase = kv * p.S * p.E;
    const int vbase = kv * p.S * p.Ev;
    const int mbase = p.moff + b * p.smb + hq * p.smh + l * p.sml;
    const int s0 = j * p.chunk;
    const int n = min(p.S - s0, p.chunk);

    for (int e = lane; e < p.E; e += WG) {
        qs[e >> 2][e & 3] = LOAD_Q(r * p.E + e) * p.scale;
    }
    barrier();

    float mx = NEG_INF;
    for (int i = lane; i < n; i += WG) {
        const float score = position_score(s0 + i, l, kbase, mbase);
        sc[i] = score;
        mx = combine_max(mx, score);
    }
    red[lane] = mx;
    barrier();
    for (int half_ = WG / 2; half_ > 0; half_ >>= 1) {
        if (lane < half_) {
            red[lane] = combine_max(red[lane], red[lane + half_]);
        }
        barrier();
    }
    mx = red[0];
    barrier();
    const int pbase = (r * p.P + j) * (p.Ev + 2);
    if (isnan(mx) || mx == NEG_INF) {  // NaN: the row is NaN; all masked: nothing to add
        if (p.P == 1) {
            fill_row(r, lane, isnan(mx));
            return;
        }
#ifndef QKVO_ONLY
        for (int e = lane; e < p.Ev + 2; e += WG) {
            part[pbase + e] = e == 0 ? mx : 0.0;
        }
        merge_if_last(r, lane);
        return;
#endif
    }
    float sum = 0.0;
    for (int i = lane; i < n; i += WG) {
        const float w = exp(sc[i] - mx);
        sc[i] = w;
        sum += w;
    }
    red[lane] = sum;
    barrier();
    for (int half_ = WG / 2; half_ > 0; half_ >>= 1) {
        if (lane < half_) {
            red[lane] += red[lane + half_];
        }
        barrier();
    }
    sum = red[0];
    const int lanes = p.Ev >> 3;  // per position: 8 elements of v a lane
    const int groups = WG / lanes;
    const int group = lane / lanes;
    const int e8 = (lane - group * lanes) * 8;
    vec4 acc0 = vec4(0.0), acc1 = vec4(0.0);
    if (group < groups) {
        // UNROLL positions' loads issued before their sums (H200: 13.0 -> 12.6 us a layer)
        for (int i0 = group; i0 < n; i0 += UNROLL * groups) {
            float w[UNROLL];
            vec4 lo[UNROLL], hi[UNROLL];
            for (int u = 0; u < UNROLL; ++u) {
                const int i = i0 + u * groups;
                w[u] = i < n ? sc[i] : 0.0;
                lo[u] = hi[u] = vec4(0.0);
                if (w[u] != 0.0) {  // masked positions' values are not read
                    LOAD8_V(vbase + (s0 + i) * p.Ev + e8, lo[u], hi[u]);
                }
            }
            for (int u = 0; u < UNROLL; ++u) {
                acc0 += w[u] * lo[u];
                acc1 += w[u] * hi[u];
            }
        }
    }
    vsum[2 * lane] = acc0;
    vsum[2 * lane + 1] = acc1;
    barrier();
    for (int e = lane; e < p.Ev; e += WG) {
        const int slot = (e >> 3) * 2 + ((e >> 2) & 1);  // lane e / 8 of group 0, its lo or hi vec4
        float acc = 0.0;
        for (int g = 0; g < groups; ++g) {
            acc += vsum[slot + g * lanes * 2][e & 3];
        }
#ifdef QKVO_ONLY
        STORE_O(r * p.Ev + e, acc / sum);
    }
#else
        if (p.P == 1) {
            STORE_O(r * p.Ev + e, acc / sum);
        } else {
            part[pbase + 2 + e] = acc;
        }
    }
    if (p.P > 1) {
        if (lane == 0) {
            part[pbase] = mx;
            part[pbase + 1] = sum;
        }
        merge_if_last(r, lane);
    }
#endif
}
