// autograd/tape.h — reverse-mode autodiff on a tape.
//
// Recording. Each differentiable op of the functional API computes its result, then — when
// grad mode is on and an input requires grad — appends a Node to the calling thread's current
// Tape: the op's name, its inputs, and a backward function that owns the tensors it saved. The
// node is attached to the op's outputs (AutogradMeta::grad_fn), which now require grad.
//
// Ownership. A node lives as long as a tensor it produced (or a later node that used such a
// tensor) does; the tape holds it weakly, as an ordered record. A forward pass whose outputs are
// dropped frees its nodes, as in PyTorch; backward() frees the saved tensors and inputs of the
// nodes it ran, unless retain_graph. A node keeps of its inputs only what routes gradients, as
// PyTorch's graph keeps edges: the leaves that require grad, and for every other input that does
// its producer and output number (a shell: shape, dtype, autograd state, no memory). So an
// activation lives only while a backward function saved it or the caller holds it.
//
// The walk. mg::backward(outputs, grads) visits the nodes reachable from the outputs in
// reverse recording order (every node has a process-wide sequence number, larger than its
// inputs' nodes', so the order is topological even across tapes and threads). A node runs once
// all gradients for its outputs have arrived; nodes no gradient reaches are skipped. Gradients
// meeting at one tensor are summed; at a leaf, the pass's sum is added into leaf.grad() (+=)
// once the leaf is final, so fan-out and gradient accumulation over several backward passes
// work, and a leaf used twice accumulates as data parallelism sums (tape.cpp's file comment).
//
// Higher-order gradients. Backward functions run under NoGradGuard, unless create_graph: then
// they run with grad mode on, so the gradients are recorded like any result and can be
// differentiated again (a gradient penalty, a Hessian-vector product, MAML's inner step). That
// is right only for a node whose backward, with grad mode on, is made of differentiable ops on
// tensors that carry their place in the graph: the op's inputs, the output gradients, and what
// live_input / live_output (below) give back for a detached saved tensor. Such nodes are
// recorded with twice_differentiable. Under create_graph, the gradients of every other node
// pass through a node that throws, naming the op, when a later backward reaches it: never a
// silently wrong second derivative. Twice differentiable today: every op of ops.h and nn_ops.h
// in float32 and float64, the fused ones (linear, layer_norm, batch_norm, cross_entropy,
// scaled_dot_product_attention, conv2d, max/avg_pool2d, embedding, gelu, relu) by computing, when
// grad mode is on, the same gradient from differentiable ops instead of their backward kernels.
// Not: matmul, linear, attention and the math ops under autocast (their backwards read rounded
// copies), activation recomputation (autograd/checkpoint.h), and the parallel modules'
// collectives. gradgradcheck checks them. As in PyTorch, backward(create_graph) leaves in each
// leaf's grad() a graph that leads back to the leaf: a cycle that lives until the gradient is
// cleared (set_grad(Tensor()), zero_grad); grad(..., create_graph) returns the gradients instead.
//
// Hooks. on_grad_ready(leaf, fn) fires fn(leaf.grad()) once per backward pass, as soon as the
// leaf's gradient is final, i.e. when the last node of the walk that uses the leaf has run —
// before the rest of the walk. DistributedDataParallel starts a bucket's all-reduce from it.
//
// Gradient destinations. set_grad_destination(leaf, buffer) gives a leaf a place for its
// gradient: when a backward pass reaches the leaf while leaf.grad() is undefined, the gradient
// is written into `buffer` and leaf.grad() becomes `buffer`. A backward function that can
// compute a result in place asks grad_destination(input) and writes there (linear for its
// weight and bias, conv2d for its weight); any other gradient is copied there on arrival.
// DistributedDataParallel points each parameter at its slot in a bucket (PyTorch's
// gradient_as_bucket_view): linear and conv weights' gradients are born in the bucket that is
// all-reduced, with no copy.
//
// Saved tensors. A backward reads the values its op saw: an input or output changed in place
// between the forward and the backward (copy_, an optimizer's step) would give wrong gradients
// silently. Each node keeps the storage versions (core/storage.h) of the tensors its backward
// reads, and the walk checks them before running it: a change is an error naming the op, the
// tensor and both versions, as PyTorch's "modified by an inplace operation".
//
// Threads. Grad mode, the anomaly flag and the current tape are per thread. A tape is used by
// one thread at a time; a node's backward may run a sub-graph recorded on another thread
// (DataParallel replicas, pipeline micro-batches).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "multigrad/core/tensor.h"

namespace mg {

// Gradients of a node's outputs (in) or inputs (out); an undefined Tensor means "no gradient"
// (zero), both ways.
using TensorList = std::vector<Tensor>;
using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;

// Which of an op's tensors its backward reads: their storage versions are checked before it runs
// (see Saved tensors above), and a backward keeps only these (derivatives.h: of the others, their
// shells).
enum class Saves : uint8_t { None, Inputs, Outputs, InputsAndOutputs };
inline bool reads_inputs(Saves s) { return s == Saves::Inputs || s == Saves::InputsAndOutputs; }
inline bool reads_outputs(Saves s) { return s == Saves::Outputs || s == Saves::InputsAndOutputs; }

// t without its memory: its shape, strides, offset, dtype, device, requires_grad and autograd
// state over an empty storage. What a node keeps of a non-leaf input (Ownership), and what a
// backward keeps of a tensor whose shape it needs and whose values it does not read.
Tensor shell_of(const Tensor& t);

// A tensor a node's backward reads, and its storage's version when the op recorded.
struct SavedVersion {
  std::weak_ptr<Storage> storage;  // gone: nobody can change it any more
  uint64_t version = 0;
  bool output = false;  // an output of the op, else an input
  size_t index = 0;     // which one
  Shape shape;
  DType dtype = DType::Float32;
};

struct Node : std::enable_shared_from_this<Node> {
  std::string name;       // the op: "matmul"
  TensorList inputs;      // edges (see Ownership): a leaf, a shell of a non-leaf, or undefined
  int num_outputs = 1;
  uint64_t sequence = 0;  // process-wide recording order
  BackwardFn backward;    // empty once released
  bool twice_differentiable = false;  // backward made of differentiable ops on the op's inputs
  std::vector<SavedVersion> saved;
  bool released() const { return !backward; }
};

struct AutogradMeta {
  std::shared_ptr<Node> grad_fn;  // the node that produced this tensor; null for a leaf
  int output_nr = 0;              // which output of grad_fn
  Tensor grad;                    // leaves: the accumulated gradient
  Tensor pass_grad;               // leaves: this backward pass's contributions, summed so far
  Tensor grad_destination;        // leaves: where a first gradient goes (see Gradient destinations)
  std::vector<std::function<void(const Tensor& grad)>> grad_ready_hooks;  // leaves
};

class Tape {
 public:
  // The nodes recorded on this tape that are still alive, oldest first: a new vector each call
  // (the tape holds its nodes weakly, so the set shrinks as outputs are dropped). Keep one call's
  // result to iterate over; two calls give two vectors.
  std::vector<std::shared_ptr<Node>> live_nodes() const;
  size_t size() const { return live_nodes().size(); }
  void append(const std::shared_ptr<Node>& node);

 private:
  std::vector<std::weak_ptr<Node>> nodes_;
};

// The calling thread's current tape (each thread starts with its own).
Tape& current_tape();

// Records on `tape` for the scope's lifetime, on the calling thread.
class TapeScope {
 public:
  explicit TapeScope(Tape& tape);
  ~TapeScope();
  TapeScope(const TapeScope&) = delete;
  TapeScope& operator=(const TapeScope&) = delete;

 private:
  Tape* previous_;
};

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// No recording in this scope (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Recording in this scope, also inside a backward function (torch.enable_grad).
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

// In this scope, the first NaN or Inf produced by an op's forward or backward throws an
// mg::Error naming the op and the pass ("DetectAnomaly: log produced NaN in its forward").
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};
bool is_anomaly_enabled();

// ---- for op implementations ----

// True when grad mode is on and any of the tensors requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> tensors);
// Records an op: appends a node for `name` with `inputs` and `backward` to the current tape and
// attaches it to `outputs` (which then require grad). Call only when any_requires_grad(inputs).
// `saves` says which tensors the backward reads (by default all; Saves::None for an op whose
// gradient does not depend on their values, as add's or a view's). Under DetectAnomalyGuard,
// first checks the outputs for NaN/Inf.
// `twice_differentiable`: the backward is made of differentiable ops and reads no detached
// output, so create_graph may record through it (see Higher-order gradients above).
void record(const char* name, const TensorList& outputs, const TensorList& inputs, BackwardFn backward,
            Saves saves = Saves::InputsAndOutputs, bool twice_differentiable = false);

// For backward functions, PyTorch's unpacking of a saved tensor: under create_graph, a tensor
// with `values` (what the backward kept of the running node's input `index`, or of its output
// `index`: the same shape and dtype, any layout) that takes that tensor's place in the graph, so
// that the differentiable ops a backward applies to it record edges back through the input's
// producer, or to the running node itself. A backward that saved a detached copy (a kernel
// operand, an output) uses them to be twice differentiable. Otherwise, and for an input that
// needs no gradient, `values` as they are.
Tensor live_input(const Tensor& values, size_t index);
Tensor live_output(const Tensor& values, int index = 0);

// ---- running it ----

// Backward from `outputs`, with `grad_outputs` their gradients (an undefined one: ones, allowed
// only for one-element outputs). Throws if an output does not require grad, if a shape
// differs, or if a node on the way was released by an earlier backward without retain_graph.
// With create_graph (which implies retain_graph) the gradients are recorded: see Higher-order
// gradients above.
void backward(const TensorList& outputs, const TensorList& grad_outputs = {}, bool retain_graph = false,
              bool create_graph = false);

// The gradients of `outputs` (weighted by grad_outputs, as backward) with respect to `inputs`,
// leaves that require grad, as torch.autograd.grad: returned, one per input (undefined where
// none reaches it), and added nowhere: no leaf's grad() changes, no hook fires, no gradient
// destination is written. Activation recomputation (autograd/checkpoint.h) runs it inside a
// backward function.
TensorList grad(const TensorList& outputs, const TensorList& grad_outputs, const TensorList& inputs,
                bool retain_graph = false, bool create_graph = false);

// Registers fn to run with the leaf's final gradient in each backward pass (see Hooks above).
void on_grad_ready(const Tensor& leaf, std::function<void(const Tensor& grad)> fn);

// Sets (or, with an undefined buffer, removes) the leaf's gradient destination: `buffer` must
// be contiguous, with the leaf's shape, dtype and device (see Gradient destinations above).
void set_grad_destination(const Tensor& leaf, const Tensor& buffer);

// For backward functions: the tensor to write input's gradient into — its destination, when
// input is a leaf that has one and no gradient yet — or undefined (return a fresh tensor). A
// backward that writes there returns the destination itself. Valid only if input appears once
// among the node's inputs (else the second write would overwrite the first).
Tensor grad_destination(const Tensor& input);

// The leaves requiring grad that a backward from `outputs` would reach (each once, in no
// particular order). DistributedDataParallel uses it after forward to find unused parameters.
std::vector<Tensor> reachable_leaves(const TensorList& outputs);

}  // namespace mg
