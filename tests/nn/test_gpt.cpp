// nn::gpt (nn/gpt.cpp): the layout and names, the parameter count (GPT-2 124M's published
// 124,439,808), GPT-2's initialisation, causality (no logit sees a later token), argument
// errors, and a tiny model that learns a repeating text.
#include <cmath>
#include <string>
#include <vector>

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

TEST_CASE("gpt: the gpt2 config has GPT-2 124M's 124,439,808 parameters", "[nn][gpt][count]") {
  nn::GPTConfig config = nn::gpt_config("gpt2", 50257);
  CHECK(config.context == 1024);
  CHECK(count(nn::GPT(config)) == 124439808);
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
