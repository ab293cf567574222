#version 450
// Elementwise binary op with numpy broadcasting: out[i] = a[ia] OP b[ib].
// Bindings: 0 = a, 1 = b, 2 = out (contiguous row-major).
// Defines:
//   OP      0 add (a + alpha*b), 1 sub (a - alpha*b), 2 mul, 3 div
//   A_T, B_T, OUT_T  element types (float or int); arithmetic is done in OUT_T
//   OUT_INT defined when OUT_T is int (alpha/immediate come from the int fields)
//   VEC4    a/b/out are float vec4 arrays; n counts vec4s; no index math
//   A_MODE, B_MODE   0 indexed (strided in the general path, same-shape in VEC4),
//                    1 scalar tensor (element 0), 2 immediate (push constant `imm`)
// One invocation per output element (or per vec4). Groups fold into y.
layout(local_size_x = 64) in;

#ifndef OP
#define OP 0
#endif
#ifndef A_MODE
#define A_MODE 0
#endif
#ifndef B_MODE
#define B_MODE 0
#endif

#ifdef VEC4
#define A_T float
#define B_T float
#define OUT_T float
#define CV_T vec4
#else
#ifndef A_T
#define A_T float
#endif
#ifndef B_T
#define B_T float
#endif
#ifndef OUT_T
#define OUT_T float
#endif
#define CV_T OUT_T
#endif

#if defined(VEC4) && A_MODE == 0
layout(std430, set = 0, binding = 0) readonly buffer BufA { vec4 a[]; };
#else
layout(std430, set = 0, binding = 0) readonly buffer BufA { A_T a[]; };
#endif
#if defined(VEC4) && B_MODE == 0
layout(std430, set = 0, binding = 1) readonly buffer BufB { vec4 b[]; };
#else
layout(std430, set = 0, binding = 1) readonly buffer BufB { B_T b[]; };
#endif
#ifdef VEC4
layout(std430, set = 0, binding = 2) writeonly buffer BufO { vec4 o[]; };
#else
layout(std430, set = 0, binding = 2) writeonly buffer BufO { OUT_T o[]; };
#endif

layout(push_constant) uniform Push {
    uint n;        // invocations with work (elements, or vec4s)
    uint ndim;     // general path: number of (collapsed) dims, 1..6
    float falpha;  // alpha for add/sub, float output
    int ialpha;    // alpha for add/sub, int output
    float fimm;    // immediate scalar operand (A_MODE/B_MODE 2), float output
    int iimm;      // immediate scalar operand, int output
    uint size[6];  // output sizes (collapsed)
    uint sa[6];    // a strides in elements (0 where broadcast)
    uint sb[6];    // b strides in elements
} p;

#ifdef OUT_INT
#define ALPHA p.ialpha
#define IMM p.iimm
#else
#define ALPHA p.falpha
#define IMM p.fimm
#endif

CV_T apply_op(CV_T x, CV_T y) {
#if OP == 0
    return x + y * ALPHA;
#elif OP == 1
    return x - y * ALPHA;
#elif OP == 2
    return x * y;
#else
    return x / y;
#endif
}

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.n) {
        return;
    }
#ifdef VEC4
    uint ia = gid;
    uint ib = gid;
#else
    uint ia = 0u;
    uint ib = 0u;
    uint r = gid;
    for (int d = int(p.ndim) - 1; d >= 0; --d) {
        uint s = p.size[d];
        uint q = r / s;
        uint c = r - q * s;
        ia += c * p.sa[d];
        ib += c * p.sb[d];
        r = q;
    }
#endif

#if A_MODE == 0
    CV_T x = CV_T(a[ia]);
#elif A_MODE == 1
    CV_T x = CV_T(OUT_T(a[0]));
#else
    CV_T x = CV_T(IMM);
#endif
#if B_MODE == 0
    CV_T y = CV_T(b[ib]);
#elif B_MODE == 1
    CV_T y = CV_T(OUT_T(b[0]));
#else
    CV_T y = CV_T(IMM);
#endif
    o[gid] = apply_op(x, y);
}
