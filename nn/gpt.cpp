// nn/gpt.cpp — the GPT of nn/gpt.h.
#include "multigrad/nn/gpt.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/nn/init.h"

namespace mg::nn {

using detail::str_cat;

namespace {

// GPT-2's initialisation: N(0, kInitStd) for weights (the residual projections scaled down).
constexpr double kInitStd = 0.02;
constexpr int64_t kMlpExpansion = 4;  // the MLP's hidden width, in multiples of n_embd

void init_linear(const Linear& layer, double std) {
  init::normal_(layer.weight(), 0.0, std);
  if (layer.bias().defined()) init::zeros_(layer.bias());
}

}  // namespace

GPTConfig gpt_config(const std::string& name, int64_t vocab_size) {
  GPTConfig c;
  c.vocab_size = vocab_size;
  if (name == "tiny") {
    c.context = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 16;
  } else if (name == "small") {
    c.context = 128, c.n_layer = 4, c.n_head = 4, c.n_embd = 128;
  } else if (name == "gpt2") {
    c.context = 1024, c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else {
    MG_ERROR("gpt_config: unknown config '", name, "' (expected tiny, small or gpt2)");
  }
  return c;
}

std::map<std::string, std::string> gpt_config_info(const GPTConfig& c) {
  char dropout[32];
  std::snprintf(dropout, sizeof dropout, "%.17g", c.dropout);
  return {{"gpt.vocab_size", std::to_string(c.vocab_size)}, {"gpt.context", std::to_string(c.context)},
          {"gpt.n_layer", std::to_string(c.n_layer)},       {"gpt.n_head", std::to_string(c.n_head)},
          {"gpt.n_embd", std::to_string(c.n_embd)},         {"gpt.dropout", dropout}};
}

GPTConfig gpt_config_from_info(const std::map<std::string, std::string>& info, const std::string& source) {
  const auto field = [&](const char* key) -> const std::string& {
    auto it = info.find(key);
    MG_CHECK(it != info.end(), source, ": no '", key, "' (is this a checkpoint of a GPT?)");
    return it->second;
  };
  const auto size = [&](const char* key) {
    const std::string& text = field(key);
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    MG_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && v > 0, source, ": '", key,
             "' is '", text, "', expected a positive integer");
    return v;
  };
  GPTConfig c;
  c.vocab_size = size("gpt.vocab_size"), c.context = size("gpt.context"), c.n_layer = size("gpt.n_layer");
  c.n_head = size("gpt.n_head"), c.n_embd = size("gpt.n_embd");
  const std::string& dropout = field("gpt.dropout");
  char* end = nullptr;
  c.dropout = std::strtod(dropout.c_str(), &end);
  MG_CHECK(!dropout.empty() && *end == '\0' && c.dropout >= 0 && c.dropout < 1, source, ": 'gpt.dropout' is '",
           dropout, "', expected a number in [0, 1)");
  return c;
}

int64_t gpt_parameter_count(const GPTConfig& c) {
  const long double C = (long double)c.n_embd;
  const long double n = (long double)c.vocab_size * C + (long double)c.context * C +
                        (long double)c.n_layer * (12.0L * C * C + 13.0L * C) + 2.0L * C;
  return n >= (long double)std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : int64_t(n);
}

void check_gpt_state(const GPTConfig& c, const StateDict& state, const std::string& source) {
  const auto shape_of = [&](const std::string& key) {
    const auto it = state.find(key);
    MG_CHECK(it != state.end(), source, ": the model state has no '", key, "' (is this a checkpoint of a GPT?)");
    return it->second.shape();
  };
  const Shape wte = shape_of("wte.weight"), wpe = shape_of("wpe.weight");
  MG_CHECK(wte == Shape({c.vocab_size, c.n_embd}), source, ": gpt.vocab_size ", c.vocab_size, " and gpt.n_embd ",
           c.n_embd, " do not match the tensor wte.weight of shape ", wte);
  MG_CHECK(wpe == Shape({c.context, c.n_embd}), source, ": gpt.context ", c.context, " and gpt.n_embd ", c.n_embd,
           " do not match the tensor wpe.weight of shape ", wpe);
  const std::string last = "h." + std::to_string(c.n_layer - 1) + ".ln_1.weight";
  const std::string beyond = "h." + std::to_string(c.n_layer) + ".ln_1.weight";
  MG_CHECK(state.count(last) == 1 && state.count(beyond) == 0, source, ": gpt.n_layer ", c.n_layer,
           " does not match the model state's blocks (", state.count(last) ? "it has more" : "it has fewer", ")");
}

CausalSelfAttention::CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout)
    : n_embd_(n_embd), n_head_(n_head), head_dim_(n_head > 0 ? n_embd / n_head : 0) {
  MG_CHECK(n_embd > 0 && n_head > 0 && n_embd % n_head == 0, "CausalSelfAttention: n_embd ", n_embd,
           " is not a positive multiple of n_head ", n_head);
  register_module("c_attn", std::make_shared<Linear>(n_embd, 3 * n_embd));
  register_module("c_proj", std::make_shared<Linear>(n_embd, n_embd));
  register_module("resid_dropout", std::make_shared<Dropout>(dropout));
}

CausalSelfAttention::CausalSelfAttention(std::shared_ptr<Module> c_attn, std::shared_ptr<Module> c_proj,
                                         std::shared_ptr<Module> resid_dropout, int64_t n_embd, int64_t heads,
                                         int64_t head_dim)
    : n_embd_(n_embd), n_head_(heads), head_dim_(head_dim) {
  register_module("c_attn", std::move(c_attn));
  register_module("c_proj", std::move(c_proj));
  register_module("resid_dropout", std::move(resid_dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  MG_CHECK(x.dim() == 3 && x.size(2) == n_embd_, name(), ": expected input (B, T, ", n_embd_, "), got ",
           x.shape());
  const int64_t width = n_head_ * head_dim_;  // C, or C / N
  const std::vector<Tensor> qkv = split((*child("c_attn"))(x), width, 2);  // 3 x (B, T, width)
  // The positions of c_attn's output: x's, or all of them when x holds a rank's sequence shard
  // (parallel/tensor/tensor_parallel.h, sequence parallelism).
  const int64_t batch = qkv[0].size(0), length = qkv[0].size(1);
  auto heads = [&](const Tensor& t) {                                       // (B, n_head, T, D)
    return transpose(reshape(t, {batch, length, n_head_, head_dim_}), 1, 2);
  };
  const Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), true);
  const Tensor merged = reshape(transpose(y, 1, 2), {batch, length, width});  // (B, T, width)
  return (*child("resid_dropout"))((*child("c_proj"))(merged));
}

std::string CausalSelfAttention::name() const {
  return str_cat("CausalSelfAttention(n_embd=", n_embd_, ", n_head=", n_head_, ")");
}

TransformerMLP::TransformerMLP(std::shared_ptr<Module> c_fc, std::shared_ptr<Module> gelu,
                               std::shared_ptr<Module> c_proj, std::shared_ptr<Module> dropout, int64_t n_embd)
    : n_embd_(n_embd) {
  register_module("c_fc", std::move(c_fc));
  register_module("gelu", std::move(gelu));
  register_module("c_proj", std::move(c_proj));
  register_module("dropout", std::move(dropout));
}

TransformerMLP::TransformerMLP(int64_t n_embd, double dropout) : n_embd_(n_embd) {
  register_module("c_fc", std::make_shared<Linear>(n_embd, kMlpExpansion * n_embd));
  register_module("gelu", std::make_shared<GELU>());
  register_module("c_proj", std::make_shared<Linear>(kMlpExpansion * n_embd, n_embd));
  register_module("dropout", std::make_shared<Dropout>(dropout));
}

Tensor TransformerMLP::forward(const Tensor& x) {
  Tensor h = x;
  for (const char* layer : {"c_fc", "gelu", "c_proj", "dropout"}) h = (*child(layer))(h);
  return h;
}

std::string TransformerMLP::name() const { return str_cat("TransformerMLP(n_embd=", n_embd_, ")"); }

TransformerBlock::TransformerBlock(int64_t n_embd, int64_t n_head, double dropout) {
  register_module("ln_1", std::make_shared<LayerNorm>(Shape{n_embd}));
  register_module("attn", std::make_shared<CausalSelfAttention>(n_embd, n_head, dropout));
  register_module("ln_2", std::make_shared<LayerNorm>(Shape{n_embd}));
  register_module("mlp", std::make_shared<TransformerMLP>(n_embd, dropout));
}

TransformerBlock::TransformerBlock(std::shared_ptr<Module> ln_1, std::shared_ptr<Module> attn,
                                   std::shared_ptr<Module> ln_2, std::shared_ptr<Module> mlp) {
  register_module("ln_1", std::move(ln_1));
  register_module("attn", std::move(attn));
  register_module("ln_2", std::move(ln_2));
  register_module("mlp", std::move(mlp));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  const Tensor h = x + (*child("attn"))((*child("ln_1"))(x));
  return h + (*child("mlp"))((*child("ln_2"))(h));
}

std::string TransformerBlock::name() const { return "TransformerBlock"; }

GPT::GPT(const GPTConfig& config) : config_(config) {
  const GPTConfig& c = config_;
  MG_CHECK(c.vocab_size > 0 && c.context > 0 && c.n_layer > 0, "GPT: vocab_size ", c.vocab_size, ", context ",
           c.context, " and n_layer ", c.n_layer, " must be positive");
  register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  register_module("wpe", std::make_shared<Embedding>(c.context, c.n_embd));
  register_module("drop", std::make_shared<Dropout>(c.dropout));
  auto blocks = std::make_shared<Sequential>();
  for (int64_t i = 0; i < c.n_layer; ++i) blocks->push_back(std::make_shared<TransformerBlock>(c.n_embd, c.n_head, c.dropout));
  register_module("h", blocks);
  register_module("ln_f", std::make_shared<LayerNorm>(Shape{c.n_embd}));

  // GPT-2's initialisation (the header), in registration order.
  const double residual_std = kInitStd / std::sqrt(2.0 * double(c.n_layer));
  init::normal_(child<Embedding>("wte")->weight(), 0.0, kInitStd);
  init::normal_(child<Embedding>("wpe")->weight(), 0.0, kInitStd);
  for (size_t i = 0; i < blocks->size(); ++i) {
    const auto block = std::dynamic_pointer_cast<TransformerBlock>(blocks->at(i));
    const auto attn = block->child<CausalSelfAttention>("attn");
    const auto mlp = block->child<TransformerMLP>("mlp");
    init_linear(*attn->child<Linear>("c_attn"), kInitStd);
    init_linear(*attn->child<Linear>("c_proj"), residual_std);
    init_linear(*mlp->child<Linear>("c_fc"), kInitStd);
    init_linear(*mlp->child<Linear>("c_proj"), residual_std);
  }
}

GPTEmbedding::GPTEmbedding(std::shared_ptr<Module> wte, std::shared_ptr<Embedding> wpe,
                           std::shared_ptr<Dropout> drop) {
  register_module("wte", std::move(wte));
  register_module("wpe", std::move(wpe));
  register_module("drop", std::move(drop));
}

Tensor GPTEmbedding::forward(const Tensor& indices) {
  MG_CHECK(indices.dim() == 2 && indices.dtype() == DType::Int64, "GPT: expected Int64 token ids (B, T), got ",
           indices.shape(), " ", indices.dtype());
  const int64_t length = indices.size(1), context = child<Embedding>("wpe")->weight().size(0);
  MG_CHECK(length <= context, "GPT: a sequence of ", length, " tokens is longer than the context of ", context);
  const Tensor positions = arange(length, {DType::Int64, indices.device()});  // (T)
  return (*child("drop"))((*child("wte"))(indices) + (*child("wpe"))(positions));  // (B, T, C)
}

std::shared_ptr<Sequential> GPT::layers() const {
  auto out = std::make_shared<Sequential>();
  const auto wte = child<Embedding>("wte");
  out->push_back(std::make_shared<GPTEmbedding>(wte, child<Embedding>("wpe"), child<Dropout>("drop")));
  for (const auto& block : child<Sequential>("h")->children())
    out->push_back(recompute_ ? std::make_shared<Recomputed>(block) : block);
  out->push_back(child("ln_f"));
  out->push_back(std::make_shared<TiedLinear>(wte, "weight"));  // logits (B, T, V)
  return out;
}

Tensor GPT::forward(const Tensor& indices) { return layers()->forward(indices); }

std::string GPT::name() const {
  const GPTConfig& c = config_;
  return str_cat("GPT(vocab_size=", c.vocab_size, ", context=", c.context, ", n_layer=", c.n_layer,
                 ", n_head=", c.n_head, ", n_embd=", c.n_embd, ")");
}

double GPT::flops_per_token() const {
  const GPTConfig& c = config_;
  int64_t weights = 0;
  for (const Tensor& p : parameters()) weights += p.numel();
  weights -= c.context * c.n_embd;  // wpe: looked up, not multiplied
  return 6.0 * double(weights) + 12.0 * double(c.n_layer * c.n_embd * c.context);
}

std::vector<int64_t> GPT::generate(const std::vector<int64_t>& prompt, int64_t tokens, double temperature,
                                   int64_t top_k) {
  MG_CHECK(!prompt.empty(), "GPT::generate: the prompt has no tokens (start from at least one)");
  MG_CHECK(tokens >= 0 && temperature >= 0 && top_k >= 0, "GPT::generate: tokens ", tokens, ", temperature ",
           temperature, " and top_k ", top_k, " must be >= 0");
  for (int64_t id : prompt)
    MG_CHECK(id >= 0 && id < config_.vocab_size, "GPT::generate: prompt token ", id, " is outside the vocabulary of ",
             config_.vocab_size);
  NoGradGuard no_grad;
  const bool was_training = is_training();
  eval();
  const Device device = child<Embedding>("wte")->weight().device();
  std::vector<int64_t> ids = prompt;
  for (int64_t i = 0; i < tokens; ++i) {
    const int64_t length = std::min<int64_t>(int64_t(ids.size()), config_.context);
    const std::vector<int64_t> window(ids.end() - length, ids.end());
    const Tensor logits = forward(tensor(window, {1, length}, {DType::Int64, device}));  // (1, T, V)
    const std::vector<double> last = slice(logits, 1, length - 1, length).to_vector<double>();
    const double u = temperature > 0 ? rand({1}, {.dtype = DType::Float64}).item<double>() : 0.0;
    ids.push_back(sample_token(last, temperature, top_k, u));
  }
  train(was_training);
  return ids;
}

int64_t sample_token(const std::vector<double>& logits, double temperature, int64_t top_k, double u) {
  MG_CHECK(!logits.empty(), "sample_token: no logits");
  const auto most_likely = std::max_element(logits.begin(), logits.end());
  if (temperature == 0) return int64_t(most_likely - logits.begin());
  // The k-th largest logit: those below it are out.
  double cut = -std::numeric_limits<double>::infinity();
  if (top_k > 0 && size_t(top_k) < logits.size()) {
    std::vector<double> sorted = logits;
    std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
    cut = sorted[size_t(top_k - 1)];
  }
  // softmax((l - max) / temperature) over those kept, then the first token whose running sum
  // passes u * total.
  std::vector<double> weight(logits.size(), 0.0);
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i)
    if (logits[i] >= cut) total += weight[i] = std::exp((logits[i] - *most_likely) / temperature);
  const double target = u * total;
  double running = 0;
  int64_t last_kept = 0;
  for (size_t i = 0; i < weight.size(); ++i) {
    if (weight[i] == 0) continue;
    running += weight[i];
    last_kept = int64_t(i);
    if (running > target) return last_kept;
  }
  return last_kept;  // u * total rounded up to the sum
}

std::shared_ptr<GPT> gpt(const GPTConfig& config) { return std::make_shared<GPT>(config); }

}  // namespace mg::nn
