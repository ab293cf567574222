#version 450
// Weight-only quantized matrix-vector product, one row of activations (the decode case):
//   o[n] = sum_k x[k] * q[n, k] * s[n, k / group] (+ bias[n])
// The weight rows are whole 16-byte chunks (uvec4s) of VALS values, 32 at BITS 4 (value j of a word
// in bits 4j..4j+3, stored as q + 8; HIGH_FIRST: each byte's even value in its high nibble), 16 at
// BITS 8 (signed bytes), read a chunk or a word at a time (SPAN, below). A chunk lies inside one
// scale group (group % VALS == 0).
// Workgroup w owns ROWS rows; its WG invocations split K in steps of SPAN words (specialization
// constant 8: 4, one 16-byte load a row, or 1, a word): invocation i reads steps i, i + WG, ... of
// every row (neighbours read neighbouring steps), the ROWS steps' loads issued together; then word
// by word, the word's activations are loaded once (vec4s) for all ROWS rows. Steps of one word keep
// the activation loads of neighbouring invocations contiguous (16 bytes apart at fp16 where steps
// of 16 bytes put them 64 apart); a step lies inside one scale group. Per step and row:
//   sum_j s * q_j * x_j = s * (sum_j u_j * x_j - ZERO * sum_j x_j)
// with u = q + ZERO the stored unsigned field (int8's bytes flipped to q + 128), so the zero point
// costs one multiply-add per step and the scale one multiply. AFFINE (w = q * s + o, packed.glslh)
// adds o * sum_j x_j, that sum already taken: one more load and multiply-add a step. A field
// becomes a float without a conversion instruction (`field`: a mask, an OR and a subtraction), then
// its multiply-add: four instructions a weight. fp32 sums, then partials.glslh's workgroup sum.
// WG and ROWS are specialization constants 0 and 1.
// Bindings: 0 = x, 1 = weight rows [row0, row0 + rows) (as uvec4 and as uint), 2 = scales, 3 = out,
// 4 = bias (HAS_BIAS); scales, out and bias of any dtype (ANY_IN / ANY_OUT, specialization
// constants 2, 3 and 4). Defines: read defines for X; X_V and LOAD4_X(i) (elements i..i+3 of x
// as a vec4, i a multiple of 4); BITS, HIGH_FIRST, SCALE_STRIDE (scales [groups, p.scale_stride],
// else [N, groups]), AFFINE ((scale, offset) pairs, [N, groups, 2]; in every form below too),
// HAS_BIAS, SUBGROUP, WORDS and DT_*.
// GLU (whole weights bound, no bias): binding 4 = a second weight laid out as the first, 5 = its
// scales (S2, constant 4), read in the same workgroup, and o[n] = silu(sum_k x q s) * (sum_k x q2 s2):
// SwiGLU's gate and up products and their product in one dispatch.
// SEGMENTS (whole weights bound, no bias): three products of x in one dispatch, the first
// ceil(rows / ROWS) workgroups on weight 1 (bindings 1-3), the next ceil(rows2 / ROWS) on weight 2
// (4 = rows, 5 = scales S2, 6 = out O2), the rest on weight 3 (7, 8 = S3, 9 = O3): an attention's
// q, k and v products; the weights share K, the packing and the scale layout (S2, O2, S3, O3:
// constants 4 to 7).
// NORM (GLU, SEGMENTS or one row block): x is an RMSNorm's input, the products are of its output,
// x[k] * G[k] * rsqrt(mean(x^2) + p.eps): binding NORM_BINDING = G (the norm's weight, K elements),
// the squares summed in the same sweep, each sum scaled once (as matvec.comp's NORM).
#include "partials.glslh"
#include "dtype.glslh"
#include "pairs.glslh"
#include "packed.glslh"

#if BITS == 4
#define VALS 32
#define ZERO 8.0
#else
#define VALS 16
#define ZERO 128.0
#endif
#ifdef HIGH_FIRST
#define XI(v, j) v[(j) ^ 1]
#else
#define XI(v, j) v[j]
#endif

layout(std430, set = 0, binding = 0) readonly buffer BufX { X_V x[]; };
layout(constant_id = 8) const int SPAN = 4;
// Each weight is bound once and declared twice: as 16-byte steps (SPAN 4) and as words.
layout(std430, set = 0, binding = 1) readonly buffer BufW { uvec4 w[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufW1 { uint w_1[]; };
ANY_IN(2, S, s, 2)
ANY_OUT(3, O, o, 3)
#ifdef HAS_BIAS
ANY_IN(4, B, bias, 4)
#endif
#if defined(GLU) || defined(SEGMENTS)
layout(std430, set = 0, binding = 4) readonly buffer BufW2 { uvec4 w2[]; };
layout(std430, set = 0, binding = 4) readonly buffer BufW21 { uint w2_1[]; };
#define WEIGHT2(i) w2[i]
#define WORD2(i) w2_1[i]
ANY_IN(5, S2, s2, 4)
#endif
#ifdef SEGMENTS
ANY_OUT(6, O2, o2, 5)
layout(std430, set = 0, binding = 7) readonly buffer BufW3 { uvec4 w3[]; };
layout(std430, set = 0, binding = 7) readonly buffer BufW31 { uint w3_1[]; };
ANY_IN(8, S3, s3, 6)
ANY_OUT(9, O3, o3, 7)
// the weight, scale and store of this workgroup's product (seg: uniform in the workgroup)
#define WEIGHT(i) (seg == 0 ? w[i] : seg == 1 ? w2[i] : w3[i])
#define WORD(i) (seg == 0 ? w_1[i] : seg == 1 ? w2_1[i] : w3_1[i])
#define SCALE(i) (seg == 0 ? load_S(i) : seg == 1 ? load_S2(i) : load_S3(i))
#else
#define WEIGHT(i) w[i]
#define WORD(i) w_1[i]
#define SCALE(i) load_S(i)
#endif
// The SPAN words of a row's step from its first word `at` (the rest zero), read by LOAD16 or LOAD1
#define STEP(LOAD16, LOAD1, at, q) \
    if (SPAN == 4) { q = LOAD16((at) >> 2); } else { q = uvec4(0u); for (int j_ = 0; j_ < SPAN; ++j_) q[j_] = LOAD1((at) + uint(j_)); }
// A step's sum from its zero-point-free sum d and the scale group at `at` (LOAD: the scales' load)
#ifdef AFFINE
#define CHUNK_SUM(LOAD, at, d) (LOAD(SCALE_OF(at)) * (d) + LOAD(OFFSET_OF(at)) * xsum)
#else
#define CHUNK_SUM(LOAD, at, d) (LOAD(at) * (d))
#endif

#ifdef NORM
layout(std430, set = 0, binding = NORM_BINDING) readonly buffer BufG { G_V g[]; };
float squares = 0.0;  // of the elements of x this invocation read
#define NORM_X(v, i) squares += dot(v, v); v *= LOAD4_G(i);
#else
#define NORM_X(v, i)
#endif

layout(push_constant) uniform Push {
    uint chunks;        // 16-byte chunks per weight row (K / VALS)
    uint groups;        // scale groups per row
    uint per_group;     // chunks per scale group
    uint row0;          // first weight row bound
    uint rows;          // weight rows bound
    uint scale_stride;  // SCALE_STRIDE: the scales' row length
    uint rows2, rows3;  // SEGMENTS: the second and third weights' rows
#ifdef NORM
    float eps;
#endif
} p;

// The bits `mask` of `word` (a field u at bit e, e + 4 <= 20) as the float u * 2^e: OR-ed into the
// mantissa of 2^23, minus 2^23, is exact, and costs one logic op and an add where float(uint)
// takes a conversion, a quarter-rate instruction on many GPUs.
float field(uint word, uint mask) {
    return uintBitsToFloat((word & mask) | 0x4B000000u) - 8388608.0;
}

// Adds the fields of word v times their activations to e (vec4) and e4 (float), the fields taken
// in place, by their power of 16 (int4; the upper three from the word shifted down by 12) or of
// 256 (int8): `folded` turns the accumulators into sum_j u_j * x_j once a chunk.
#if BITS == 4
#define X(j) XI(xv, j)
void add_word(uint v, float xv[8], inout vec4 e, inout float e4) {
    const uint hi = v >> 12;  // values 5, 6, 7 in bits 8..19
    e.x += field(v, 0xFu) * X(0);
    e.y += field(v, 0xF0u) * X(1);
    e.z += field(v, 0xF00u) * X(2) + field(hi, 0xF00u) * X(5);
    e.w += field(v, 0xF000u) * X(3) + field(hi, 0xF000u) * X(6);
    e4 += field(v, 0xF0000u) * X(4) + field(hi, 0xF0000u) * X(7);
}

float folded(vec4 e, float e4) {
    return e.x + (e.y + (e.z + (e.w + e4 * 0.0625) * 0.0625) * 0.0625) * 0.0625;
}
#else
void add_word(uint v, vec4 x, inout vec4 e, inout float e4) {
    v ^= 0x80808080u;         // each byte q + 128
    const uint hi = v >> 16;  // bytes 2, 3
    e.x += field(v, 0xFFu) * x.x + field(hi, 0xFFu) * x.z;
    e.y += field(v, 0xFF00u) * x.y + field(hi, 0xFF00u) * x.w;
}

float folded(vec4 e, float e4) {
    return e.x + e.y * 0.00390625;
}
#endif

// The workgroup's walk over its rows' chunks, adding each row's sum to acc (the up product's to acc2
// with GLU); `seg` is the product it reads (SEGMENTS), a constant at each call, so that the loads
// are specialised when the calls are inlined instead of choosing a weight a load (llvmpipe ran that
// a third slower).
void sweep(const int seg, const uint lid, const uint row[ROWS], inout float acc[ROWS]
#ifdef GLU
           , inout float acc2[ROWS]
#endif
           ) {
    const uint words = 4u * p.chunks, steps = words / uint(SPAN);
    for (uint c = lid; c < steps; c += uint(WG)) {
        uvec4 q[ROWS];
        for (int r = 0; r < ROWS; ++r) {
            STEP(WEIGHT, WORD, row[r] * words + c * uint(SPAN), q[r])
        }
#ifdef GLU
        uvec4 q2[ROWS];
        vec4 e2[ROWS];
        float e42[ROWS];
        for (int r = 0; r < ROWS; ++r) {
            STEP(WEIGHT2, WORD2, row[r] * words + c * uint(SPAN), q2[r])
            e2[r] = vec4(0.0);
            e42[r] = 0.0;
        }
#endif
        vec4 e[ROWS];
        float e4[ROWS];
        for (int r = 0; r < ROWS; ++r) {
            e[r] = vec4(0.0);
            e4[r] = 0.0;
        }
        float xsum = 0.0;
        const uint xi = c * uint(SPAN * VALS / 4);
        for (int i = 0; i < SPAN; ++i) {
#if BITS == 4
            vec4 xa = LOAD4_X(xi + 8u * uint(i)), xb = LOAD4_X(xi + 8u * uint(i) + 4u);
            NORM_X(xa, xi + 8u * uint(i))
            NORM_X(xb, xi + 8u * uint(i) + 4u)
            const float xv[8] = float[8](xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w);
            xsum += ((xa.x + xa.y) + (xa.z + xa.w)) + ((xb.x + xb.y) + (xb.z + xb.w));
            for (int r = 0; r < ROWS; ++r) {
                add_word(q[r][i], xv, e[r], e4[r]);
#ifdef GLU
                add_word(q2[r][i], xv, e2[r], e42[r]);
#endif
            }
#else
            vec4 xa = LOAD4_X(xi + 4u * uint(i));
            NORM_X(xa, xi + 4u * uint(i))
            xsum += (xa.x + xa.y) + (xa.z + xa.w);
            for (int r = 0; r < ROWS; ++r) {
                add_word(q[r][i], xa, e[r], e4[r]);
#ifdef GLU
                add_word(q2[r][i], xa, e2[r], e42[r]);
#endif
            }
#endif
        }
        const uint g = c * uint(SPAN) / (4u * p.per_group);
        for (int r = 0; r < ROWS; ++r) {
            acc[r] += CHUNK_SUM(SCALE, SCALE_AT(p.row0 + row[r], g), folded(e[r], e4[r]) - ZERO * xsum);
#ifdef GLU
            acc2[r] += CHUNK_SUM(load_S2, SCALE_AT(row[r], g), folded(e2[r], e42[r]) - ZERO * xsum);
#endif
        }
    }
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    uint wg = gl_WorkGroupID.x;
    uint rows = p.rows;
#ifdef SEGMENTS
    int seg = 0;
    const uint wg1 = (p.rows + uint(ROWS) - 1u) / uint(ROWS), wg2 = (p.rows2 + uint(ROWS) - 1u) / uint(ROWS);
    if (wg >= wg1 + wg2) {
        seg = 2;
        wg -= wg1 + wg2;
        rows = p.rows3;
    } else if (wg >= wg1) {
        seg = 1;
        wg -= wg1;
        rows = p.rows2;
    }
#endif
    const uint first = wg * uint(ROWS);  // first row of this workgroup, within the block
    uint row[ROWS];  // rows past the block repeat the last one (read, never stored)
    float acc[ROWS];
    for (int r = 0; r < ROWS; ++r) {
        row[r] = min(first + uint(r), rows - 1u);
        acc[r] = 0.0;
    }
#ifdef GLU
    float acc2[ROWS];
    for (int r = 0; r < ROWS; ++r) {
        acc2[r] = 0.0;
    }
#endif
#ifdef GLU
#define SWEEP_ARGS lid, row, acc, acc2
#else
#define SWEEP_ARGS lid, row, acc
#endif
#ifdef SEGMENTS
    if (seg == 0) {
        sweep(0, SWEEP_ARGS);
    } else if (seg == 1) {
        sweep(1, SWEEP_ARGS);
    } else {
        sweep(2, SWEEP_ARGS);
    }
#else
    sweep(0, SWEEP_ARGS);
#endif

    for (int r = 0; r < ROWS; ++r) {
        put_partial(r, acc[r]);
#ifdef GLU
        put_partial(ROWS + r, acc2[r]);
#endif
    }
#ifdef NORM
    put_partial(SUMS, squares);
#endif
    barrier();
    fold_partials();
    if (lid < uint(ROWS) && first + lid < rows) {
#ifdef NORM
        const float scale = inversesqrt(row_total(SUMS) / float(p.chunks * uint(VALS)) + p.eps);
#else
        const float scale = 1.0;
#endif
        float sum = scale * row_total(int(lid));
        const uint n = p.row0 + first + lid;
#ifdef HAS_BIAS
        sum += load_B(n);
#endif
#ifdef GLU
        sum = sum / (1.0 + exp(-sum)) * (scale * row_total(ROWS + int(lid)));
#endif
#ifdef SEGMENTS
        if (seg == 1) {
            store_O2(n, sum);
        } else if (seg == 2) {
            store_O3(n, sum);
        } else {
            store_O(n, sum);
        }
#else
        store_O(n, sum);
#endif
    }
}
