#version 450
// Elementwise binary op with numpy broadcasting: out[i] = OP(a[ia], b[ib]).
// Bindings: 0 = a, 1 = b, 2 = out (contiguous row-major), each of any dtype (ANY_IN/ANY_OUT in
// dtype.glslh), converted on load and store.
// Defines:
//   OP(x, y)  the operation: a GLSL expression of x, y (vkx.loader.ops.elementwise.BINARY_GLSL);
//             ALPHA is add/sub's alpha
//   INT_MATH  compute in int (no floating operand or output), else in float
//   VEC4      float tensors, flat: mode-0 operands and out are read and written as 4-element
//             vectors, n counts vec4s, no index math
// Specialization constants: A_DT, B_DT, O_DT (0-2) the dtypes; A_MODE, B_MODE (3-4) how an
// operand is read: 0 indexed (strided in the general path, same-shape in VEC4), 1 scalar tensor
// (element 0), 2 immediate (push constant; the binding is a placeholder).
// One invocation per output element (or per vec4). Groups fold into y.
layout(local_size_x = 64) in;
#include "dtype.glslh"

ANY_IN(0, A, a, 0)
ANY_IN(1, B, b, 1)
ANY_OUT(2, O, o, 2)
layout(constant_id = 3) const int A_MODE = 0;
layout(constant_id = 4) const int B_MODE = 0;

#ifdef VEC4
#define C_T vec4
#define GET_A(i) load4_A(i)
#define GET_B(i) load4_B(i)
#define FIRST_A() C_T(load_A(0))
#define FIRST_B() C_T(load_B(0))
#define STORE(i, v) store4_O(i, v)
#elif defined(INT_MATH)
#define C_T int
#define GET_A(i) loadi_A(i)
#define GET_B(i) loadi_B(i)
#define FIRST_A() loadi_A(0)
#define FIRST_B() loadi_B(0)
#define STORE(i, v) store_O(i, v)
#else
#define C_T float
#define GET_A(i) load_A(i)
#define GET_B(i) load_B(i)
#define FIRST_A() load_A(0)
#define FIRST_B() load_B(0)
#define STORE(i, v) store_O(i, v)
#endif

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

    C_T x = C_T(IMM);
    if (A_MODE == 0) {
        x = GET_A(ia);
    } else if (A_MODE == 1) {
        x = FIRST_A();
    }
    C_T y = C_T(IMM);
    if (B_MODE == 0) {
        y = GET_B(ib);
    } else if (B_MODE == 1) {
        y = FIRST_B();
    }
    C_T z = OP(x, y);
    STORE(gid, z);
}
