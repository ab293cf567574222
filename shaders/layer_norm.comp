#version 450
// Layer norm over the last N elements (one contiguous row per invocation).
// Bindings: 0 = in, 1 = out, 2 = weight[N], 3 = bias[N], 4 = mean[rows], 5 = rstd[rows].
// Unused bindings are bound to a placeholder and never touched.
// Defines: HAS_W, HAS_B, WRITE_MEAN, WRITE_RSTD.
// Two passes for the statistics (mean, then the centred sum of squares), biased variance.
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer BufIn { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufOut { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer BufW { float w[]; };
layout(std430, set = 0, binding = 3) readonly buffer BufB { float b[]; };
layout(std430, set = 0, binding = 4) writeonly buffer BufMean { float mean_out[]; };
layout(std430, set = 0, binding = 5) writeonly buffer BufRstd { float rstd_out[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint n;
    float eps;
    uint stat_off;  // index of this dispatch's first row in the bound mean/rstd ranges
} p;

void main() {
    uint gid = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * gl_WorkGroupSize.x
               + gl_LocalInvocationID.x;
    if (gid >= p.rows) {
        return;
    }
    uint base = gid * p.n;
    float s = 0.0;
    for (uint k = 0u; k < p.n; ++k) {
        s += x[base + k];
    }
    float mean = s / float(p.n);
    float q = 0.0;
    for (uint k = 0u; k < p.n; ++k) {
        float c = x[base + k] - mean;
        q += c * c;
    }
    float rstd = inversesqrt(q / float(p.n) + p.eps);
    for (uint k = 0u; k < p.n; ++k) {
        float v = (x[base + k] - mean) * rstd;
#ifdef HAS_W
        v *= w[k];
#endif
#ifdef HAS_B
        v += b[k];
#endif
        y[base + k] = v;
    }
#ifdef WRITE_MEAN
    mean_out[p.stat_off + gid] = mean;
#endif
#ifdef WRITE_RSTD
    rstd_out[p.stat_off + gid] = rstd;
#endif
}
