#version 450
// Elementwise binary op with numpy broadcasting: out[i] = OP(a[ia], b[ib]).
// Bindings: 0 = a, 1 = b, 2 = out (contiguous row-major).
// Defines:
//   OP(x, y)  the operation: a GLSL expression of x, y (the op's `glsl` in vkx.format.contract);
//             ALPHA is add/sub's alpha
//   INT_MATH  compute in int (no floating operand or output), else in float
//   A_T, LOAD_A, LOADI_A, B_T, ..., O_T, STORE_O  element types (elem_defines): any types,
//             converted on load and store
//   VEC4      float operands, flat: mode-0 operands and out are arrays of 4-element vectors
//             (vec4_defines), n counts vec4s, no index math
//   A_MODE, B_MODE  0 indexed (strided in the general path, same-shape in VEC4),
//                   1 scalar tensor (element 0), 2 immediate (push constant; the binding
//                   is a placeholder)
// One invocation per output element (or per vec4). Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

#ifdef VEC4
#define C_T vec4
#define GET_A(i) C_T(LOAD_A(i))
#define GET_B(i) C_T(LOAD_B(i))
#elif defined(INT_MATH)
#define C_T int
#define GET_A(i) LOADI_A(i)
#define GET_B(i) LOADI_B(i)
#else
#define C_T float
#define GET_A(i) LOAD_A(i)
#define GET_B(i) LOAD_B(i)
#endif

layout(std430, set = 0, binding = 0) readonly buffer BufA { A_T a[]; };
layout(std430, set = 0, binding = 1) readonly buffer BufB { B_T b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufO { O_T o[]; };

layout(push_constant) uniform Push {
    uint n;        // invocations with work (elements, or vec4s)
    uint ndim;     // general path: number of (collapsed) dims, 1..6
    float falpha;  // alpha for add/sub, float math
    int ialpha;    // alpha for add/sub, int math
    float fimm;    // immediate scalar operand (A_MODE/B_MODE 2), float math
    int iimm;      // immediate scalar operand, int math
    uint size[6];  // output sizes (collapsed)
    uint sa[6];    // a strides in elements (0 where broadcast)
    uint sb[6];    // b strides in elements
} p;

#ifdef INT_MATH
#define ALPHA p.ialpha
#define IMM p.iimm
#else
#define ALPHA p.falpha
#define IMM p.fimm
#endif

// minimum/maximum: NaN wins, as in torch (GLSL's min/max leave NaN undefined).
float min_(float x, float y) { return isnan(x) || isnan(y) ? x + y : min(x, y); }
float max_(float x, float y) { return isnan(x) || isnan(y) ? x + y : max(x, y); }
vec4 min_(vec4 x, vec4 y) { return mix(min(x, y), x + y, bvec4(uvec4(isnan(x)) | uvec4(isnan(y)))); }
vec4 max_(vec4 x, vec4 y) { return mix(max(x, y), x + y, bvec4(uvec4(isnan(x)) | uvec4(isnan(y)))); }
int min_(int x, int y) { return min(x, y); }
int max_(int x, int y) { return max(x, y); }

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
    C_T x = GET_A(ia);
#elif A_MODE == 1
    C_T x = GET_A(0);
#else
    C_T x = C_T(IMM);
#endif
#if B_MODE == 0
    C_T y = GET_B(ib);
#elif B_MODE == 1
    C_T y = GET_B(0);
#else
    C_T y = C_T(IMM);
#endif
    C_T z = OP(x, y);
    STORE_O(gid, z);
}
