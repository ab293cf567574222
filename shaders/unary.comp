#version 450
// Elementwise float unary op: out[i] = OP(in[i]).
// Bindings: 0 = in, 1 = out (same number of elements, contiguous), each of any dtype (ANY_IN/ANY_OUT
// in dtype.glslh; specialization constants X_DT, Y_DT = 0, 1); math in fp32.
// Defines:
//   OP(x)  the operation: a GLSL expression of x (vkx.loader.ops.elementwise's tables), valid
//          for a float and for a vec4; the helpers below are its vocabulary, p.a and p.b the
//          op's numbers (push constants: a number is never part of a variant)
//   VEC4   x is a vec4 (float types only) and n counts vec4s
// One invocation per element (or per vec4). Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

#ifdef VEC4
#define T vec4
#define LOAD(i) load4_X(i)
#define STORE(i, v) store4_Y(i, v)
#define GE(a, b) greaterThanEqual(a, b)
#define GT(a, b) greaterThan(a, b)
#define LT(a, b) lessThan(a, b)
#define EQ(a, b) equal(a, b)
#else
#define T float
#define LOAD(i) load_X(i)
#define STORE(i, v) store_Y(i, v)
#define GE(a, b) ((a) >= (b))
#define GT(a, b) ((a) > (b))
#define LT(a, b) ((a) < (b))
#define EQ(a, b) ((a) == (b))
#endif

ANY_IN(0, X, x_in, 0)
ANY_OUT(1, Y, x_out, 1)

layout(push_constant) uniform Push {
    uint n;
    float a;  // the op's number: leaky_relu's slope, hardshrink's lambd, pow's exponent, clamp's min
    float b;  // clamp's max
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

// x ** p.a: |x| ** p.a, with the sign of x for an odd integer exponent, as torch does. GLSL
// leaves pow undefined for x < 0 and for x = 0, exponent <= 0: a negative x with a fractional
// exponent gives NaN, and 0 ** e is 1, 0 or inf for e = 0, e > 0, e < 0.
T pow_(T x) {
    float e = p.a;
    T r = pow(max(abs(x), T(1.17549435e-38)), T(e));
    r = e > 0.0 ? mix(r, T(0.0), EQ(x, T(0.0))) : mix(r, T(uintBitsToFloat(0x7F800000u)), EQ(x, T(0.0)));
    if (fract(e) != 0.0) {  // -inf ** e is inf ** e, as in C
        r = mix(r, T(uintBitsToFloat(0x7FC00000u)), LT(x, T(0.0)));
        r = mix(r, T(e > 0.0 ? uintBitsToFloat(0x7F800000u) : 0.0), isinf(x));
    } else if (mod(e, 2.0) == 1.0) {
        r = mix(r, -r, LT(x, T(0.0)));
    }
    return mix(r, x, isnan(x));
}

#include "trig.glslh"

// erfc(z) for z >= 0 with fractional error < 1.2e-7 everywhere
// (Chebyshev-fitted rational form, Numerical Recipes "erfcc").
T erfc_pos(T z) {
    T t = 1.0 / (1.0 + 0.5 * z);
    T poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
             t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
             t * (-0.82215223 + t * 0.17087277))))))));
    // Past z = 10, erfc(z) / 2 is below the smallest fp32 subnormal: 0.
    return mix(t * exp(-z * z + poly), T(0.0), GE(z, T(10.0)));
}

// Phi(x) = 0.5 * erfc(-x / sqrt(2)); the tail side keeps its relative precision.
T normal_cdf(T x) {
    T z = abs(x) * 0.70710678118654752;
    T h = 0.5 * erfc_pos(z);
    return mix(h, 1.0 - h, GE(x, T(0.0)));
}

// gelu(x) = x * Phi(x), and x itself past 10 (where Phi(x) rounds to 1): NVIDIA's compiler
// distributes the product over Phi's select, which made x = inf into inf - inf * 0 = NaN.
T gelu_erf_(T x) {
    return mix(x * normal_cdf(x), x, GT(x, T(10.0)));
}

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    T x = LOAD(gid);
    T y = OP(x);
    STORE(gid, y);
}
