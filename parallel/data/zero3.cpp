// parallel/data/zero3.cpp — ZeRO stage 3's layers: each layer's unit gathered just before its
// forward and again at the start of its backward, the next one prefetched, and released after
// (zero.h, "Stage 3").
#include <string>

#include "multigrad/parallel/data/zero_units.h"

namespace mg::parallel {

namespace {

// Stage 3's model() (zero.h): the layers, child by child, each unit gathered for its child. A unit
// whose weight a later layer uses stays gathered from its forward until its own backward has
// made its gradients final (FSDP keeps such a weight in its root unit).
class ShardedLayers : public nn::Cloneable<ShardedLayers> {
 public:
  ShardedLayers(std::shared_ptr<nn::Sequential> layers, std::shared_ptr<ZeroUnits> units, LayerUnits cut)
      : units_(std::move(units)), cut_(std::move(cut)) {
    register_module("module", std::move(layers));
  }

  Tensor forward(const Tensor& input) override {
    const auto& layers = named_children()[0].second->named_children();
    Tensor x = input;
    for (size_t c = 0; c < layers.size(); ++c) {
      const int unit = cut_.unit_of_child[c];
      if (unit < 0) {
        x = layers[c].second->forward(x);
        continue;
      }
      units_->gather(size_t(unit));
      if (unit > 0) units_->start_gather(size_t(unit - 1));  // the next child's
      x = layers[c].second->forward(x);
      if (!cut_.shared[size_t(unit)]) units_->release(size_t(unit));
      if (any_requires_grad({&x})) x = gathered_in_backward(x, size_t(unit));
    }
    // Without a backward to come (evaluation), the shared units go too.
    if (!any_requires_grad({&x}))
      for (size_t unit = 0; unit < cut_.shared.size(); ++unit)
        if (cut_.shared[unit]) units_->release(unit);
    return x;
  }
  std::string name() const override { return "ZeroStage3(" + named_children()[0].second->name() + ")"; }

 private:
  // x as an identity op whose backward gathers the unit before the child's own nodes run.
  Tensor gathered_in_backward(const Tensor& x, size_t unit) const {
    const Tensor out = x.detach();
    std::weak_ptr<ZeroUnits> weak = units_;
    record("zero3_gather", {out}, {x}, [weak, unit](const TensorList& grads) {
      if (auto units = weak.lock()) units->before_backward(unit);
      return grads;
    }, Saves::None);
    return out;
  }

  std::shared_ptr<ZeroUnits> units_;
  LayerUnits cut_;
};

}  // namespace

LayerUnits layer_units(const nn::Sequential& layers, const std::vector<Tensor>& params, const char* name) {
  LayerUnits cut;
  std::vector<int> child_of(params.size(), -1);
  std::vector<size_t> shared_children;  // the layers whose weight a later one uses
  const auto index_of = [&](const Tensor& p) {  // params.size(): none
    size_t k = 0;
    while (k < params.size() && params[k].unsafe_impl() != p.unsafe_impl()) ++k;
    return k;
  };
  for (size_t c = 0; c < layers.size(); ++c) {
    const auto child = layers.at(c);
    if (const auto tied = std::dynamic_pointer_cast<nn::TiedLinear>(child)) {
      const size_t k = index_of(tied->owner_weight());
      MG_CHECK(k < params.size() && child_of[k] >= 0, name, ": layer ", c, " (", child->name(),
               ") uses a weight of no earlier layer");
      shared_children.push_back(size_t(child_of[k]));
    }
    std::vector<size_t> mine;
    for (const Tensor& p : child->parameters()) {
      const size_t k = index_of(p);
      MG_CHECK(k < params.size(), name, ": a parameter of layer ", c, " (", child->name(), ", shape ", p.shape(),
               ") is in no parameter group");
      MG_CHECK(child_of[k] < 0, name, ": parameter ", k, " (shape ", p.shape(), ") is in layers ", child_of[k], " and ",
               c, "; stage 3 does not support shared parameters");
      child_of[k] = int(c);
      mine.push_back(k);
    }
    if (!mine.empty()) cut.members.push_back(std::move(mine));
  }
  for (size_t k = 0; k < params.size(); ++k)
    MG_CHECK(child_of[k] >= 0, name, ": parameter ", k, " (shape ", params[k].shape(), ") is in no layer");
  cut.unit_of_child.assign(layers.size(), -1);
  int unit = int(cut.members.size());
  for (size_t c = 0; c < layers.size(); ++c)
    if (!layers.at(c)->parameters().empty()) cut.unit_of_child[c] = --unit;
  cut.shared.assign(cut.members.size(), false);
  for (size_t c : shared_children) cut.shared[size_t(cut.unit_of_child[c])] = true;
  return cut;
}

std::shared_ptr<nn::Module> sharded_layers(std::shared_ptr<nn::Sequential> layers, std::shared_ptr<ZeroUnits> units,
                                           LayerUnits cut) {
  return std::make_shared<ShardedLayers>(std::move(layers), std::move(units), std::move(cut));
}

}  // namespace mg::parallel
