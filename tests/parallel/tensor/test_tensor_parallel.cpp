// tests/parallel/tensor/test_tensor_parallel.cpp — Megatron's tensor parallelism (parallel/
// tensor_parallel.h) on the local backend: the conjugate operators f and g, forward and backward;
// an MLP split over 2 and 4 ranks against the same MLP on one device, its output and every
// gradient within the rounding bound the header derives, propagated layer by layer; a GPT split
// by heads and a CNN split in its classifier against the one-device models in float64; q, k, v
// parts; the errors.
//
// Rank threads only record; the test thread checks after run_ranks returns.
#include <cmath>

#include "core/cpu_devices_guard.h"
#include "parallel/parallel_test_util.h"
#include "multigrad/parallel/mesh.h"
#include "multigrad/parallel/pipeline/pipeline.h"
#include "multigrad/parallel/tensor/tensor_parallel.h"

using mg::Tensor;
using mg::parallel::Communicator;
using mg::parallel::run_ranks;
using namespace mg::test;

namespace {

Tensor f64(const Tensor& t) { return mg::to(t.detach().to(mg::Device("cpu:0")), mg::DType::Float64); }
Tensor mm(const Tensor& a, const Tensor& b) { return mg::matmul(a, b); }
Tensor tr(const Tensor& a) { return mg::transpose(a, 0, 1); }
// gamma_n of a float32 sum of n terms, twice: both orders lie within it of the exact sum.
double two_gamma(int64_t n) {
  const double u = std::ldexp(1.0, -24);
  return 2 * double(n) * u / (1 - double(n) * u);
}

// |got - want| <= bound, elementwise (all float64 on cpu:0).
void require_within(const Tensor& got, const Tensor& want, const Tensor& bound, const std::string& what) {
  INFO(what);
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = f64(got).to_vector<double>(), w = want.to_vector<double>(), b = bound.to_vector<double>();
  size_t worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (std::abs(g[i] - w[i]) - b[i] > std::abs(g[worst] - w[worst]) - b[worst]) worst = i;
  INFO("element " << worst << ": " << g[worst] << " vs " << w[worst] << ", bound " << b[worst]);
  CHECK(std::abs(g[worst] - w[worst]) <= b[worst]);
}

// Each parameter's gradient of tensor-parallel model `tp`, gathered whole from the ranks' shards,
// on cpu:0 (every rank calls it).
std::vector<Tensor> gathered_grads(const mg::nn::Module& tp, Communicator& comm) {
  const auto splits = mg::parallel::tensor_parallel_splits(tp);
  const std::vector<Tensor> params = tp.parameters();
  std::vector<Tensor> out;
  for (size_t k = 0; k < params.size(); ++k)
    out.push_back(mg::parallel::gather_shards(params[k].grad(), splits[k], comm).to(mg::Device("cpu:0")));
  return out;
}

// The parameters' bytes of each rank of one tensor-parallel group of 2 (cpu:0, cpu:1) made from
// `plain` and trained on `batches`, each as `parts` micro-batches accumulated (train_reference).
std::vector<std::vector<std::vector<unsigned char>>> tp_group_reference(const mg::nn::Sequential& plain,
                                                                        const std::vector<Batch>& batches, int64_t parts) {
  std::vector<std::vector<std::vector<unsigned char>>> out(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    const auto tp = mg::parallel::tensor_parallel_mlp(plain, comm);
    tp->to(comm.device());
    train_reference(*tp, batches_on(batches, comm.device()), parts);
    out[size_t(comm.rank())] = parameter_bytes(*tp);
  });
  return out;
}

}  // namespace

TEST_CASE("copy_to_tensor_parallel and reduce_from_tensor_parallel: identity one way, a sum over the ranks the other",
          "[parallel][tp]") {
  CpuDevicesGuard guard(2);
  std::vector<std::vector<double>> copied(2), copy_grad(2), reduced(2), reduce_grad(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    const size_t r = size_t(comm.rank());
    const double k = double(r + 1);
    Tensor x = mg::tensor(std::vector<double>{k, 2 * k}, {2}).to(comm.device());
    x.requires_grad_();
    const Tensor y = mg::parallel::copy_to_tensor_parallel(x, comm);
    mg::backward({y}, {mg::mul(mg::ones({2}, {.device = comm.device()}), 10 * k)});
    copied[r] = y.to_vector<double>(), copy_grad[r] = x.grad().to_vector<double>();
    Tensor z = mg::tensor(std::vector<double>{k, 2 * k}, {2}).to(comm.device());
    z.requires_grad_();
    const Tensor s = mg::parallel::reduce_from_tensor_parallel(z, comm);
    mg::backward({s}, {mg::mul(mg::ones({2}, {.device = comm.device()}), 10 * k)});
    reduced[r] = s.to_vector<double>(), reduce_grad[r] = z.grad().to_vector<double>();
  });
  CHECK(copied[0] == std::vector<double>{1, 2});
  CHECK(copied[1] == std::vector<double>{2, 4});
  for (size_t r = 0; r < 2; ++r) {
    CHECK(copy_grad[r] == std::vector<double>{30, 30});  // 10 + 20
    CHECK(reduced[r] == std::vector<double>{3, 6});
    CHECK(reduce_grad[r] == std::vector<double>(2, 10.0 * double(r + 1)));
  }
}

// Y = relu(relu(X A1^T + b1) A2^T + b2) A3^T + b3: A1 column-parallel, A2 row-parallel, A3 whole.
// The loss is sum(Y * G), so dY = G on both sides; every other difference is bounded from the
// one-device run's own values (float64 bounds): a Linear's output by |dx| |W|^T plus 2 gamma_K of
// (|x| + E_x) |W|^T + |b| (K its inner dimension plus the bias and the all-reduce's N-1 additions),
// a ReLU by its input's bound, and where a pre-activation lies within its bound of 0 the mask may
// differ, so the gradient there is bounded by its whole size.
TEST_CASE("a tensor-parallel MLP on 2 and 4 ranks: output and gradients within the rounding bound of one device's",
          "[parallel][tp]") {
  CpuDevicesGuard guard(4);
  const int64_t batch = 16;
  mg::manual_seed(5);
  const Tensor x = mg::randn({batch, 64}), g = mg::randn({batch, 10});
  for (int ranks : {2, 4}) {
    INFO(ranks << " ranks");
    mg::manual_seed(6);
    const auto plain = mg::nn::mlp({64, 128, 32, 10});
    // One device, with the values the bounds need.
    const auto ref = std::dynamic_pointer_cast<mg::nn::Sequential>(plain->clone());
    const Tensor z1 = ref->at(0)->forward(x), h1 = mg::relu(z1), z2 = ref->at(2)->forward(h1), h2 = mg::relu(z2);
    const Tensor y = ref->at(4)->forward(h2);
    mg::sum(mg::mul(y, g)).backward();
    const auto w = [&](size_t layer) { return f64(ref->at(layer)->parameters()[0]); };
    const auto grad = [&](size_t layer, size_t k) { return f64(ref->at(layer)->parameters()[k].grad()); };

    const Tensor X = f64(x), G = f64(g), A1 = w(0), A2 = w(2), A3 = w(4);
    const Tensor Z1 = f64(z1), H1 = f64(h1), Z2 = f64(z2), H2 = f64(h2);
    const auto abs = [](const Tensor& t) { return mg::abs(t); };
    const auto linear_bound = [&](const Tensor& in, const Tensor& in_bound, const Tensor& weight, size_t layer,
                                  int64_t k) {
      const Tensor scale = mg::add(mm(mg::add(abs(in), in_bound), tr(abs(weight))), abs(f64(ref->at(layer)->parameters()[1])));
      return mg::add(mm(in_bound, tr(abs(weight))), mg::mul(scale, two_gamma(k + ranks)));
    };
    const Tensor zero_x = mg::zeros_like(X);
    const Tensor E_z1 = linear_bound(X, zero_x, A1, 0, 64);
    const Tensor E_z2 = linear_bound(H1, E_z1, A2, 2, 128);  // relu keeps the bound
    const Tensor E_y = linear_bound(H2, E_z2, A3, 4, 32);
    // Backward from dY = G.
    const Tensor dH2 = mm(G, A3), E_dh2 = mg::mul(mm(abs(G), abs(A3)), two_gamma(10));
    const auto mask_bound = [](const Tensor& z, const Tensor& e_z, const Tensor& dh, const Tensor& e_dh) {
      return mg::where(mg::le(mg::abs(z), e_z), mg::add(mg::abs(dh), e_dh), e_dh);
    };
    const Tensor dZ2 = mg::mul(dH2, mg::to(mg::gt(Z2, 0.0), mg::DType::Float64));
    const Tensor E_dz2 = mask_bound(Z2, E_z2, dH2, E_dh2);
    const Tensor dH1 = mm(dZ2, A2), E_dh1 = mg::add(mm(E_dz2, abs(A2)), mg::mul(mm(mg::add(abs(dZ2), E_dz2), abs(A2)), two_gamma(32)));
    const Tensor dZ1 = mg::mul(dH1, mg::to(mg::gt(Z1, 0.0), mg::DType::Float64));
    const Tensor E_dz1 = mask_bound(Z1, E_z1, dH1, E_dh1);
    // Weight gradients dW = dZ^T h: |dZ|^T E_h + E_dZ^T (|h| + E_h), plus the rounding of the batch sum.
    const auto weight_bound = [&](const Tensor& dz, const Tensor& e_dz, const Tensor& h, const Tensor& e_h) {
      const Tensor spread = mm(tr(mg::add(abs(dz), e_dz)), mg::add(abs(h), e_h));
      return mg::add(mg::add(mm(tr(abs(dz)), e_h), mm(tr(e_dz), mg::add(abs(h), e_h))), mg::mul(spread, two_gamma(batch)));
    };
    const auto bias_bound = [&](const Tensor& dz, const Tensor& e_dz) {
      return mg::add(mg::sum(e_dz, {0}), mg::mul(mg::sum(mg::add(abs(dz), e_dz), {0}), two_gamma(batch)));
    };
    const Tensor E_dA3 = weight_bound(G, mg::zeros_like(G), H2, E_z2), E_db3 = bias_bound(G, mg::zeros_like(G));
    const Tensor E_dA2 = weight_bound(dZ2, E_dz2, H1, E_z1), E_db2 = bias_bound(dZ2, E_dz2);
    const Tensor E_dA1 = weight_bound(dZ1, E_dz1, X, zero_x), E_db1 = bias_bound(dZ1, E_dz1);

    // Tensor parallel: each rank its shards, the same batch.
    std::vector<Tensor> outputs(static_cast<size_t>(ranks));
    std::vector<std::vector<Tensor>> grads(static_cast<size_t>(ranks));
    std::vector<std::string> names(static_cast<size_t>(ranks));
    run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
      const auto tp = mg::parallel::tensor_parallel_mlp(*plain, comm);
      tp->to(comm.device());
      const Tensor out = tp->forward(x.to(comm.device()));
      mg::sum(mg::mul(out, g.to(comm.device()))).backward();
      outputs[size_t(comm.rank())] = out.detach();
      for (const Tensor& p : tp->parameters()) grads[size_t(comm.rank())].push_back(p.grad());
      names[size_t(comm.rank())] = tp->at(0)->name() + " " + tp->at(2)->name() + " " + tp->at(4)->name();
    });
    const std::string of = "rank 1 of " + std::to_string(ranks) + ")";
    CHECK(names[1] == "ColumnParallelLinear(in_features=64, out_features=128, bias=true, " + of +
                          " RowParallelLinear(in_features=128, out_features=32, bias=true, " + of +
                          " Linear(in_features=32, out_features=10, bias=true)");
    const int64_t c1 = 128 / ranks;
    for (int r = 0; r < ranks; ++r) {
      INFO("rank " << r);
      const auto& gr = grads[size_t(r)];
      const int64_t b = r * c1, e = (r + 1) * c1;
      require_within(outputs[size_t(r)], f64(y), E_y, "output");
      require_within(gr[0], grad(0, 0).slice(0, b, e), E_dA1.slice(0, b, e), "column-parallel weight");
      require_within(gr[1], grad(0, 1).slice(0, b, e), E_db1.slice(0, b, e), "column-parallel bias");
      require_within(gr[2], grad(2, 0).slice(1, b, e), E_dA2.slice(1, b, e), "row-parallel weight");
      require_within(gr[3], grad(2, 1), E_db2, "row-parallel bias");
      require_within(gr[4], grad(4, 0), E_dA3, "whole last weight");
      require_within(gr[5], grad(4, 1), E_db3, "whole last bias");
    }
  }
}

// A GPT split by heads and MLP features (tensor_parallel_gpt) computes the one-device GPT's function:
// in float64 the split sums differ from the whole ones by float64 rounding only, about 1e-16 of
// the terms' magnitudes per sum; through two blocks, attention's softmax and the loss that stays
// far below 1e-10 of each tensor's largest value. A head or a q/k/v slice taken from the wrong
// place, a missing all-reduce or a gradient summed twice moves values by their own size. The same
// with sequence parallelism (the layer norms, residuals and embeddings' output on sequence shards):
// a position taken from the wrong rank, a layer norm's gradient not summed over the ranks, or a
// gathered gradient summed where it should be cut fails it alike.
// With dropout: every rank draws from a generator of its own that starts at the launcher's state
// (run_ranks), so the whole tensors' masks are one device's on every rank, and sequence
// parallelism's ranks each draw their positions of one device's mask: a mask from another rank's
// positions, or a rank's generator shared with the others, moves values by their own size.
TEST_CASE("a tensor-parallel GPT on 2 and 4 ranks, with and without sequence parallelism, computes the one-device "
          "GPT's logits and gradients, dropout included", "[parallel][tp][gpt]") {
  CpuDevicesGuard guard(4);
  const mg::nn::GPTConfig config{.vocab_size = 24, .context = 8, .n_layer = 2, .n_head = 4, .n_embd = 16,
                                 .dropout = 0.25};
  mg::manual_seed(12);
  auto plain = mg::nn::gpt(config);
  plain->to(mg::DType::Float64);
  std::vector<int64_t> ids, next;
  for (int64_t i = 0; i < 3 * 8; ++i) ids.push_back((i * 7 + 3) % 24), next.push_back((i * 5 + 1) % 24);
  const Tensor x = mg::tensor(ids, {3, 8}, {.dtype = mg::DType::Int64});
  const Tensor y = mg::tensor(next, {3, 8}, {.dtype = mg::DType::Int64});
  mg::manual_seed(99);  // the masks' draws, here and on every rank below
  const Tensor logits = plain->forward(x);
  mg::cross_entropy_flat(logits, y).backward();
  const std::vector<Tensor> want_grads = plain->layers()->parameters();
  const auto within = [](const Tensor& got, const Tensor& want, const std::string& what) {
    double scale = 0;
    for (double v : want.to_vector<double>()) scale = std::max(scale, std::abs(v));
    require_within(got, want, mg::full(want.shape(), 1e-10 * scale, {.dtype = mg::DType::Float64}), what);
  };
  struct Case {
    int ranks;
    bool sequence_parallel, vocab_parallel;
  };
  for (const Case c : {Case{2, false, false}, {4, false, false}, {2, true, false}, {4, true, false}, {2, false, true},
                       {4, true, true}}) {
    const int ranks = c.ranks;
    const bool sequence_parallel = c.sequence_parallel;
    std::vector<Tensor> got_logits(static_cast<size_t>(ranks));
    std::vector<std::vector<Tensor>> got_grads(static_cast<size_t>(ranks));
    std::vector<std::string> names(static_cast<size_t>(ranks));
    mg::manual_seed(99);
    run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
      const auto mine = std::dynamic_pointer_cast<mg::nn::GPT>(plain->clone());  // each rank its own
      mine->to(comm.device());
      const auto tp = mg::parallel::tensor_parallel_gpt(*mine, comm, {c.sequence_parallel, c.vocab_parallel});
      names[size_t(comm.rank())] = tp->at(0)->name() + " " + tp->at(3)->name();
      const Tensor out = tp->forward(x.to(comm.device()));
      if (c.vocab_parallel) {  // this rank's columns of the logits
        mg::parallel::vocab_parallel_cross_entropy(out.reshape({-1, out.size(2)}), y.flatten().to(comm.device()), comm)
            .backward();
        got_logits[size_t(comm.rank())] = mg::parallel::gather_shards(out, {2}, comm).to(mg::Device("cpu:0"));
      } else {
        mg::cross_entropy_flat(out, y.to(comm.device())).backward();
        got_logits[size_t(comm.rank())] = out.detach().to(mg::Device("cpu:0"));
      }
      got_grads[size_t(comm.rank())] = gathered_grads(*tp, comm);
    });
    const std::string of = "rank 1 of " + std::to_string(ranks) + ")";
    const std::string whole = "GPTEmbedding LayerNorm([16], eps=1e-05, elementwise_affine=true)";
    CHECK(names[1] == (sequence_parallel ? "SequenceParallelEmbedding(" + of +
                                               " SequenceParallelLayerNorm([16], eps=1e-05, gathered output, " + of
                                         : whole));
    for (int r = 0; r < ranks; ++r) {
      INFO(ranks << " ranks, rank " << r << (sequence_parallel ? ", sequence parallel" : "")
                 << (c.vocab_parallel ? ", vocabulary parallel" : ""));
      within(got_logits[size_t(r)], logits.detach(), "logits");
      REQUIRE(got_grads[size_t(r)].size() == want_grads.size());
      for (size_t k = 0; k < want_grads.size(); ++k)
        within(got_grads[size_t(r)][k], want_grads[k].grad(), "gradient " + std::to_string(k));
    }
  }
  const auto errors = rank_errors(run_ranks, cpu_devices(3), [&](Communicator& comm) {
    mg::parallel::tensor_parallel_gpt(*std::dynamic_pointer_cast<mg::nn::GPT>(plain->clone()), comm);
  });
  require_contains(errors[0], {"tensor_parallel_gpt: 4 attention heads do not split among 3 ranks"});
}

// The CNN under tensor parallelism: tensor_parallel_mlp splits its classifier's Linear pair and
// keeps the convolutions, batch norms and pools whole on every rank, which computes them on the
// whole batch. In float64, against the one-device CNN, with the GPT's bound above: a shard taken
// from the wrong rows, or a replicated layer whose gradient misses the classifier's all-reduced
// input gradient, moves values by their own size.
TEST_CASE("a tensor-parallel CNN (its classifier split) on 2 and 4 ranks computes the one-device CNN's output and "
          "gradients", "[parallel][tp]") {
  CpuDevicesGuard guard(4);
  mg::manual_seed(13);
  const auto plain = mg::nn::fashion_cnn();
  plain->to(mg::DType::Float64);
  const Tensor x = mg::to(mg::randn({4, 1, 28, 28}), mg::DType::Float64);
  const Tensor y = mg::tensor(std::vector<int64_t>{3, 1, 4, 1}, {4}, {.dtype = mg::DType::Int64});
  const auto ref = std::dynamic_pointer_cast<mg::nn::Sequential>(plain->clone());
  const Tensor want = ref->forward(x);
  mg::cross_entropy(want, y).backward();
  const std::vector<Tensor> want_params = ref->parameters();
  const auto within = [](const Tensor& got, const Tensor& w, const std::string& what) {
    double scale = 0;
    for (double v : w.to_vector<double>()) scale = std::max(scale, std::abs(v));
    require_within(got, w, mg::full(w.shape(), 1e-10 * scale, {.dtype = mg::DType::Float64}), what);
  };
  for (int ranks : {2, 4}) {
    std::vector<Tensor> outputs(static_cast<size_t>(ranks));
    std::vector<std::vector<Tensor>> grads(static_cast<size_t>(ranks));
    run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
      const auto tp = mg::parallel::tensor_parallel_mlp(*plain, comm);
      tp->to(comm.device());
      const Tensor out = tp->forward(x.to(comm.device()));
      mg::cross_entropy(out, y.to(comm.device())).backward();
      outputs[size_t(comm.rank())] = out.detach().to(mg::Device("cpu:0"));
      grads[size_t(comm.rank())] = gathered_grads(*tp, comm);
    });
    for (int r = 0; r < ranks; ++r) {
      INFO(ranks << " ranks, rank " << r);
      within(outputs[size_t(r)], want.detach(), "output");
      REQUIRE(grads[size_t(r)].size() == want_params.size());
      for (size_t k = 0; k < want_params.size(); ++k)
        within(grads[size_t(r)][k], want_params[k].grad(), "gradient " + std::to_string(k));
    }
  }
}

// The vocabulary split across the ranks: the embedding and the cross-entropy over split logits
// compute the whole ones' values and gradients (float64: the split sums differ by rounding only,
// the same bound as the GPT's above). An id or a target on another rank's rows, a missing
// all-reduce or a one-hot in the wrong columns changes values by their own size.
TEST_CASE("vocabulary-parallel embedding and cross-entropy on 2 and 3 ranks equal the whole ones",
          "[parallel][tp][vocab]") {
  CpuDevicesGuard guard(3);
  mg::manual_seed(21);
  mg::nn::Embedding table(12, 5);
  table.to(mg::DType::Float64);
  std::vector<int64_t> ids, next;
  for (int64_t i = 0; i < 14; ++i) ids.push_back((i * 5 + 2) % 12), next.push_back((i * 7 + 3) % 12);
  const Tensor x = mg::tensor(ids, {2, 7}, {.dtype = mg::DType::Int64});
  const Tensor y = mg::tensor(next, {14}, {.dtype = mg::DType::Int64});
  const Tensor logits = mg::randn({14, 12}, {.dtype = mg::DType::Float64, .requires_grad = true});
  const Tensor embedded = table.forward(x);
  const Tensor d_embedded = mg::randn({2, 7, 5}, {.dtype = mg::DType::Float64});
  mg::backward({embedded}, {d_embedded});
  const Tensor loss = mg::cross_entropy(logits, y);
  loss.backward();
  const auto within = [](const Tensor& got, const Tensor& want, const std::string& what) {
    double scale = 0;
    for (double v : want.to_vector<double>()) scale = std::max(scale, std::abs(v));
    require_within(got, want, mg::full(want.shape(), 1e-12 * scale, {.dtype = mg::DType::Float64}), what);
  };
  for (int ranks : {2, 3}) {
    const auto n = static_cast<size_t>(ranks);
    std::vector<Tensor> got_embedded(n), got_table_grad(n), got_loss(n), got_logits_grad(n);
    run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
      const mg::Device cpu0("cpu:0"), mine = comm.device();
      auto whole = std::dynamic_pointer_cast<mg::nn::Embedding>(table.clone());
      whole->to(mine);
      mg::parallel::VocabParallelEmbedding split(*whole, comm);
      const Tensor out = split.forward(x.to(mine));
      mg::backward({out}, {d_embedded.to(mine)});
      Tensor shard = mg::parallel::shard_of(logits.detach().to(mine), {1}, comm);
      shard.requires_grad_(true);
      const Tensor l = mg::parallel::vocab_parallel_cross_entropy(shard, y.to(mine), comm);
      l.backward();
      const size_t r = size_t(comm.rank());
      got_embedded[r] = out.detach().to(cpu0);
      got_table_grad[r] = mg::parallel::gather_shards(split.parameter("weight").grad(), {0}, comm).to(cpu0);
      got_loss[r] = l.detach().to(cpu0);
      got_logits_grad[r] = mg::parallel::gather_shards(shard.grad(), {1}, comm).to(cpu0);
    });
    for (int r = 0; r < ranks; ++r) {
      INFO(ranks << " ranks, rank " << r);
      within(got_embedded[size_t(r)], embedded.detach(), "embedding");
      within(got_table_grad[size_t(r)], table.weight().grad(), "embedding's weight gradient");
      within(got_loss[size_t(r)], loss.detach(), "loss");
      within(got_logits_grad[size_t(r)], logits.grad(), "logits' gradient");
    }
  }
  const auto errors = rank_errors(run_ranks, cpu_devices(2), [&](Communicator& comm) {
    const Tensor shard = mg::zeros({2, 6}, {.dtype = mg::DType::Float64, .device = comm.device()});
    const Tensor targets = mg::tensor(std::vector<int64_t>{3, 12}, {2}, {.dtype = mg::DType::Int64}).to(comm.device());
    mg::parallel::vocab_parallel_cross_entropy(shard, targets, comm);
  });
  require_contains(errors[0], {"vocab_parallel_cross_entropy: a target is outside [0, 12)"});
}

// vocab_parallel_argmax against argmax over the whole rows, with ties inside a rank's columns and
// across ranks (the lowest index wins, as argmax's), on 2 and 3 ranks.
TEST_CASE("vocab_parallel_argmax picks the whole row's first largest logit", "[parallel][tp]") {
  CpuDevicesGuard guard(3);
  // 4 rows of 12: a plain maximum, a tie across ranks' shards, a tie inside one shard, all equal.
  const std::vector<double> v = {0, 1, 5, 2, 0, 0, 0, 0, 3, 0, 0, 0,   //
                                 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 7,   //
                                 0, 0, 0, 0, 0, 0, 4, 4, 0, 0, 0, 0,   //
                                 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const Tensor logits = mg::tensor(v, {4, 12}, {.dtype = mg::DType::Float64});
  const std::vector<int64_t> want = mg::argmax(logits, -1).to_vector<int64_t>();
  REQUIRE(want == std::vector<int64_t>{2, 7, 6, 0});
  for (int ranks : {2, 3}) {
    std::vector<std::vector<int64_t>> got(static_cast<size_t>(ranks));
    run_ranks(cpu_devices(ranks), [&](Communicator& comm) {
      const Tensor shard = mg::parallel::shard_of(logits.to(comm.device()), {1}, comm);
      got[size_t(comm.rank())] = mg::parallel::vocab_parallel_argmax(shard, comm).to_vector<int64_t>();
    });
    for (int r = 0; r < ranks; ++r) CHECK(got[size_t(r)] == want);
  }
}

// The fused q, k, v projection's shards: rank r's rows are its slice of each of q, k and v, and
// gathering them gives the whole weight back.
TEST_CASE("a column-parallel layer in parts holds its slice of each part and gathers back whole", "[parallel][tp]") {
  CpuDevicesGuard guard(2);
  mg::manual_seed(3);
  const mg::nn::Linear full(2, 12);  // 3 parts of 4 rows: rank r holds rows 2r, 2r+1 of each
  std::vector<Tensor> shards(2), gathered(2);
  run_ranks(cpu_devices(2), [&](Communicator& comm) {
    const auto mine = std::dynamic_pointer_cast<mg::nn::Linear>(full.clone());
    mine->to(comm.device());
    const mg::parallel::ColumnParallelLinear column(*mine, comm, 3);
    shards[size_t(comm.rank())] = column.parameter("weight").to(mg::Device("cpu:0"));
    gathered[size_t(comm.rank())] =
        mg::parallel::gather_shards(column.parameter("weight"), {0, 3}, comm).to(mg::Device("cpu:0"));
  });
  const std::vector<double> w = values(full.weight());
  for (int r = 0; r < 2; ++r) {
    std::vector<double> want;
    for (int part = 0; part < 3; ++part)
      for (int row = part * 4 + 2 * r; row < part * 4 + 2 * r + 2; ++row)
        want.insert(want.end(), {w[size_t(2 * row)], w[size_t(2 * row + 1)]});
    CHECK(values(shards[size_t(r)]) == want);
    CHECK(values(gathered[size_t(r)]) == w);
  }
}

TEST_CASE("tensor-parallel layers: features that do not split among the ranks are a clear error", "[parallel][tp]") {
  CpuDevicesGuard guard(3);
  const auto errors = rank_errors(run_ranks, cpu_devices(3), [](Communicator& comm) {
    mg::parallel::ColumnParallelLinear bad(mg::nn::Linear(4, 8), comm);
  });
  require_contains(errors[0], {"ColumnParallelLinear: 8 output features do not split among 3 ranks"});
  const auto row = rank_errors(run_ranks, cpu_devices(3), [](Communicator& comm) {
    mg::parallel::RowParallelLinear bad(mg::nn::Linear(4, 8), comm);
  });
  require_contains(row[0], {"RowParallelLinear: 4 input features do not split among 3 ranks"});
}

// dp x tp on a 2 x 2 DeviceMesh: DDP over the dp dimension wraps each tensor-parallel replica,
// dp rank d computing micro-batch d of each batch. With deterministic sums the tp ranks end
// bit-identical to one tp group of 2 accumulating the same two micro-batches in order: the
// composition adds no difference of its own (tensor parallelism's own is bounded above).
TEST_CASE("dp x tp 2x2 on a DeviceMesh equals one tp group accumulating the dp micro-batches, bit for bit",
          "[parallel][tp][mesh]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, 3, 12);
  mg::manual_seed(6);
  const auto plain = mg::nn::mlp({12, 16, 8, 3});
  // One tp group: each batch as 2 micro-batches, accumulated.
  const std::vector<std::vector<std::vector<unsigned char>>> want = tp_group_reference(*plain, batches, 2);
  // The mesh: ranks [[0, 1], [2, 3]]; dp groups {0, 2} and {1, 3}.
  std::vector<std::vector<std::vector<unsigned char>>> got(4);
  std::vector<int> tp_rank(4);
  run_ranks(cpu_devices(4), [&](Communicator& comm) {
    const mg::parallel::DeviceMesh mesh(comm, {{"dp", 2}, {"tp", 2}});
    const auto tp = mg::parallel::tensor_parallel_mlp(*plain, mesh.comm("tp"));
    tp->to(comm.device());
    mg::parallel::DistributedDataParallel ddp(tp, mesh.comm("dp"), {.reduce_op = mg::parallel::ReduceOp::Sum});
    mg::optim::SGD sgd = make_sgd(ddp);
    for (const Batch& b : batches) {
      sgd.zero_grad();
      const auto m = mg::parallel::split_batch(b.inputs.size(0), 2)[size_t(mesh.coordinate("dp"))];
      scaled_loss(ddp.forward(b.inputs.slice(0, m.begin, m.end).to(comm.device())),
                  b.targets.slice(0, m.begin, m.end).to(comm.device()), b.inputs.size(0))
          .backward();
      sgd.step();
    }
    got[size_t(comm.rank())] = parameter_bytes(*tp);
    tp_rank[size_t(comm.rank())] = mesh.coordinate("tp");
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ", tp rank " << tp_rank[size_t(r)]);
    CHECK(tp_rank[size_t(r)] == r % 2);
    CHECK(got[size_t(r)] == want[size_t(tp_rank[size_t(r)])]);
  }
  CHECK(want[0] != want[1]);  // the shards differ
}

// tp x pp 2x2: a pipeline of 2 stages (over the pp dimension, 1F1B, 4 micro-batches) whose stages
// are tensor-parallel groups of 2. Stage 0 runs the split pair (ColumnParallelLinear, ReLU,
// RowParallelLinear), its tp collectives between the two ranks of stage 0; stage 1 the rest. It
// ends bit-identical to one tp group accumulating the 4 micro-batches.
TEST_CASE("tp x pp 2x2 on a DeviceMesh equals one tp group accumulating the micro-batches, bit for bit",
          "[parallel][tp][mesh]") {
  CpuDevicesGuard guard(4);
  DeterministicScope deterministic(true);
  const auto batches = make_batches(ModelKind::Mlp, 3, 12);
  mg::manual_seed(6);
  const auto plain = mg::nn::mlp({12, 16, 8, 3});
  const auto want = tp_group_reference(*plain, batches, 4);
  std::vector<std::vector<std::vector<unsigned char>>> got(4);
  std::vector<int> tp_rank(4);
  run_ranks(cpu_devices(4), [&](Communicator& comm) {
    const mg::parallel::DeviceMesh mesh(comm, {{"pp", 2}, {"tp", 2}});
    const auto tp = mg::parallel::tensor_parallel_mlp(*plain, mesh.comm("tp"));
    tp->to(comm.device());
    mg::parallel::Pipeline pipeline(tp, mesh.comm("pp"), {.schedule = "1f1b", .micro_batches = 4, .cuts = {3}});
    mg::optim::SGD sgd = make_sgd(*tp);
    for (const Batch& b : batches) {
      sgd.zero_grad();
      pipeline.step(b.inputs, b.targets);
      sgd.step();
    }
    pipeline.synchronize_parameters();
    got[size_t(comm.rank())] = parameter_bytes(*tp);
    tp_rank[size_t(comm.rank())] = mesh.coordinate("tp");
  });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << ", tp rank " << tp_rank[size_t(r)]);
    CHECK(got[size_t(r)] == want[size_t(tp_rank[size_t(r)])]);
  }
}
