// tests/optim/test_param_groups.cpp — parameter groups (optim/optimizer.h): a group's weight
// decay replaces the optimizer's for its parameters and nothing else; groups survive
// state_dict / load_state_dict; bad groups are errors naming the group.
#include <catch2/catch.hpp>

#include <vector>

#include "multigrad/optim/adam.h"
#include "multigrad/optim/sgd.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

// A GPT's kinds of parameter: a matrix, a bias, an embedding table, a norm's weight.
std::vector<Tensor> mixed_params() {
  return {tensor(pseudo_random(6, 1), {2, 3}, {.requires_grad = true}),
          tensor(pseudo_random(3, 2), {3}, {.requires_grad = true}),
          tensor(pseudo_random(8, 3), {4, 2}, {.requires_grad = true}),
          tensor(pseudo_random(2, 4), {2}, {.requires_grad = true})};
}

std::vector<Tensor> copies(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

void set_grads(const std::vector<Tensor>& params, int t) {
  for (size_t i = 0; i < params.size(); ++i)
    params[i].set_grad(tensor(pseudo_random(size_t(params[i].numel()), uint64_t(10 * t + i)), params[i].shape()));
}

// Three steps of `opts` (each over its own parameters), the gradients of step t set on all.
template <typename Opt>
void run(std::vector<Opt*> opts, const std::vector<std::vector<Tensor>*>& params) {
  for (int t = 0; t < 3; ++t) {
    for (auto* p : params) set_grads(*p, t);
    for (Opt* o : opts) o->step();
  }
}

}  // namespace

TEST_CASE("weight_decay_groups: parameters of 2 or more dimensions decay, the rest do not", "[optim]") {
  std::vector<Tensor> params = mixed_params();
  std::vector<optim::ParamGroup> groups = optim::weight_decay_groups(params, 0.1);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].weight_decay == 0.1);
  REQUIRE(groups[0].params.size() == 2);
  CHECK(groups[0].params[0].is_same(params[0]));
  CHECK(groups[0].params[1].is_same(params[2]));
  CHECK(groups[1].weight_decay == 0.0);
  REQUIRE(groups[1].params.size() == 2);
  CHECK(groups[1].params[0].is_same(params[1]));
  CHECK(groups[1].params[1].is_same(params[3]));
  // no empty group: vectors only give one
  CHECK(optim::weight_decay_groups({params[1], params[3]}, 0.1).size() == 1);
}

TEST_CASE("AdamW: two parameter groups update as two optimizers with their weight decays", "[optim]") {
  std::vector<Tensor> grouped = mixed_params();
  std::vector<Tensor> matrices = {grouped[0].detach().clone().requires_grad_(true),
                                  grouped[2].detach().clone().requires_grad_(true)};
  std::vector<Tensor> vectors = {grouped[1].detach().clone().requires_grad_(true),
                                 grouped[3].detach().clone().requires_grad_(true)};
  std::vector<Tensor> all_decay = copies(grouped);
  const optim::AdamWOptions options{.lr = 0.05, .weight_decay = 0.5};
  optim::AdamW with_groups(optim::weight_decay_groups(grouped, 0.5), options);
  CHECK(with_groups.num_groups() == 2);
  CHECK(with_groups.params().size() == 4);
  optim::AdamW decay(matrices, options);
  optim::AdamW no_decay(vectors, {.lr = 0.05, .weight_decay = 0});
  optim::AdamW everything(all_decay, options);
  run<optim::AdamW>({&with_groups}, {&grouped});
  // the gradients depend on the position in the list: set them on the same positions
  for (int t = 0; t < 3; ++t) {
    std::vector<Tensor> order = {matrices[0], vectors[0], matrices[1], vectors[1]};
    set_grads(order, t);
    decay.step();
    no_decay.step();
  }
  run<optim::AdamW>({&everything}, {&all_decay});
  CHECK(values(grouped[0]) == values(matrices[0]));
  CHECK(values(grouped[2]) == values(matrices[1]));
  CHECK(values(grouped[1]) == values(vectors[0]));
  CHECK(values(grouped[3]) == values(vectors[1]));
  // the groups mattered: decaying the vectors too moves them elsewhere, the matrices not
  CHECK(values(all_decay[0]) == values(grouped[0]));
  CHECK(values(all_decay[1]) != values(grouped[1]));
}

TEST_CASE("SGD: a group's weight decay replaces the optimizer's for its parameters only", "[optim]") {
  std::vector<Tensor> grouped = mixed_params();
  std::vector<Tensor> plain = copies(grouped);
  // group 1 sets nothing, so it keeps the optimizer's 0.2
  optim::SGD with_groups(std::vector<optim::ParamGroup>{{.params = {grouped[0], grouped[1]}, .weight_decay = 0.0},
                                                        {.params = {grouped[2], grouped[3]}}},
                         {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.2});
  optim::SGD reference(plain, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.2});
  run<optim::SGD>({&with_groups}, {&grouped});
  run<optim::SGD>({&reference}, {&plain});
  CHECK(values(grouped[0]) != values(plain[0]));
  CHECK(values(grouped[1]) != values(plain[1]));
  CHECK(values(grouped[2]) == values(plain[2]));
  CHECK(values(grouped[3]) == values(plain[3]));
}

TEST_CASE("parameter groups: state_dict records them and a resumed run continues bit-identically", "[optim]") {
  std::vector<Tensor> params = mixed_params();
  optim::AdamW opt(optim::weight_decay_groups(params, 0.3), {.lr = 0.02});
  set_grads(params, 0);
  opt.step();
  optim::OptimizerState state = opt.state_dict();
  CHECK(state.options.at("groups") == 2);
  CHECK(state.options.at("group.0.size") == 2);
  CHECK(state.options.at("group.0.weight_decay") == 0.3);
  CHECK(state.options.at("group.1.weight_decay") == 0.0);
  std::vector<Tensor> resumed = copies(params);
  // made with other weight decays: load_state_dict restores the saved ones
  optim::AdamW opt2(optim::weight_decay_groups(resumed, 0.9), {.lr = 0.02});
  opt2.load_state_dict(state);
  for (int t = 1; t < 3; ++t) {
    set_grads(params, t);
    opt.step();
    set_grads(resumed, t);
    opt2.step();
  }
  for (size_t i = 0; i < params.size(); ++i) CHECK(values(params[i]) == values(resumed[i]));
  // an optimizer without groups writes no group entries
  optim::AdamW plain(copies(params));
  CHECK(plain.state_dict().options.count("groups") == 0);
}

TEST_CASE("parameter groups: bad groups and mismatched states are errors naming the group", "[optim]") {
  std::vector<Tensor> p = mixed_params();
  require_error([&] { optim::AdamW({{.params = {p[0]}}, {.params = {p[1]}, .weight_decay = -1.0}}); },
                {"AdamW", "invalid weight_decay -1", "parameter group 1"});
  require_error([&] { optim::SGD({{.params = {p[0], p[1]}}, {.params = {p[2], p[0]}}}); },
                {"SGD", "parameter 3 (group 1", "appears twice"});
  require_error([&] { optim::Adam(std::vector<optim::ParamGroup>{{}, {}}); }, {"Adam", "empty parameter list"});

  optim::AdamW two(optim::weight_decay_groups(p, 0.1));
  set_grads(p, 0);
  two.step();
  const optim::OptimizerState good = two.state_dict();
  optim::AdamW one(copies(p));
  require_error([&] { one.load_state_dict(good); }, {"AdamW.load_state_dict", "2 parameter groups", "the optimizer 1"});
  std::vector<Tensor> q = copies(p);
  optim::AdamW regrouped({{.params = {q[0]}, .weight_decay = 0.1}, {.params = {q[1], q[2], q[3]}}});
  require_error([&] { regrouped.load_state_dict(good); },
                {"parameter group 0 has 2 parameters in the state, 1 in the optimizer"});
  optim::OptimizerState bad = good;
  bad.options["group.1.weight_decay"] = -0.5;
  require_error([&] { two.load_state_dict(bad); }, {"invalid weight_decay -0.5 in parameter group 1"});
  bad = good;
  bad.options.erase("group.1.size");
  require_error([&] { two.load_state_dict(bad); }, {"missing option 'group.1.size'"});
  // the failed loads changed nothing
  CHECK(two.state_dict().options == good.options);
}
