#version 450
// One token sampled from a decode step's logits [V] (loader/ops/sample.py): softmax(logits / T),
// restricted to the top_k largest logits (ties with the k-th all kept), then to the shortest run
// of them in (value descending, index ascending) order whose exclusive mass stays under top_p, as
// the host sampler (loader/lm/generate.py, sample) does; the draw is the Gumbel-max of the kept tokens, argmax of
// logit / T + g_i with g_i = -log(-log(u_i)) and u_i a hash of (seed, position, i), so a step's
// token is a function of (seed, position) (sample.py's sample_reference computes the same).
// Two passes:
// SEGMENT: workgroup s owns logits [s * SEG, (s + 1) * SEG) and writes its candidates (key, index)
//   to slot s of `cand` and their count: the elements at or above its own k-th largest (every
//   element of the global top k is one; ties included); with no top-k and no top-p, its one
//   best-scored element (the Gumbel-max over all is the best of the segments' best).
// DRAW: one workgroup over the candidates (held in shared memory when at most CAP): the top-k
//   threshold by radix select on the keys (4 levels of 8 bits, counts), the top-p cut by radix
//   select on the keys weighted by mass (exp((x - max) / T) in 32.32 fixed point, so the sums are
//   exact integers whatever the order), and the cut tie group's first tokens by index, then the
//   Gumbel-max; the token goes to state[0] (what shaders/next_token.comp takes).
// Keys: the fp32 value's bits made monotone as unsigned (-0 as +0); NaN logits are not ordered.
// Bindings: SEGMENT 0 = logits (X), 1 = cand, 2 = state, 3 = position; DRAW 0 = cand, 1 = state, 2 = position
// (int32, the step's cache position). cand: counts [segments], then from PAIRS (segments rounded
// up to even) (key, index) pairs, SEG a segment. state: [token, top_k (0: none), top_p (fp32 bits,
// >= 1: none), 1 / T (fp32 bits), seed].
// Specialization constants: 0 = WG (a power of two, at most 256), 1 = SEG, 2 = CAP (DRAW).
#ifdef SEGMENT
#include "dtype.glslh"
#endif

layout(constant_id = 0) const uint WG = 256u;
layout(constant_id = 1) const uint SEG = 2048u;
layout(constant_id = 2) const uint CAP = 256u;
layout(local_size_x = 256, local_size_x_id = 0) in;

layout(push_constant) uniform Push {
    uint n;         // V
    uint segments;  // ceil(V / SEG)
} p;

#ifdef SEGMENT
layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufCand { uint cand[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufState { uint state[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufPosition { int position[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer BufCand { uint cand[]; };
layout(std430, set = 0, binding = 1) buffer BufState { uint state[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufPosition { int position[]; };
#endif

const uint BINS = 256u;
const uint MAX_SEGMENTS = 1024u;
const uint NONE = 0xFFFFFFFFu;

uint pairs_base() {
    return (p.segments + 1u) & ~1u;
}

uint key_of(float v) {
    const uint u = floatBitsToUint(v == 0.0 ? 0.0 : v);
    return (u & 0x80000000u) != 0u ? ~u : u | 0x80000000u;
}

float value_of(uint key) {
    return uintBitsToFloat((key & 0x80000000u) != 0u ? key & 0x7FFFFFFFu : ~key);
}

uint mix32(uint h) {
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}

// logit / T + Gumbel noise of token `index` at (seed, position); no fused multiply-add, so the
// host computes it bit for bit but for log's last places.
float score(float v, uint index, float inv_t, uint seed, uint pos) {
    const uint h = mix32(mix32(mix32(seed) + pos) + index);
    const float u = (float(h >> 9) + 0.5) * (1.0 / 8388608.0);  // in (0, 1): 24 bits exact
    precise float scaled = v * inv_t;
    precise float s = scaled + -log(-log(u));
    return s;
}

// Histograms: count, and mass in 32.32 fixed point (lo, hi); scans over (count, lo, hi).
shared uint hc[BINS];
#ifdef DRAW
shared uint hl[BINS];
shared uint hh[BINS];
#endif
shared uvec3 sa[BINS];
shared uvec3 sb[BINS];
shared uint sel[4];  // the level's bin, its exclusive (count, lo, hi) below the target

uvec3 add3(uvec3 a, uvec3 b) {
    uint carry;
    const uint lo = uaddCarry(a.y, b.y, carry);
    return uvec3(a.x + b.x, lo, a.z + b.z + carry);
}

uvec3 sub3(uvec3 a, uvec3 b) {
    uint borrow;
    const uint lo = usubBorrow(a.y, b.y, borrow);
    return uvec3(a.x - b.x, lo, a.z - b.z - borrow);
}

// a < b, by count (x) or by mass (z, y)
bool less3(uvec3 a, uvec3 b, bool mass) {
    return mass ? (a.z < b.z || (a.z == b.z && a.y < b.y)) : a.x < b.x;
}

// sa[b] = the inclusive sum of sa over b..BINS-1 (down) or 0..b (up); ends with a barrier.
void scan(bool down) {
    const uint lane = gl_LocalInvocationID.x;
    for (uint d = 1u; d < BINS; d <<= 1) {
        for (uint b = lane; b < BINS; b += WG) {
            const uint other = down ? b + d : b - d;
            sb[b] = (down ? other < BINS : b >= d) ? add3(sa[b], sa[other]) : sa[b];
        }
        barrier();
        for (uint b = lane; b < BINS; b += WG) {
            sa[b] = sb[b];
        }
        barrier();
    }
}

// After a level's histogram (hc, and hl/hh with `mass`): the bin whose run crosses `target`
// (exclusive sum < target <= inclusive, summed from the top bin down or from bin 0 up) into
// sel[0] (NONE when the total stays under it) and its exclusive sum into sel[1..3]. Ends with a
// barrier; the histogram is free again.
void pick(uvec3 target, bool mass, bool down) {
    const uint lane = gl_LocalInvocationID.x;
    for (uint b = lane; b < BINS; b += WG) {
#ifdef DRAW
        sa[b] = uvec3(hc[b], mass ? hl[b] : 0u, mass ? hh[b] : 0u);
#else
        sa[b] = uvec3(hc[b], 0u, 0u);
#endif
    }
    if (lane == 0u) {
        sel[0] = NONE;
    }
    barrier();
    scan(down);
    for (uint b = lane; b < BINS; b += WG) {
        const bool edge = down ? b == BINS - 1u : b == 0u;
        const uvec3 below = edge ? uvec3(0u) : sa[down ? b + 1u : b - 1u];
        if (less3(below, target, mass) && !less3(sa[b], target, mass)) {
            sel[0] = b;
            sel[1] = below.x;
            sel[2] = below.y;
            sel[3] = below.z;
        }
    }
    barrier();
}

void clear_histogram() {
    for (uint b = gl_LocalInvocationID.x; b < BINS; b += WG) {
        hc[b] = 0u;
#ifdef DRAW
        hl[b] = 0u;
        hh[b] = 0u;
#endif
    }
    barrier();
}

// the mask of the digits above the 8 at `shift`
uint above(uint shift) {
    return shift == 24u ? 0u : ~0u << (shift + 8u);
}

#ifdef SEGMENT
shared uint sk[SEG];
shared uint count_;
shared float best_score[WG];
shared uint best_index[WG];

void main() {
    const uint lane = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x;
    const uint start = s * SEG;
    const uint len = min(SEG, p.n - start);
    const uint top_k = state[1];
    const bool by_k = top_k >= 1u && top_k < p.n;
    const bool by_p = uintBitsToFloat(state[2]) < 1.0;
    if (!by_k && !by_p) {  // the segment's Gumbel-max
        const float inv_t = uintBitsToFloat(state[3]);
        const uint seed = state[4];
        float best = -1.0 / 0.0;
        uint at = NONE;
        for (uint j = lane; j < len; j += WG) {
            const float v = LOAD_X(start + j);
            const float sc_ = score(v, start + j, inv_t, seed, uint(position[0]));
            if (sc_ > best || at == NONE) {
                best = sc_;
                at = j;
            }
        }
        best_score[lane] = best;
        best_index[lane] = at;
        barrier();
        for (uint half_ = WG / 2u; half_ > 0u; half_ >>= 1) {
            if (lane < half_) {
                const float o = best_score[lane + half_];
                const uint oi = best_index[lane + half_];
                if (oi != NONE && (best_index[lane] == NONE || o > best_score[lane]
                                   || (o == best_score[lane] && oi < best_index[lane]))) {
                    best_score[lane] = o;
                    best_index[lane] = oi;
                }
            }
            barrier();
        }
        if (lane == 0u) {
            const uint j = best_index[0];
            cand[s] = 1u;
            cand[pairs_base() + 2u * start] = key_of(LOAD_X(start + j));
            cand[pairs_base() + 2u * start + 1u] = start + j;
        }
        return;
    }
    for (uint j = lane; j < len; j += WG) {
        sk[j] = key_of(LOAD_X(start + j));
    }
    if (lane == 0u) {
        count_ = 0u;
    }
    barrier();
    uint threshold = 0u;  // every element
    if (by_k && top_k < len) {
        uint prefix = 0u;
        uvec3 need = uvec3(top_k, 0u, 0u);
        for (uint shift = 24u; ; shift -= 8u) {
            clear_histogram();
            const uint mask = above(shift);
            for (uint j = lane; j < len; j += WG) {
                const uint k = sk[j];
                if (((k ^ prefix) & mask) == 0u) {
                    atomicAdd(hc[(k >> shift) & 0xFFu], 1u);
                }
            }
            barrier();
            pick(need, false, true);
            prefix |= sel[0] << shift;
            need.x -= sel[1];
            if (shift == 0u) {
                break;
            }
        }
        threshold = prefix;
    }
    for (uint j = lane; j < len; j += WG) {
        const uint k = sk[j];
        if (k >= threshold) {
            const uint at = atomicAdd(count_, 1u);
            cand[pairs_base() + 2u * (start + at)] = k;
            cand[pairs_base() + 2u * (start + at) + 1u] = start + j;
        }
    }
    barrier();
    if (lane == 0u) {
        cand[s] = count_;
    }
}
#endif

#ifdef DRAW
shared uint offs[MAX_SEGMENTS + 1u];  // candidates before segment s
shared uvec2 sc[CAP];
shared float best_score[WG];
shared uint best_index[WG];
shared uint max_key;

uint total() {
    return offs[p.segments];
}

// candidate d in 0..total() as (key, index)
uvec2 candidate(uint d) {
    if (total() <= CAP) {
        return sc[d];
    }
    uint lo = 0u, hi = p.segments;  // the segment s with offs[s] <= d < offs[s + 1]
    while (hi - lo > 1u) {
        const uint mid = (lo + hi) >> 1;
        if (offs[mid] <= d) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    const uint at = pairs_base() + 2u * (lo * SEG + d - offs[lo]);
    return uvec2(cand[at], cand[at + 1u]);
}

// the mass exp((x - max) / T) of key `k` in 32.32 fixed point (lo, hi)
uvec2 mass_of(uint k, float top, float inv_t) {
    const float w = exp((value_of(k) - top) * inv_t);
    return w >= 1.0 ? uvec2(0u, 1u) : uvec2(uint(w * 4294967296.0), 0u);
}

void main() {
    const uint lane = gl_LocalInvocationID.x;
    const uint top_k = state[1];
    const float top_p = uintBitsToFloat(state[2]);
    const float inv_t = uintBitsToFloat(state[3]);
    const uint seed = state[4];
    const uint pos = uint(position[0]);
    const bool by_k = top_k >= 1u && top_k < p.n;
    const bool by_p = top_p < 1.0;

    // offsets of the segments' candidates: chunks of segments a lane, then a scan of the chunks
    const uint chunk = (p.segments + WG - 1u) / WG;
    uint own = 0u;
    for (uint s = lane * chunk; s < min(p.segments, (lane + 1u) * chunk); ++s) {
        own += cand[s];
    }
    for (uint b = lane; b < BINS; b += WG) {
        sa[b] = uvec3(b == lane ? own : 0u, 0u, 0u);  // WG <= BINS
    }
    barrier();
    scan(false);
    uint run = sa[lane].x - own;
    for (uint s = lane * chunk; s < min(p.segments, (lane + 1u) * chunk); ++s) {
        offs[s] = run;
        run += cand[s];
    }
    if (lane == 0u) {
        offs[p.segments] = sa[BINS - 1u].x;
        max_key = 0u;
    }
    barrier();
    const uint n = total();
    if (n <= CAP) {
        for (uint d = lane; d < n; d += WG) {
            uint lo = 0u, hi = p.segments;
            while (hi - lo > 1u) {
                const uint mid = (lo + hi) >> 1;
                if (offs[mid] <= d) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            const uint at = pairs_base() + 2u * (lo * SEG + d - offs[lo]);
            sc[d] = uvec2(cand[at], cand[at + 1u]);
        }
        barrier();
    }

    // top-k: the k-th largest key, by counts
    uint kth = 0u;
    if (by_k) {
        uint prefix = 0u;
        uvec3 need = uvec3(top_k, 0u, 0u);
        for (uint shift = 24u; ; shift -= 8u) {
            clear_histogram();
            const uint mask = above(shift);
            for (uint d = lane; d < n; d += WG) {
                const uint k = candidate(d).x;
                if (((k ^ prefix) & mask) == 0u) {
                    atomicAdd(hc[(k >> shift) & 0xFFu], 1u);
                }
            }
            barrier();
            pick(need, false, true);
            prefix |= sel[0] << shift;
            need.x -= sel[1];
            if (shift == 0u) {
                break;
            }
        }
        kth = prefix;
    }

    // top-p: the key v* whose tie group crosses top_p of the mass, and how many of it are kept
    uint cut_key = 0u;     // keys above it kept
    uint cut_index = NONE; // of keys equal to it, indices up to this one kept
    if (by_p) {
        uint mk = 0u;
        for (uint d = lane; d < n; d += WG) {
            mk = max(mk, candidate(d).x);
        }
        atomicMax(max_key, mk);
        barrier();
        const float top = value_of(max_key);
        uint prefix = 0u;
        uvec3 need = uvec3(0u);
        uvec3 group = uvec3(0u);
        for (uint shift = 24u; ; shift -= 8u) {
            clear_histogram();
            const uint mask = above(shift);
            for (uint d = lane; d < n; d += WG) {
                const uint k = candidate(d).x;
                if (k >= kth && ((k ^ prefix) & mask) == 0u) {
                    const uint b = (k >> shift) & 0xFFu;
                    const uvec2 w = mass_of(k, top, inv_t);
                    atomicAdd(hc[b], 1u);
                    if (atomicAdd(hl[b], w.x) > ~w.x) {
                        atomicAdd(hh[b], 1u);
                    }
                    if (w.y != 0u) {
                        atomicAdd(hh[b], w.y);
                    }
                }
            }
            barrier();
            if (shift == 24u) {  // the target: top_p of the kept mass
                uvec3 all = uvec3(0u);
                for (uint b = 0u; b < BINS; ++b) {
                    all = add3(all, uvec3(hc[b], hl[b], hh[b]));
                }
                const float target = top_p * (float(all.z) * 4294967296.0 + float(all.y));
                const uint hi = uint(target * (1.0 / 4294967296.0));
                need = uvec3(0u, uint(target - float(hi) * 4294967296.0), hi);
            }
            pick(need, true, true);
            if (sel[0] == NONE) {  // rounding left the target above the total: keep all
                prefix = kth;
                need = uvec3(0u);
                break;
            }
            group = uvec3(hc[sel[0]], 0u, 0u);
            prefix |= sel[0] << shift;
            need = sub3(need, uvec3(0u, sel[2], sel[3]));
            barrier();  // every lane has read hc before the next walk clears it (after the last level too)
            if (shift == 0u) {
                break;
            }
        }
        cut_key = prefix;
        if (need != uvec3(0u)) {
            // of the group's equal tokens (in index order), those whose exclusive mass is under top_p
            const uvec2 w = mass_of(cut_key, top, inv_t);
            const float q = (float(need.z) * 4294967296.0 + float(need.y))
                          / (float(w.y) * 4294967296.0 + float(w.x));
            const uint keep = clamp(uint(ceil(q)), 1u, group.x);
            if (keep < group.x) {  // the keep-th smallest index of the group, by its 3 low bytes
                uint iprefix = 0u;
                uvec3 want = uvec3(keep, 0u, 0u);
                for (uint shift = 16u; ; shift -= 8u) {
                    clear_histogram();
                    const uint mask = ~0u << (shift + 8u);
                    for (uint d = lane; d < n; d += WG) {
                        const uvec2 c = candidate(d);
                        if (c.x == cut_key && ((c.y ^ iprefix) & mask) == 0u) {
                            atomicAdd(hc[(c.y >> shift) & 0xFFu], 1u);
                        }
                    }
                    barrier();
                    pick(want, false, false);
                    iprefix |= sel[0] << shift;
                    want.x -= sel[1];
                    if (shift == 0u) {
                        break;
                    }
                }
                cut_index = iprefix;
            }
        }
    }

    // the draw: the Gumbel-max of the kept candidates (ties: the lower index)
    float best = -1.0 / 0.0;
    uint at = NONE;
    for (uint d = lane; d < n; d += WG) {
        const uvec2 c = candidate(d);
        if (c.x >= kth && (c.x > cut_key || (c.x == cut_key && c.y <= cut_index))) {
            const float s = score(value_of(c.x), c.y, inv_t, seed, pos);
            if (at == NONE || s > best || (s == best && c.y < at)) {
                best = s;
                at = c.y;
            }
        }
    }
    best_score[lane] = best;
    best_index[lane] = at;
    barrier();
    for (uint half_ = WG / 2u; half_ > 0u; half_ >>= 1) {
        if (lane < half_) {
            const float o = best_score[lane + half_];
            const uint oi = best_index[lane + half_];
            if (oi != NONE && (best_index[lane] == NONE || o > best_score[lane]
                               || (o == best_score[lane] && oi < best_index[lane]))) {
                best_score[lane] = o;
                best_index[lane] = oi;
            }
        }
        barrier();
    }
    if (lane == 0u) {
        state[0] = best_index[0];
    }
}
#endif
