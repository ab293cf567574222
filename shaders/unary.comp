#version 450
// Elementwise float unary op: out[i] = f(in[i]).
// Bindings: 0 = in, 1 = out (same number of elements, contiguous).
// Defines:
//   OP    0 relu, 1 sigmoid, 2 tanh, 3 silu, 4 gelu (erf form), 5 gelu (tanh form), 6 identity
//   VEC4  buffers are vec4 arrays and n counts vec4s
// One invocation per element (or per vec4). Groups fold into y.
layout(local_size_x = 64) in;

#ifndef OP
#define OP 0
#endif

#ifdef VEC4
#define T vec4
#define GE(a, b) greaterThanEqual(a, b)
#define LT(a, b) lessThan(a, b)
#else
#define T float
#define GE(a, b) ((a) >= (b))
#define LT(a, b) ((a) < (b))
#endif

layout(std430, set = 0, binding = 0) readonly buffer BufIn { T x_in[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { T x_out[]; };

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

T f(T x) {
#if OP == 0
    return max(x, T(0.0));
#elif OP == 1
    return sigmoid_(x);
#elif OP == 2
    return tanh_(x);
#elif OP == 3
    return x * sigmoid_(x);
#elif OP == 4
    return x * normal_cdf(x);
#elif OP == 5
    // 0.5 * (1 + tanh(u)) == sigmoid(2u): no cancellation in the negative tail.
    T inner = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    return x * sigmoid_(2.0 * inner);
#else
    return x;
#endif
}

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
    x_out[gid] = f(x_in[gid]);
}
