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
//
// Activation recomputation (set_recompute, `multigrad train --recompute`): each block runs
// under autograd/checkpoint.h, so the forward keeps only the blocks' inputs (B, T, C) and
// backward recomputes one block's activations at a time; gradients are bit-identical.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "multigrad/nn/layers.h"

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

// A config as text fields ("gpt.vocab_size", "gpt.context", "gpt.n_layer", "gpt.n_head",
// "gpt.n_embd", "gpt.dropout"), as a checkpoint's info stores it (io/checkpoint.h), and back:
// gpt_config_from_info checks that every field is there, a number, and a valid size, naming
// `source` (the file) in the error.
std::map<std::string, std::string> gpt_config_info(const GPTConfig& config);
GPTConfig gpt_config_from_info(const std::map<std::string, std::string>& info, const std::string& source);
// Checks that `state` (a checkpoint's model state) is a GPT of `config` before one is built: the
// config could describe a model far larger than the tensors (edited or corrupt metadata). wte and
// wpe must be (vocab_size, n_embd) and (context, n_embd), and the blocks h.0 .. h.{n_layer - 1}
// there and no more; an error names `source`, the fields and the tensor's shape.
void check_gpt_state(const GPTConfig& config, const StateDict& state, const std::string& source);
// The parameters a GPT of `config` has, without building it: V C + T C + L (12 C^2 + 13 C) + 2 C
// (the head is tied to wte). Saturates at INT64_MAX.
int64_t gpt_parameter_count(const GPTConfig& config);

// The block's modules can also be given (the second constructors): a tensor-parallel rank's
// shards of them (parallel/tensor/tensor_parallel.h), under the same names, with the same forward.
class CausalSelfAttention : public Cloneable<CausalSelfAttention> {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout);
  // c_attn: (B, T, n_embd) -> (B, T, 3 heads head_dim) as [q | k | v]; c_proj: (B, T, heads
  // head_dim) -> (B, T, n_embd).
  CausalSelfAttention(std::shared_ptr<Module> c_attn, std::shared_ptr<Module> c_proj,
                      std::shared_ptr<Module> resid_dropout, int64_t n_embd, int64_t heads, int64_t head_dim);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override;
  int64_t n_embd() const { return n_embd_; }
  int64_t n_head() const { return n_head_; }  // the heads computed here

 private:
  int64_t n_embd_, n_head_, head_dim_;
};

class TransformerMLP : public Cloneable<TransformerMLP> {
 public:
  TransformerMLP(int64_t n_embd, double dropout);
  TransformerMLP(std::shared_ptr<Module> c_fc, std::shared_ptr<Module> gelu, std::shared_ptr<Module> c_proj,
                 std::shared_ptr<Module> dropout, int64_t n_embd);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override;

 private:
  int64_t n_embd_;
};

class TransformerBlock : public Cloneable<TransformerBlock> {
 public:
  TransformerBlock(int64_t n_embd, int64_t n_head, double dropout);
  TransformerBlock(std::shared_ptr<Module> ln_1, std::shared_ptr<Module> attn, std::shared_ptr<Module> ln_2,
                   std::shared_ptr<Module> mlp);
  Tensor forward(const Tensor& x) override;  // (B, T, C) -> (B, T, C)
  std::string name() const override;
};

// The GPT's input layer, drop(wte(indices) + wpe(0 .. T-1)), over the GPT's own wte, wpe and drop
// (its children here); wte may be another module mapping ids to (*, C) (a tensor-parallel rank's
// VocabParallelEmbedding).
class GPTEmbedding : public Cloneable<GPTEmbedding> {
 public:
  GPTEmbedding(std::shared_ptr<Module> wte, std::shared_ptr<Embedding> wpe, std::shared_ptr<Dropout> drop);
  // indices (B, T) Int64 token ids, T at most wpe's rows -> (B, T, C).
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "GPTEmbedding"; }
};

class GPT : public Cloneable<GPT> {
 public:
  explicit GPT(const GPTConfig& config);
  // indices (B, T) Int64 token ids in [0, vocab_size), T <= context -> logits (B, T, V).
  Tensor forward(const Tensor& indices) override;
  std::string name() const override;
  const GPTConfig& config() const { return config_; }
  // Training FLOPs per token at full context, as PaLM (appendix B) and nanoGPT's estimate_mfu
  // count them: 6 N for the weights (N the parameters less wpe's: a multiply-add per weight
  // forward, two backward) plus 12 L C T for attention's QK^T and AV (forward and backward,
  // the causal mask not discounted).
  double flops_per_token() const;
  // The GPT as a Sequential of layers that share its modules: GPTEmbedding, the n_layer blocks
  // (each Recomputed while recompute() is on), ln_f, and the lm head, a TiedLinear over
  // wte.weight. forward() runs exactly these, so a pipeline that cuts them into stages
  // (parallel/pipeline/pipeline.h) computes what the GPT computes. Built afresh on each call.
  std::shared_ptr<Sequential> layers() const;
  // Recompute each block's activations in backward instead of keeping them (the header).
  void set_recompute(bool recompute) { recompute_ = recompute; }
  bool recompute() const { return recompute_; }

  // Continues `prompt` (token ids, at least one) by `tokens` sampled tokens, as nanoGPT's
  // generate: each step feeds the last `context` ids, scales the last position's logits by
  // 1 / temperature, keeps the top_k largest (0: all; ties with the k-th stay), and draws from
  // their softmax with one uniform from the global Philox generator (mg::manual_seed makes a
  // sample repeat). temperature 0 takes the most likely token and draws nothing. Returns the
  // prompt followed by the new ids; runs in eval mode without a tape.
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t tokens, double temperature,
                                int64_t top_k);

 private:
  GPTConfig config_;
  bool recompute_ = false;
};

// One draw of generate(): the token that the uniform u in [0, 1) picks from the logits, as above.
int64_t sample_token(const std::vector<double>& logits, double temperature, int64_t top_k, double u);

std::shared_ptr<GPT> gpt(const GPTConfig& config);

}  // namespace mg::nn
