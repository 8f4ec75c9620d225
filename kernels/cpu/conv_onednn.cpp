// kernels/cpu/conv_onednn.cpp — float32 conv2d through oneDNN (see conv_onednn.h).
#include "multigrad/kernels/cpu/conv_onednn.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "multigrad/core/deterministic.h"
#include "multigrad/core/device.h"
#include "multigrad/core/error.h"
#include "multigrad/kernels/cpu/isa.h"

#if MG_WITH_ONEDNN
#include "multigrad/kernels/cpu/onednn.h"
#endif

namespace mg::kernels::cpu {

namespace {
std::atomic<CpuConvAlgorithm> conv_algorithm{CpuConvAlgorithm::Auto};
}  // namespace

void set_cpu_conv_algorithm(CpuConvAlgorithm algorithm) { conv_algorithm.store(algorithm); }
CpuConvAlgorithm cpu_conv_algorithm() { return conv_algorithm.load(); }

#if MG_WITH_ONEDNN

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// oneDNN's instruction sets (dnnl_get_effective_cpu_isa) by the level their kernels use.
struct OnednnIsa {
  dnnl_cpu_isa_t isa;
  const char* name;
  IsaLevel level;
};
constexpr OnednnIsa kIsas[] = {
    {dnnl_cpu_isa_sse41, "SSE4.1", IsaLevel::Sse3},
    {dnnl_cpu_isa_avx, "AVX", IsaLevel::Avx},
    {dnnl_cpu_isa_avx2, "AVX2", IsaLevel::Avx2},
    {dnnl_cpu_isa_avx2_vnni, "AVX2 VNNI", IsaLevel::Avx2},
    {dnnl_cpu_isa_avx512_core, "AVX-512", IsaLevel::Avx512},
    {dnnl_cpu_isa_avx512_core_vnni, "AVX-512 VNNI", IsaLevel::Avx512},
    {dnnl_cpu_isa_avx512_core_bf16, "AVX-512 BF16", IsaLevel::Avx512Bf16},
    {dnnl_cpu_isa_avx512_core_amx, "AMX", IsaLevel::Avx512Bf16},
};

ConvLibrary describe_library() {
  ConvLibrary lib;
  const dnnl_version_t* v = dnnl_version();
  lib.name = detail::str_cat("oneDNN ", v->major, ".", v->minor, ".", v->patch);
  const dnnl_cpu_isa_t effective = dnnl_get_effective_cpu_isa();
  IsaLevel level = IsaLevel::Unknown;
  lib.isa = "an unknown instruction set";
  for (const OnednnIsa& i : kIsas)
    if (i.isa == effective) lib.isa = i.name, level = i.level;
  const IsaLevel cpu = cpu_isa_level();
  if (level != IsaLevel::Unknown && cpu != IsaLevel::Unknown && level < cpu) {
    std::string cap;  // the variable that capped oneDNN, as "NAME=value"
    for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"})
      if (const char* value = std::getenv(name); value != nullptr && cap.empty()) cap = detail::str_cat(name, "=", value);
    lib.warning = detail::str_cat("oneDNN runs its ", lib.isa, " convolution kernels",
                                  cap.empty() ? "" : detail::str_cat(" (", cap, ")"),
                                  " on a CPU with ", isa_level_name(cpu),
                                  ", so float32 convolutions run slower than they could");
  }
  return lib;
}

// A convolution's sizes in oneDNN's terms. Weights of a grouped convolution are
// (groups, O / groups, C / groups, kH, kW): the same memory as (O, C / groups, kH, kW).
struct ConvDims {
  memory::dims src, weights, dst, bias, strides, dilates, pad_l, pad_r;
  Tag weights_tag;
};

// oneDNN's backward kernels pad the input channels of a group up to their vector block (8 floats
// for AVX2, 16 for AVX-512) and compute the padding too; below one block of 8 that waste beat its
// speed-up here: with 1 or 2 input channels both backwards took 1.5-3x im2col's time, with 3 they
// were mixed, from 8 up faster (benchmarks/NOTES.md). Forward reads a plain input and wins at 1.
constexpr int64_t kBackwardMinChannels = 8;

// nullopt when oneDNN does not take the call (conv_onednn.h: which path runs).
std::optional<ConvDims> taken(const Tensor& input, const Tensor& weight, const Tensor& out, const Conv2dParams& p,
                              bool backward, std::initializer_list<const Tensor*> tensors) {
  if (cpu_conv_algorithm() != CpuConvAlgorithm::Auto || is_deterministic()) return std::nullopt;
  if (backward && weight.size(1) < kBackwardMinChannels) return std::nullopt;
  for (const Tensor* t : tensors)
    if (t->defined() && (t->dtype() != DType::Float32 || t->numel() == 0)) return std::nullopt;
  const int64_t N = input.size(0), C = input.size(1), H = input.size(2), W = input.size(3);
  const int64_t O = weight.size(0), kH = weight.size(2), kW = weight.size(3), G = p.groups;
  const int64_t oH = out.size(2), oW = out.size(3);
  ConvDims d;
  d.src = {N, C, H, W};
  d.dst = {N, O, oH, oW};
  d.bias = {O};
  d.weights = G == 1 ? memory::dims{O, C, kH, kW} : memory::dims{G, O / G, C / G, kH, kW};
  d.weights_tag = G == 1 ? Tag::oihw : Tag::goihw;
  d.strides = {p.stride[0], p.stride[1]};
  d.dilates = {p.dilation[0] - 1, p.dilation[1] - 1};  // oneDNN counts the gaps: 0 is none
  d.pad_l = {p.padding[0], p.padding[1]};
  // The right padding that gives kernels/conv.h's floor-divided output size; where the floor
  // drops input rows it would be negative, which oneDNN's kernels are not asked to handle.
  d.pad_r = {(oH - 1) * p.stride[0] + (kH - 1) * p.dilation[0] + 1 - H - p.padding[0],
             (oW - 1) * p.stride[1] + (kW - 1) * p.dilation[1] + 1 - W - p.padding[1]};
  if (d.pad_r[0] < 0 || d.pad_r[1] < 0) return std::nullopt;
  static const bool warned = [] {
    if (!conv_library().warning.empty()) std::fprintf(stderr, "multigrad: warning: %s\n", conv_library().warning.c_str());
    return true;
  }();
  (void)warned;
  return d;
}

memory::desc any(const memory::dims& dims) { return memory::desc(dims, memory::data_type::f32, Tag::any); }

// A tensor's float32 data as oneDNN memory in a plain layout.
memory user_memory(const Tensor& t, const memory::dims& dims, Tag tag) {
  return memory(memory::desc(dims, memory::data_type::f32, tag), onednn_engine(),
                const_cast<float*>(t.data<float>()));
}

// A primitive descriptor, or nullopt when oneDNN has no implementation for the call.
template <class Pd, class Make>
std::optional<Pd> primitive_desc(Make&& make) {
  try {
    return make();
  } catch (const dnnl::error&) {
    return std::nullopt;
  }
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The forward descriptor: the convolution itself, and the hint oneDNN's backward descriptors need.
dnnl::convolution_forward::primitive_desc forward_desc(const ConvDims& d, bool bias) {
  using dnnl::algorithm, dnnl::prop_kind;
  const auto desc =
      bias ? dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, any(d.src),
                                             any(d.weights), memory::desc(d.bias, memory::data_type::f32, Tag::x),
                                             any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r)
           : dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, any(d.src),
                                             any(d.weights), any(d.dst), d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), onednn_engine());
}

// One execution of a primitive: inputs reordered into the layouts it chose, outputs computed in
// its layouts and reordered back into the caller's tensors; every buffer, the scratchpad
// included, a tensor of the device.
class Execution {
 public:
  explicit Execution(const Device& device) : device_(device), stream_(onednn_engine()) {}

  void input(int arg, memory user, const memory::desc& want) {
    if (user.get_desc() == want) {
      args_.emplace(arg, user);
      return;
    }
    memory m = buffer(want);
    dnnl::reorder(user, m).execute(stream_, user, m);
    args_.emplace(arg, m);
  }
  void output(int arg, memory user, const memory::desc& want) {
    if (user.get_desc() == want) {
      args_.emplace(arg, user);
      return;
    }
    memory m = buffer(want);
    args_.emplace(arg, m);
    write_back_.emplace_back(m, user);
  }
  void run(const dnnl::primitive& primitive, const memory::desc& scratchpad) {
    args_.emplace(DNNL_ARG_SCRATCHPAD, buffer(scratchpad));
    primitive.execute(stream_, args_);
    for (auto& [from, to] : write_back_) dnnl::reorder(from, to).execute(stream_, from, to);
    stream_.wait();
  }

 private:
  memory buffer(const memory::desc& desc) {
    const int64_t floats = std::max<int64_t>(1, int64_t((desc.get_size() + sizeof(float) - 1) / sizeof(float)));
    keep_.push_back(Tensor::empty({floats}, {.dtype = DType::Float32, .device = device_}));
    return memory(desc, onednn_engine(), keep_.back().data<float>());
  }

  Device device_;
  dnnl::stream stream_;
  std::vector<Tensor> keep_;
  std::unordered_map<int, memory> args_;
  std::vector<std::pair<memory, memory>> write_back_;
};

// Runs `body`, turning a oneDNN failure during execution into an error naming the op.
template <class Body>
bool executed(const char* op, Body&& body) {
  try {
    body();
  } catch (const dnnl::error& e) {
    MG_ERROR(op, ": oneDNN failed: ", e.what());
  }
  return true;
}

}  // namespace

const ConvLibrary& conv_library() {
  static const ConvLibrary lib = describe_library();
  return lib;
}

bool onednn_conv2d_forward(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& out,
                           const Conv2dParams& p) {
  const std::optional<ConvDims> d = taken(input, weight, out, p, false, {&input, &weight, &bias, &out});
  if (!d) return false;
  const OmpThreads threads(cpu_thread_budget(input.device()));
  const auto pd = primitive_desc<dnnl::convolution_forward::primitive_desc>([&] { return forward_desc(*d, bias.defined()); });
  if (!pd) return false;
  return executed("conv2d", [&] {
    Execution e(input.device());
    e.input(DNNL_ARG_SRC, user_memory(input, d->src, Tag::nchw), pd->src_desc());
    e.input(DNNL_ARG_WEIGHTS, user_memory(weight, d->weights, d->weights_tag), pd->weights_desc());
    if (bias.defined()) e.input(DNNL_ARG_BIAS, user_memory(bias, d->bias, Tag::x), pd->bias_desc());
    e.output(DNNL_ARG_DST, user_memory(out, d->dst, Tag::nchw), pd->dst_desc());
    e.run(dnnl::convolution_forward(*pd), pd->scratchpad_desc());
  });
}

bool onednn_conv2d_backward_input(const Tensor& grad_out, const Tensor& weight, const Tensor& grad_input,
                                  const Conv2dParams& p) {
  const std::optional<ConvDims> d = taken(grad_input, weight, grad_out, p, true, {&grad_out, &weight, &grad_input});
  if (!d) return false;
  const OmpThreads threads(cpu_thread_budget(grad_out.device()));
  const auto pd = primitive_desc<dnnl::convolution_backward_data::primitive_desc>([&] {
    const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any(d->src), any(d->weights),
                                                     any(d->dst), d->strides, d->dilates, d->pad_l, d->pad_r);
    return dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), onednn_engine(),
                                                           forward_desc(*d, false));
  });
  if (!pd) return false;
  return executed("conv2d_backward_input", [&] {
    Execution e(grad_out.device());
    e.input(DNNL_ARG_DIFF_DST, user_memory(grad_out, d->dst, Tag::nchw), pd->diff_dst_desc());
    e.input(DNNL_ARG_WEIGHTS, user_memory(weight, d->weights, d->weights_tag), pd->weights_desc());
    e.output(DNNL_ARG_DIFF_SRC, user_memory(grad_input, d->src, Tag::nchw), pd->diff_src_desc());
    e.run(dnnl::convolution_backward_data(*pd), pd->scratchpad_desc());
  });
}

bool onednn_conv2d_backward_weight(const Tensor& grad_out, const Tensor& input, const Tensor& grad_weight,
                                   const Conv2dParams& p) {
  const std::optional<ConvDims> d = taken(input, grad_weight, grad_out, p, true, {&grad_out, &input, &grad_weight});
  if (!d) return false;
  const OmpThreads threads(cpu_thread_budget(grad_out.device()));
  const auto pd = primitive_desc<dnnl::convolution_backward_weights::primitive_desc>([&] {
    const dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, any(d->src),
                                                        any(d->weights), any(d->dst), d->strides, d->dilates,
                                                        d->pad_l, d->pad_r);
    return dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad(), onednn_engine(),
                                                              forward_desc(*d, false));
  });
  if (!pd) return false;
  return executed("conv2d_backward_weight", [&] {
    Execution e(grad_out.device());
    e.input(DNNL_ARG_SRC, user_memory(input, d->src, Tag::nchw), pd->src_desc());
    e.input(DNNL_ARG_DIFF_DST, user_memory(grad_out, d->dst, Tag::nchw), pd->diff_dst_desc());
    e.output(DNNL_ARG_DIFF_WEIGHTS, user_memory(grad_weight, d->weights, d->weights_tag), pd->diff_weights_desc());
    e.run(dnnl::convolution_backward_weights(*pd), pd->scratchpad_desc());
  });
}

#else  // built without oneDNN: conv.cpp's im2col + GEMM runs every convolution

const ConvLibrary& conv_library() {
  static const ConvLibrary lib;
  return lib;
}
bool onednn_conv2d_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  return false;
}
bool onednn_conv2d_backward_input(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) { return false; }
bool onednn_conv2d_backward_weight(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) { return false; }

#endif

}  // namespace mg::kernels::cpu
