// nn/gpt.h — a decoder-only transformer in GPT-2's layout, with nanoGPT's parameter names
// (less its "transformer." prefix), so a state dict maps one to one:
//
//   wte   Embedding(V, C)    token embeddings; also the output projection (weight tying)
//   wpe   Embedding(T, C)    learned positions, T = context
//   drop  Dropout
//   h     Sequential of n_layer TransformerBlocks, "h.0", "h.1", ...; each is pre-LN:
//           x = x + attn(ln_1(x))      CausalSelfAttention: c_attn Linear(C, 3C) gives q, k, v
//                                      in n_head heads of C / n_head; causal attention; c_proj
//                                      Linear(C, C); dropout
//           x = x + mlp(ln_2(x))       TransformerMLP: c_fc Linear(C, 4C), GELU (tanh),
//                                      c_proj Linear(4C, C), dropout
//   ln_f  LayerNorm(C)
//   logits = ln_f(x) @ wte.weight^T    (B, T, V)
//
// Initialisation as GPT-2 (and nanoGPT): every Linear and Embedding weight N(0, 0.02), biases 0,
// layer norms weight 1 and bias 0, and the two projections into the residual stream (attn.c_proj,
// mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), so the residual's variance does not grow with depth.
// Dropout applies to the embeddings' sum and to each residual branch; there is none on the
// attention probabilities (nanoGPT's attn_dropout), which the attention op does not take.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/layers.h"

namespace mg::nn {

struct GPTConfig {
  int64_t vocab_size = 256;  // a byte-level tokenizer's
  int64_t context = 1024;    // the longest sequence (nanoGPT's block_size): the rows of wpe
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;      // a multiple of n_head
  double dropout = 0.0;
};

// The named sizes, with the vocabulary of the caller's tokenizer:
//   tiny   context 16,   2 layers,  2 heads,  16 wide   (tests)
//   small  context 128,  4 layers,  4 heads, 128 wide   (sized for a 2-core CPU)
//   gpt2   context 1024, 12 layers, 12 heads, 768 wide  (GPT-2 124M with vocab_size 50257)
GPTConfig gpt_config(const std::string& name, int64_t vocab_size);

class CausalSelfAttention : public Cloneable<CausalSelfAttention> {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override;

 private:
  int64_t n_embd_, n_head_;
};

class TransformerMLP : public Cloneable<TransformerMLP> {
 public:
  TransformerMLP(int64_t n_embd, double dropout);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override;

 private:
  int64_t n_embd_;
};

class TransformerBlock : public Cloneable<TransformerBlock> {
 public:
  TransformerBlock(int64_t n_embd, int64_t n_head, double dropout);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override;
};

class GPT : public Cloneable<GPT> {
 public:
  explicit GPT(const GPTConfig& config);
  // indices (B, T) Int64 token ids in [0, vocab_size), T <= context -> logits (B, T, V).
  Tensor forward(const Tensor& indices) override;
  std::string name() const override;
  const GPTConfig& config() const { return config_; }

 private:
  GPTConfig config_;
};

std::shared_ptr<GPT> gpt(const GPTConfig& config);

}  // namespace mg::nn
