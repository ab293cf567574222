#version 450
// The hand-over between decoding steps chained on the device (loader/lm/greedy.py: GreedyChain,
// SampledChain): the token a step chose (its argmax, or the sampler's draw) becomes the next step's
// input, so that many decode steps run in one submission with no host work between them.
//   i = count; tokens[i] = chosen; count = i + 1; ids = chosen; position = first + i + 1
// Bindings: 0 = the chosen token in its word 0 (the argmax, int32 [1, 1], or the sampler's state);
// 1 = the method's input_ids tensor (int32 [1, 1]); 2 = its cache_position tensor (int32 [1]);
// 3 = [count, tokens..., first] (int32): count and the tokens zeroed before the first step, first the
// first step's position as the host wrote it (copied there by the submission's head: lm.greedy.Steps).
// Four bindings: the Android baseline's limit.
// One invocation: a few words between two steps of ~150 dispatches each.
layout(local_size_x = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer BufChosen { int chosen[]; };
layout(std430, set = 0, binding = 1) writeonly buffer BufIds { int ids[]; };
layout(std430, set = 0, binding = 2) writeonly buffer BufPosition { int position[]; };
layout(std430, set = 0, binding = 3) buffer BufTokens { int tokens[]; };

void main() {
    const int token = chosen[0];
    const int i = tokens[0];
    const int first = tokens[tokens.length() - 1];
    tokens[i + 1] = token;
    tokens[0] = i + 1;
    ids[0] = token;
    position[0] = first + i + 1;
}
