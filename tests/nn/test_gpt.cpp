// nn::gpt (nn/gpt.cpp): the layout and names, the parameter count (GPT-2 124M's published
// 124,439,808), GPT-2's initialisation, causality (no logit sees a later token), argument
// errors, a tiny model that learns a repeating text, sampling (sample_token, generate), the
// config as a checkpoint's text fields, FLOPs per token, and recomputed blocks.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/cpu_devices_guard.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

int64_t count(const nn::Module& m) {
  int64_t n = 0;
  for (const Tensor& p : m.parameters()) n += p.numel();
  return n;
}

double std_of(const Tensor& t) {
  const std::vector<double> v = values(t);
  double mean = 0, sq = 0;
  for (double x : v) mean += x / double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean) / double(v.size());
  return std::sqrt(sq);
}

Tensor ids(const std::vector<int64_t>& v, int64_t batch) {
  return tensor(v, {batch, int64_t(v.size()) / batch}, {.dtype = DType::Int64});
}

}  // namespace

TEST_CASE("gpt: nanoGPT's parameter names, tied output weights, and the parameter count", "[nn][gpt]") {
  manual_seed(1);
  auto model = nn::gpt(nn::gpt_config("tiny", 256));
  std::vector<std::string> names;
  for (const auto& [name, t] : model->named_parameters()) names.push_back(name);
  const std::vector<std::string> first{"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
                                       "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "h.0.attn.c_proj.weight",
                                       "h.0.attn.c_proj.bias", "h.0.ln_2.weight", "h.0.ln_2.bias",
                                       "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias", "h.0.mlp.c_proj.weight",
                                       "h.0.mlp.c_proj.bias"};
  REQUIRE(names.size() == 2 + 12 * 2 + 2);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 14) == first);
  CHECK(names.back() == "ln_f.bias");
  // V C + T C + L (12 C^2 + 13 C) + 2 C: no separate lm_head.
  const int64_t v = 256, t = 16, c = 16, l = 2;
  CHECK(count(*model) == v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c);
}

TEST_CASE("gpt: the gpt2 config has GPT-2 124M's 124,439,808 parameters and nanoGPT's FLOPs per token", "[nn][gpt][count]") {
  nn::GPTConfig config = nn::gpt_config("gpt2", 50257);
  CHECK(config.context == 1024);
  const nn::GPT model(config);
  CHECK(count(model) == 124439808);
  // MFU's numerator as nanoGPT's estimate_mfu counts it: 6 N, N less wpe's 1024 x 768, plus
  // 12 L C T = 12 x 12 x 768 x 1024.
  CHECK(model.flops_per_token() == 6.0 * (124439808 - 1024 * 768) + 12.0 * 12 * 768 * 1024);
}

TEST_CASE("gpt: GPT-2's initialisation, residual projections scaled by 1/sqrt(2 n_layer)", "[nn][gpt]") {
  manual_seed(2);
  nn::GPT model({.vocab_size = 300, .context = 64, .n_layer = 3, .n_head = 4, .n_embd = 64});
  const double residual = 0.02 / std::sqrt(6.0);
  // Sample standard deviations of 4096+ draws: within 10% (about 4.5 standard errors).
  for (const auto& [name, p] : model.named_parameters()) {
    INFO(name);
    const bool weight = name.size() > 7 && name.substr(name.size() - 7) == ".weight";
    if (name.find("ln_") != std::string::npos) {
      CHECK(values(p) == std::vector<double>(size_t(p.numel()), weight ? 1.0 : 0.0));
    } else if (!weight) {
      CHECK(values(p) == std::vector<double>(size_t(p.numel()), 0.0));
    } else if (name.find("c_proj") != std::string::npos) {
      CHECK(std_of(p) == Approx(residual).epsilon(0.1));
    } else {
      CHECK(std_of(p) == Approx(0.02).epsilon(0.1));
    }
  }
}

TEST_CASE("gpt: logits (B, T, V), and no logit depends on a later token", "[nn][gpt]") {
  manual_seed(3);
  auto model = nn::gpt(nn::gpt_config("tiny", 50));
  const std::vector<int64_t> a{3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32};
  std::vector<int64_t> b = a;
  for (size_t i = 4; i < 6; ++i) b[i] = 49 - b[i];    // row 0 from position 4 on
  for (size_t i = 9; i < 12; ++i) b[i] = 49 - b[i];   // row 1 from position 3 on
  const Tensor la = model->forward(ids(a, 2)), lb = model->forward(ids(b, 2));
  REQUIRE(la.shape() == Shape{2, 6, 50});
  const std::vector<double> va = values(la), vb = values(lb);
  for (int64_t row = 0; row < 2; ++row)
    for (int64_t pos = 0; pos < 6; ++pos) {
      const int64_t changed_from = row == 0 ? 4 : 3;
      bool same = true;
      for (int64_t k = 0; k < 50; ++k) same = same && va[size_t((row * 6 + pos) * 50 + k)] == vb[size_t((row * 6 + pos) * 50 + k)];
      INFO("row " << row << ", position " << pos);
      CHECK(same == (pos < changed_from));  // earlier positions bit-identical, later ones not
    }
}

TEST_CASE("gpt: sequences longer than the context, and bad configs, are errors naming the sizes", "[nn][gpt]") {
  auto model = nn::gpt(nn::gpt_config("tiny", 10));
  require_error([&] { model->forward(zeros({1, 17}, {.dtype = DType::Int64})); }, {"17 tokens", "context of 16"});
  require_error([&] { model->forward(zeros({1, 4})); }, {"Int64 token ids", "Float32"});
  require_error([&] { model->forward(full({1, 4}, 10, {.dtype = DType::Int64})); }, {"10"});
  require_error([&] { nn::GPT({.vocab_size = 10, .context = 8, .n_layer = 1, .n_head = 3, .n_embd = 16}); },
                {"n_embd 16", "n_head 3"});
  require_error([&] { nn::gpt_config("medium", 10); }, {"'medium'", "tiny, small or gpt2"});
}

TEST_CASE("gpt: the tiny model learns a repeating text with AdamW", "[nn][gpt]") {
  manual_seed(4);
  auto model = nn::gpt(nn::gpt_config("tiny", 256));
  const std::string text = "the cat sat on the mat. the cat sat on the mat. the cat sat";
  std::vector<int64_t> x, y;
  for (size_t row = 0; row < 4; ++row)
    for (size_t i = 0; i < 16; ++i) {
      x.push_back(int64_t(uint8_t(text[row * 8 + i])));
      y.push_back(int64_t(uint8_t(text[row * 8 + i + 1])));
    }
  const Tensor inputs = ids(x, 4), targets = ids(y, 1).reshape({64});
  optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  auto loss_now = [&] { return cross_entropy(model->forward(inputs).reshape({64, 256}), targets); };
  const double first = loss_now().item<double>();
  CHECK(first == Approx(std::log(256.0)).epsilon(0.05));  // near-uniform predictions at init
  double last = first;
  for (int step = 0; step < 150; ++step) {
    opt.zero_grad();
    Tensor loss = loss_now();
    loss.backward();
    opt.step();
    last = loss.item<double>();
  }
  CHECK(last < 0.5);  // the text has about 14 distinct next characters; memorised, not guessed
}

TEST_CASE("sample_token: temperature 0 and top-k 1 take the most likely token, u walks the softmax", "[nn][gpt]") {
  const std::vector<double> logits = {0.0, std::log(3.0), 2.0, std::log(6.0)};  // weights 1, 3, e^2, 6
  CHECK(nn::sample_token(logits, 0.0, 0, 0.99) == 2);
  CHECK(nn::sample_token(logits, 5.0, 1, 0.99) == 2);
  // top-k 2 keeps tokens 2 and 3, with weights e^2 and 6: u below e^2 / (e^2 + 6) gives 2
  const double split = std::exp(2.0) / (std::exp(2.0) + 6.0);
  CHECK(nn::sample_token(logits, 1.0, 2, split - 1e-9) == 2);
  CHECK(nn::sample_token(logits, 1.0, 2, split + 1e-9) == 3);
  CHECK(nn::sample_token(logits, 1.0, 2, 0.0) == 2);
  // all tokens at temperature 1: the running sums 1, 4, 4 + e^2, 10 + e^2 over the total
  const double total = 10.0 + std::exp(2.0);
  CHECK(nn::sample_token(logits, 1.0, 0, 0.5 / total) == 0);
  CHECK(nn::sample_token(logits, 1.0, 0, 3.5 / total) == 1);
  CHECK(nn::sample_token(logits, 1.0, 0, 1.0 - 1e-12) == 3);
  // temperature 2 halves the logits: weights 1, sqrt 3, e, sqrt 6
  const double t2 = 1.0 + std::sqrt(3.0) + std::exp(1.0) + std::sqrt(6.0);
  CHECK(nn::sample_token(logits, 2.0, 0, (1.0 + std::sqrt(3.0) - 1e-9) / t2) == 1);
  CHECK(nn::sample_token(logits, 2.0, 0, (1.0 + std::sqrt(3.0) + 1e-9) / t2) == 2);
  // top-k of ties keeps every tie with the k-th: with two equal tokens and k 1 both can come
  CHECK(nn::sample_token({1.0, 1.0, 0.0}, 1.0, 1, 0.75) == 1);
}

TEST_CASE("gpt: generate continues a prompt, repeats with the seed, and slides past the context", "[nn][gpt]") {
  manual_seed(3);
  auto model = nn::gpt(nn::gpt_config("tiny", 256));
  const std::vector<int64_t> prompt(20, 'a');  // longer than the context of 16
  manual_seed(11);
  const std::vector<int64_t> first = model->generate(prompt, 12, 1.0, 0);
  manual_seed(11);
  const std::vector<int64_t> again = model->generate(prompt, 12, 1.0, 0);
  manual_seed(12);
  const std::vector<int64_t> other = model->generate(prompt, 12, 1.0, 0);
  REQUIRE(first.size() == 32);
  CHECK(std::equal(prompt.begin(), prompt.end(), first.begin()));
  CHECK(first == again);
  CHECK(first != other);  // 12 near-uniform draws over 256 bytes
  // greedy: each new token is the argmax of the last position over the last 16 ids
  const std::vector<int64_t> greedy = model->generate(prompt, 3, 0.0, 0);
  std::vector<int64_t> window(greedy.end() - 17, greedy.end() - 1);
  NoGradGuard no_grad;
  model->eval();
  const std::vector<double> logits = values(model->forward(ids(window, 1)));
  const std::vector<double> last(logits.end() - 256, logits.end());
  CHECK(greedy.back() == int64_t(std::max_element(last.begin(), last.end()) - last.begin()));
  model->train();
  model->generate(prompt, 1, 0.0, 0);
  CHECK(model->is_training());  // generate runs in eval mode and puts the mode back
  require_error([&] { model->generate({}, 3, 1.0, 0); }, {"generate", "no tokens"});
  require_error([&] { model->generate({300}, 3, 1.0, 0); }, {"token 300", "vocabulary of 256"});
  require_error([&] { model->generate(prompt, 3, -1.0, 0); }, {"temperature -1"});
}

TEST_CASE("gpt: a config survives gpt_config_info, missing or bad fields are errors naming them", "[nn][gpt]") {
  nn::GPTConfig c = nn::gpt_config("small", 300);
  c.dropout = 0.1;
  const std::map<std::string, std::string> info = nn::gpt_config_info(c);
  const nn::GPTConfig back = nn::gpt_config_from_info(info, "f.safetensors");
  CHECK(back.vocab_size == 300);
  CHECK(back.context == c.context);
  CHECK(back.n_layer == c.n_layer);
  CHECK(back.n_head == c.n_head);
  CHECK(back.n_embd == c.n_embd);
  CHECK(back.dropout == 0.1);
  std::map<std::string, std::string> bad = info;
  bad.erase("gpt.n_head");
  require_error([&] { nn::gpt_config_from_info(bad, "f.safetensors"); }, {"f.safetensors", "no 'gpt.n_head'"});
  bad = info;
  bad["gpt.n_layer"] = "4x";
  require_error([&] { nn::gpt_config_from_info(bad, "f.safetensors"); }, {"'gpt.n_layer' is '4x'", "positive integer"});
  bad = info;
  bad["gpt.dropout"] = "1.5";
  require_error([&] { nn::gpt_config_from_info(bad, "f.safetensors"); }, {"'gpt.dropout' is '1.5'"});
}

TEST_CASE("gpt: recomputed blocks give bit-identical gradients and a lower peak memory", "[nn][gpt][checkpoint]") {
  const nn::GPTConfig config{.vocab_size = 64, .context = 32, .n_layer = 6, .n_head = 2, .n_embd = 32, .dropout = 0.1};
  manual_seed(8);
  auto model = nn::gpt(config);
  std::vector<int64_t> x, y;
  for (int64_t i = 0; i < 4 * 32; ++i) x.push_back((i * 37 + 11) % 64), y.push_back((i * 23 + 5) % 64);
  const Tensor inputs = ids(x, 4), targets = ids(y, 1).reshape({4 * 32});
  const Device cpu("cpu:0");
  // One step's gradients, and the most memory it held beyond what was live before it.
  auto step = [&](bool recompute) {
    model->set_recompute(recompute);
    for (const Tensor& p : model->parameters()) p.set_grad(Tensor());
    manual_seed(9);  // the same dropout masks on both runs
    const int64_t before = memory_stats(cpu).allocated;
    reset_peak_memory_stats(cpu);
    {
      const Tensor loss = cross_entropy(model->forward(inputs).reshape({4 * 32, 64}), targets);
      loss.backward();
    }
    const int64_t peak = memory_stats(cpu).peak - before;
    std::vector<std::vector<float>> grads;
    for (const Tensor& p : model->parameters()) grads.push_back(p.grad().to_vector<float>());
    return std::make_pair(grads, peak);
  };
  const auto [plain, plain_peak] = step(false);
  const auto [recomputed, recomputed_peak] = step(true);
  CHECK(recomputed == plain);
  INFO("peak beyond the parameters: " << plain_peak << " bytes plain, " << recomputed_peak << " recomputed");
  // The plain step holds every block's activations at the end of the forward; the recomputed
  // one the six blocks' inputs (B, T, C) and one block's activations at a time, each of which
  // is many times (B, T, C) (attention's (B, H, T, T) twice, the MLP's (B, T, 4C) several times).
  CHECK(recomputed_peak < plain_peak / 2);
}

// What one transformer block keeps for backward, in units of a (rows, C) float32 tensor. In
// float32: its two LN outputs (held by the linears that read them: 2), c_attn's output (3; q, k, v
// are views of it), the attention's output (1; the merged heads are a view of it), the residual
// sum (1, ln_2's input), c_fc's output (4, GELU's input), GELU's (4, c_proj's input) and the
// block's output (1, the caller's): 16. Under bf16 autocast the bf16 values backward keeps are
// stored in BFloat16 (autograd/autocast.h): the LN outputs, q, k, v, the merged heads (c_proj's),
// GELU's input and output, and the attention's output rounded (its own) at half size (7.5); the
// residual sum and the block's output in float32 (2): 9.5. Besides: the rows' statistics and,
// under bf16, the weights' bf16 copies, under half a unit at this size. fp16 likewise (Float16).
TEST_CASE("gpt: a transformer block under bf16 or fp16 autocast keeps those activations in two bytes",
          "[nn][gpt][autocast]") {
  test::CpuDevicesGuard guard(2);
  const Device device("cpu:1");
  constexpr int64_t batch = 32, length = 128, width = 128;
  manual_seed(3);
  auto block = std::make_shared<nn::TransformerBlock>(width, 4, 0.0);
  block->to(device);
  const Tensor x = randn({batch, length, width}, {.device = device}).requires_grad_();
  const double unit = double(batch * length * width * 4);
  const auto kept = [&](Precision precision) {
    const int64_t before = memory_stats(device).allocated;
    AutocastGuard autocast(precision);
    const Tensor out = block->forward(x);
    return double(memory_stats(device).allocated - before) / unit;
  };
  const double fp32 = kept(Precision::Float32), bf16 = kept(Precision::BFloat16), fp16 = kept(Precision::Float16);
  INFO("units kept: float32 " << fp32 << ", bf16 " << bf16 << ", fp16 " << fp16);
  CHECK(fp32 >= 16);
  CHECK(fp32 < 16.5);
  CHECK(bf16 >= 9.5);
  CHECK(bf16 < 10);
  CHECK(fp16 >= 9.5);
  CHECK(fp16 < 10);
}

TEST_CASE("gpt: layers() are the embeddings, the blocks, ln_f and the tied head, over the GPT's own tensors",
          "[nn][gpt]") {
  manual_seed(2);
  auto model = nn::gpt(nn::gpt_config("tiny", 32));
  const auto layers = model->layers();
  REQUIRE(layers->size() == 2 + 3);
  CHECK(layers->at(0)->name() == "GPTEmbedding");
  CHECK(layers->at(1)->name() == "TransformerBlock");
  CHECK(layers->at(4)->name() == "TiedLinear(Embedding(32, 16).weight)");
  // The same parameter tensors in the same order: an optimizer over either trains both.
  const std::vector<Tensor> mine = model->parameters(), theirs = layers->parameters();
  REQUIRE(theirs.size() == mine.size());
  for (size_t i = 0; i < mine.size(); ++i) CHECK(theirs[i].is_same(mine[i]));
  model->set_recompute(true);
  CHECK(model->layers()->at(1)->name() == "Recomputed(TransformerBlock)");
  CHECK(model->layers()->parameters().size() == mine.size());
}
