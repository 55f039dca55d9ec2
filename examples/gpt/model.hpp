// A small decoder-only transformer (GPT-2 shape: token + position embedding, pre-norm blocks of
// causal self-attention and a GELU MLP, a final layer norm, an untied LM head), split the
// Megatron way over tp ranks and the GPipe way over pp stages:
//   - a block's attention heads and MLP columns are divided over the TP group: QKV and the
//     first MLP layer are column-parallel, the attention projection and the second MLP layer
//     row-parallel; their partial outputs are summed over TP (forward), and the input gradients
//     of the column-parallel layers likewise (backward). Layer norms, the biases after a sum,
//     the embeddings and the head are the same on every TP rank;
//   - the blocks are divided over the pipeline stages: stage 0 also holds the embeddings, the
//     last stage the final layer norm and the head.
// Every parameter of one (tp, pp) role lives in one flat float array (Layout). The model knows
// nothing of flashrec: its TP sum comes in as a function.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace gpt {

struct Config {
    std::size_t vocab = 64, seq = 16, d_model = 32, heads = 4, layers = 2, mlp = 128;
    std::size_t batch = 2;  // sequences per micro-batch (per DP rank)
    int tp = 1, pp = 1;     // the job's shape
    int tp_rank = 0, stage = 0;  // this role's place in it

    std::size_t head_dim() const { return d_model / heads; }
    std::size_t local_heads() const { return heads / static_cast<std::size_t>(tp); }
    std::size_t local_width() const { return local_heads() * head_dim(); }  // this rank's part of d_model
    std::size_t local_mlp() const { return mlp / static_cast<std::size_t>(tp); }
    std::size_t local_layers() const { return layers / static_cast<std::size_t>(pp); }
    std::size_t tokens() const { return batch * seq; }  // rows of one micro-batch
    bool first() const { return stage == 0; }
    bool last() const { return stage == pp - 1; }
};

// Offsets into the flat parameter (and gradient) array of one role.
struct BlockOffsets {
    std::size_t ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b, fc_w, fc_b, fc2_w, fc2_b;
};
struct Layout {
    std::size_t wte = 0, wpe = 0;         // first stage only
    std::vector<BlockOffsets> blocks;     // this stage's blocks
    std::size_t lnf_g = 0, lnf_b = 0, lm_w = 0;  // last stage only
    std::size_t size = 0;
};
Layout make_layout(const Config& c);
// Initial parameters: a pure function of (seed, tensor, block, and the TP rank for the
// divided tensors), so that TP peers start with the same replicated parts.
std::vector<float> init_params(const Config& c, const Layout& l, std::uint64_t seed);

// One micro-batch's tokens: sequences t, t+s, t+2s, ... (mod vocab) with a random start and
// stride, the target of each position the next token. A pure function of `seed`.
void make_micro_batch(const Config& c, std::uint64_t seed, std::vector<int>& tokens, std::vector<int>& targets);

// Sums a tensor over the TP group (the same bits on every TP rank afterwards).
using TpSum = std::function<void(std::span<float>)>;

// What one micro-batch keeps from forward for backward on this stage.
struct BlockActs {
    std::vector<float> x, h, mean1, rstd1, qkv, att, attn, x2, h2, mean2, rstd2, a, f;
};
struct MicroBatch {
    std::vector<int> tokens, targets;
    std::vector<BlockActs> blocks;
    std::vector<float> out;   // this stage's output activations [tokens, d_model]
    std::vector<float> dout;  // last stage: the loss gradient at its output (head included)
};

class Stage {
public:
    Stage(Config c, Layout l) : c_(c), l_(l) {}
    // Forward of this stage's part: `in` is the previous stage's output (ignored on stage 0,
    // which embeds mb.tokens). On the last stage also the head, the loss (returned: the sum
    // of -log p over the micro-batch) and the head's backward, with gradients scaled by `scale`.
    double forward(const float* params, float* grads, MicroBatch& mb, std::span<const float> in, float scale,
                   const TpSum& tp_sum) const;
    // Backward of this stage's blocks (and the embedding on stage 0): `d` holds the gradient at
    // this stage's output and ends with the gradient at its input. Gradients accumulate.
    void backward(const float* params, float* grads, MicroBatch& mb, std::vector<float>& d,
                  const TpSum& tp_sum) const;

private:
    Config c_;
    Layout l_;
};

}  // namespace gpt
