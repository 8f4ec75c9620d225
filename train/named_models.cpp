// train/named_models.cpp — models by name and from checkpoints (train/named_models.h).
#include "multigrad/train/named_models.h"

#include "multigrad/nn/models.h"

namespace mg::train {

std::shared_ptr<nn::Module> build_model(const std::string& name, const nn::GPTConfig& config) {
  if (name == "mlp") return nn::mlp(kMlpWidths);
  if (name == "cnn") return nn::fashion_cnn();
  MG_CHECK(name == "gpt", "no model named '", name, "' (mlp, cnn, gpt)");
  return nn::gpt(config);
}

std::unique_ptr<data::Tokenizer> checkpoint_tokenizer(const std::map<std::string, std::string>& info,
                                                      const std::string& path) {
  const auto name = info.find("tokenizer");
  const std::string tokenizer = name == info.end() ? "" : name->second;
  if (tokenizer == "bytes") return std::make_unique<data::ByteTokenizer>();
  const auto merges = info.find("bpe_merges");
  MG_CHECK(tokenizer == "bpe", path, ": tokenizer '", tokenizer, "' is not one this multigrad knows (bytes, bpe)");
  MG_CHECK(merges != info.end(), path, ": its tokenizer is bpe but it holds no bpe_merges");
  return std::make_unique<data::BpeTokenizer>(data::BpeTokenizer::from_text(merges->second, path + " (bpe_merges)"));
}

std::shared_ptr<nn::Module> checkpoint_model(const io::Checkpoint& ck, const std::string& path, const Device& device) {
  const auto model = ck.info.find("model");
  MG_CHECK(model != ck.info.end() && (model->second == "mlp" || model->second == "cnn" || model->second == "gpt"),
           path, ": its info names ",
           model == ck.info.end() ? std::string("no model") : "the model '" + model->second + "'",
           ", not one of multigrad train's (mlp, cnn, gpt)");
  std::shared_ptr<nn::Module> net;
  if (model->second == "gpt") {
    const nn::GPTConfig config = nn::gpt_config_from_info(ck.info, path);
    nn::check_gpt_state(config, ck.model_state, path);  // before allocating what the info describes
    net = build_model("gpt", config);
  } else {
    net = build_model(model->second);
  }
  net->load_state_dict(ck.model_state);
  net->to(device);
  return net;
}

}  // namespace mg::train
