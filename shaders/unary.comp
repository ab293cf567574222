#version 450
// Elementwise float unary op: out[i] = OP(in[i]).
// Bindings: 0 = in, 1 = out (same number of elements, contiguous).
// Defines:
//   OP(x)  the operation: a GLSL expression of x (the op's `glsl` in vkx.format.contract),
//          valid for a float and for a vec4; the helpers below are its vocabulary
//   X_T, LOAD_X, Y_T, STORE_Y  element types of in and out (elem_defines, or with VEC4
//          vec4_defines: arrays of 4-element vectors of any float type); math in fp32
//   VEC4   x is a vec4 and n counts vec4s
// One invocation per element (or per vec4). Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

#ifdef VEC4
#define T vec4
#define GE(a, b) greaterThanEqual(a, b)
#define LT(a, b) lessThan(a, b)
#define EQ(a, b) equal(a, b)
#else
#define T float
#define GE(a, b) ((a) >= (b))
#define LT(a, b) ((a) < (b))
#define EQ(a, b) ((a) == (b))
#endif

layout(std430, set = 0, binding = 0) readonly buffer BufIn { X_T x_in[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { Y_T x_out[]; };

layout(push_constant) uniform Push {
    uint n;
} p;

// exp(-|x|)-based forms avoid inf/inf for large |x|.
T sigmoid_(T x) {
    T e = exp(-abs(x));
    T r = 1.0 / (1.0 + e);  // sigmoid(|x|); sigmoid(-|x|) = e * r keeps its relative precision
    return mix(e * r, r, GE(x, T(0.0)));
}

T tanh_(T x) {
    T ax = abs(x);
    T e = exp(-2.0 * ax);
    T big = (1.0 - e) / (1.0 + e);
    // Odd Taylor series for small |x|, where 1 - e loses digits.
    T x2 = ax * ax;
    T small = ax * (1.0 + x2 * (-1.0 / 3.0 + x2 * (2.0 / 15.0 + x2 * (-17.0 / 315.0))));
    T r = mix(big, small, LT(ax, T(0.0625)));
    return sign(x) * r;
}

// 1/sqrt(x) with IEEE edge cases (GLSL leaves inversesqrt undefined for x <= 0):
// +0 -> inf, -0 -> -inf, negative -> NaN.
T rsqrt_(T x) {
    T r = 1.0 / sqrt(abs(x));
    r = mix(r, T(uintBitsToFloat(0x7FC00000u)), LT(x, T(0.0)));
    return mix(r, 1.0 / x, EQ(x, T(0.0)));
}

// log with IEEE edge cases (GLSL leaves log undefined for x <= 0): 0 -> -inf, negative -> NaN.
T log_(T x) {
    T r = mix(log(abs(x)), T(uintBitsToFloat(0xFF800000u)), EQ(x, T(0.0)));
    return mix(r, T(uintBitsToFloat(0x7FC00000u)), LT(x, T(0.0)));
}

#ifdef E
// x ** E for a scalar exponent E (a define; the loader writes E = 2, 1, 0.5 ... as plain
// expressions): |x| ** E, with the sign of x for an odd integer E, as torch does. GLSL leaves pow
// undefined for x < 0 and for x = 0, E <= 0: a negative x with a fractional E gives NaN, and
// 0 ** E is 1, 0 or inf for E = 0, E > 0, E < 0.
T pow_(T x) {
    T r = pow(max(abs(x), T(1.17549435e-38)), T(E));
    r = E > 0.0 ? mix(r, T(0.0), EQ(x, T(0.0))) : mix(r, T(uintBitsToFloat(0x7F800000u)), EQ(x, T(0.0)));
    if (fract(E) != 0.0) {  // -inf ** E is inf ** E, as in C
        r = mix(r, T(uintBitsToFloat(0x7FC00000u)), LT(x, T(0.0)));
        r = mix(r, T(E > 0.0 ? uintBitsToFloat(0x7F800000u) : 0.0), isinf(x));
    } else if (mod(E, 2.0) == 1.0) {
        r = mix(r, -r, LT(x, T(0.0)));
    }
    return mix(r, x, isnan(x));
}
#endif

// sin and cos of an argument reduced to [-pi, pi] first, in two steps (Cody-Waite: k * 6.28125
// is exact for |k| < 2^16): drivers' sin/cos are accurate only near zero (Vulkan asks 2^-11
// absolute on [-pi, pi]; the H200's lose 6e-4 at 5000), rotary embeddings pass thousands.
T reduce_2pi(T x) {
    T k = round(x * 0.15915494309189535);
    precise T hi = x - k * 6.28125;  // precise: the two steps must not be merged back into one
    precise T r = hi - k * 0.0019353071795864769;
    return r;
}

T sin_(T x) {
    return sin(reduce_2pi(x));
}

T cos_(T x) {
    return cos(reduce_2pi(x));
}

// erfc(z) for z >= 0 with fractional error < 1.2e-7 everywhere
// (Chebyshev-fitted rational form, Numerical Recipes "erfcc").
T erfc_pos(T z) {
    T t = 1.0 / (1.0 + 0.5 * z);
    T poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
             t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
             t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(-z * z + poly);
}

// Phi(x) = 0.5 * erfc(-x / sqrt(2)); the tail side keeps its relative precision.
T normal_cdf(T x) {
    T z = abs(x) * 0.70710678118654752;
    T h = 0.5 * erfc_pos(z);
    return mix(h, 1.0 - h, GE(x, T(0.0)));
}

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    T x = LOAD_X(gid);
    T y = OP(x);
    STORE_Y(gid, y);
}
