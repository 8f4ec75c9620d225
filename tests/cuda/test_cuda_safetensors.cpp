// tests/cuda/test_cuda_safetensors.cpp — io/ with CUDA tensors: saving copies them (views
// included) to host memory, loading onto cuda:0 copies back, both bit-exact against the CPU.
#include <catch2/catch.hpp>

#include "cuda/cuda_test_util.h"
#include "multigrad/io/checkpoint.h"
#include "io/io_test_util.h"
#include "multigrad/io/safetensors.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("cuda: safetensors saves CUDA tensors and views as their host bytes", "[cuda]") {
  TempDir dir;
  const std::string path = dir.file("gpu.safetensors");
  const Tensor f = cpu_input({33, 17}, DType::Float32, 3);
  const Tensor d = cpu_input({5}, DType::Float64, 4);
  const Tensor i = cpu_input({7}, DType::Int64, 5);
  const Tensor b = cpu_input({9}, DType::Bool, 6);
  const Tensor h = f.to(DType::BFloat16), half = f.to(DType::Float16);
  io::save_safetensors(path, {{"f", f.to(gpu())}, {"ft", f.to(gpu()).transpose(0, 1)}, {"d", d.to(gpu())},
                              {"i", i.to(gpu())}, {"b", b.to(gpu())}, {"h", h.to(gpu())}, {"half", half.to(gpu())}});
  auto loaded = io::load_safetensors(path);
  CHECK(tensor_bytes(loaded.tensors.at("f")) == tensor_bytes(f));
  CHECK(tensor_bytes(loaded.tensors.at("ft")) == tensor_bytes(f.transpose(0, 1).contiguous()));
  CHECK(tensor_bytes(loaded.tensors.at("d")) == tensor_bytes(d));
  CHECK(tensor_bytes(loaded.tensors.at("i")) == tensor_bytes(i));
  CHECK(tensor_bytes(loaded.tensors.at("b")) == tensor_bytes(b));
  CHECK(tensor_bytes(loaded.tensors.at("h")) == tensor_bytes(h));
  CHECK(tensor_bytes(loaded.tensors.at("half")) == tensor_bytes(half));
}

TEST_CASE("cuda: safetensors and checkpoints load onto cuda:0 bit-exactly", "[cuda]") {
  TempDir dir;
  const Tensor f = cpu_input({4, 5}, DType::Float32, 8);
  const Tensor i = cpu_input({6}, DType::Int64, 9);
  io::save_safetensors(dir.file("cpu.safetensors"), {{"f", f}, {"i", i}, {"e", Tensor::empty({0, 2})}});
  auto loaded = io::load_safetensors(dir.file("cpu.safetensors"), gpu());
  for (const auto& [name, t] : loaded.tensors) CHECK(t.device() == gpu());
  CHECK(tensor_bytes(loaded.tensors.at("f").to(Device("cpu"))) == tensor_bytes(f));
  CHECK(tensor_bytes(loaded.tensors.at("i").to(Device("cpu"))) == tensor_bytes(i));
  CHECK(loaded.tensors.at("e").shape() == Shape{0, 2});

  io::save_checkpoint(dir.file("ck.safetensors"), io::Checkpoint{{{"w", f.to(gpu())}}, {{"m", i.to(gpu())}}, {}, 9, {5, 6}, {}});
  io::Checkpoint ck = io::load_checkpoint(dir.file("ck.safetensors"), gpu());
  CHECK(ck.step == 9);
  CHECK(ck.model_state.at("w").device() == gpu());
  CHECK(tensor_bytes(ck.model_state.at("w").to(Device("cpu"))) == tensor_bytes(f));
  CHECK(tensor_bytes(ck.optimizer_state.at("m").to(Device("cpu"))) == tensor_bytes(i));
}
