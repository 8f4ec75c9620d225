// autograd/tape.cpp — the tape, grad mode, the backward walk, leaf hooks, gradcheck and the
// autograd methods of Tensor (see tape.h for the model).
//
// The walk, in three steps:
//   1. reachability: a depth-first pass from the outputs' nodes through node inputs that
//      require grad collects every node a gradient can reach and, for each leaf, how many of
//      those nodes use it (its consumers); a node already released fails here, before any
//      gradient is written;
//   2. the reachable nodes run in descending sequence number: every consumer of a node's
//      outputs was recorded after it, so when a node comes up all its output gradients are in;
//      a node none of whose outputs got a gradient is skipped (its inputs get none from it);
//   3. each produced gradient goes to the input's producing node (summed per output) or, for
//      a leaf, into the leaf's sum for this pass; when its last consumer has been processed,
//      that sum is added into leaf.grad() (the first one into its destination, if it has one)
//      and its on_grad_ready hooks fire. Summing a pass's contributions before adding them, as
//      PyTorch's engine does, makes a leaf used twice (tied weights) accumulate over
//      micro-batches as (a1 + b1) + (a2 + b2): the association data parallelism's sum of
//      replicas has, so the two stay bit-identical.
// grad() walks the same way but returns the leaves' pass sums instead of adding them (no hooks,
// no gradient destinations). Backward functions run under NoGradGuard, or, with
// create_graph, recording: then the gradients of a node not marked twice_differentiable are
// handed on as aliases produced by a node that throws if a later backward reaches it.
#include "multigrad/autograd/tape.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "multigrad/autograd/factory.h"
#include "multigrad/autograd/ops.h"
#include "multigrad/kernels/kernels.h"

namespace mg {
namespace {

thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly_enabled = false;
thread_local Tape* t_current_tape = nullptr;  // null: the thread's own tape
thread_local bool t_capturing = false;        // the walk running on this thread is grad()'s
thread_local Node* t_recording_node = nullptr;  // the node whose backward runs under create_graph
std::atomic<uint64_t> g_next_sequence{1};

AutogradMeta& meta_of(const Tensor& t) {
  std::shared_ptr<AutogradMeta>& slot = t.unsafe_impl()->autograd;
  if (!slot) slot = std::make_shared<AutogradMeta>();
  return *slot;
}

const std::shared_ptr<Node>& grad_fn_of(const Tensor& t) {
  static const std::shared_ptr<Node> none;
  const auto& slot = t.unsafe_impl()->autograd;
  return slot ? slot->grad_fn : none;
}

// What a node keeps of an input (tape.h, "Ownership"): a leaf that requires grad as it is (its
// gradient is added into it), of a non-leaf its shell (the edge to its producer), nothing of an
// input that needs no gradient.
Tensor edge_to(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Tensor();
  return grad_fn_of(t) ? shell_of(t) : t;
}

// "NaN", "Inf" or null when every element of a floating tensor is finite.
const char* non_finite_kind(const Tensor& t) {
  if (!is_floating(t.dtype())) return nullptr;
  bool inf = false;
  for (double v : t.to_vector<double>()) {
    if (std::isnan(v)) return "NaN";
    inf = inf || std::isinf(v);
  }
  return inf ? "Inf" : nullptr;
}

void check_anomaly(const Tensor& t, const std::string& op, const char* pass) {
  if (const char* kind = non_finite_kind(t))
    MG_ERROR("DetectAnomaly: ", op, " produced ", kind, " in its ", pass);
}

// The tensors the node's backward reads are as the op saw them (see Saved tensors in tape.h).
void check_saved_versions(const Node& node) {
  for (const SavedVersion& s : node.saved) {
    const std::shared_ptr<Storage> storage = s.storage.lock();
    MG_CHECK(!storage || storage->version() == s.version, "backward of ", node.name, ": its ",
             s.output ? "output " : "input ", s.index, " (", s.shape, ", ", s.dtype,
             ") was modified in place after the forward used it: it is at version ", storage->version(),
             ", the forward saw version ", s.version, " (change a clone, or change it after backward)");
  }
}

// Whether g is the only handle on all of its memory: no other tensor, view or saved value
// could see a later in-place change to it.
bool owns_its_memory(const Tensor& g) {
  return g.use_count() == 1 && g.storage() && g.storage().use_count() == 1 &&
         g.is_contiguous() && g.offset() == 0 && g.storage()->nbytes() == size_t(g.numel()) * g.element_size();
}

// leaf.grad() += g, in place when the gradient exists; out of place when either holds a recorded
// history (create_graph), the first arrival then cloned (recorded) so that no two leaves share a
// gradient tensor. Otherwise the first arrival goes to the leaf's
// destination when it has one (copied unless the backward wrote it there already); else it is
// stored as it is when g owns its memory (a fresh result of a backward function, as PyTorch's
// AccumulateGrad steals it), else as a contiguous copy. So a leaf's gradient never aliases
// another tensor's memory, except its destination's by request.
void accumulate_into_leaf(const Tensor& leaf, Tensor g) {
  AutogradMeta& meta = meta_of(leaf);
  MG_CHECK(g.device() == leaf.device(), "backward: a gradient on ", g.device(), " reached a leaf on ",
           leaf.device());
  if (g.dtype() != leaf.dtype()) g = to(g, leaf.dtype());
  if (g.requires_grad() || (meta.grad.defined() && meta.grad.requires_grad())) {
    meta.grad = meta.grad.defined() ? add(meta.grad, g) : clone(g);
    return;
  }
  if (!meta.grad.defined()) {
    if (meta.grad_destination.defined()) {
      if (!g.is_same(meta.grad_destination)) kernels::copy(g, meta.grad_destination);
      meta.grad = meta.grad_destination;
    } else {
      meta.grad = owns_its_memory(g) ? std::move(g) : clone(g);
    }
    return;
  }
  kernels::binary(kernels::BinaryOp::Add, meta.grad, g, meta.grad);
}

// slot += g (an undefined slot takes g). Non-leaf gradients are summed out of place.
void accumulate(Tensor& slot, const Tensor& g) { slot = slot.defined() ? add(slot, g) : g; }

struct NodeState {
  std::shared_ptr<Node> node;
  TensorList grads;  // one per output, summed as consumers run
};

struct LeafState {
  Tensor leaf;
  int consumers = 0;  // reachable nodes that use the leaf and have not been processed yet
  Tensor pass_grad;   // grad()'s sum for this leaf (backward() keeps it in the leaf's meta)
};

void fire_hooks(const Tensor& leaf) {
  const auto& slot = leaf.unsafe_impl()->autograd;
  if (!slot) return;
  for (const auto& hook : slot->grad_ready_hooks) hook(slot->grad);
}

// Step 1 of the walk (see the file comment).
void collect_reachable(const std::vector<std::shared_ptr<Node>>& roots,
                       std::unordered_map<Node*, NodeState>& nodes,
                       std::unordered_map<TensorImpl*, LeafState>& leaves) {
  std::vector<std::shared_ptr<Node>> stack;
  for (const auto& root : roots) {
    if (nodes.count(root.get())) continue;
    nodes[root.get()].node = root;
    stack.push_back(root);
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    MG_CHECK(!node->released(), "backward: the graph of '", node->name,
             "' was already freed by an earlier backward; use retain_graph=true");
    nodes[node.get()].grads.resize(size_t(node->num_outputs));
    std::unordered_set<TensorImpl*> seen_leaves;  // a node that uses a leaf twice is one consumer
    for (const Tensor& input : node->inputs) {
      if (!input.defined() || !input.requires_grad()) continue;
      const auto& producer = grad_fn_of(input);
      if (!producer) {
        if (seen_leaves.insert(input.unsafe_impl()).second) {
          LeafState& leaf = leaves[input.unsafe_impl()];
          leaf.leaf = input;
          ++leaf.consumers;
        }
        continue;
      }
      if (nodes.count(producer.get())) continue;
      nodes[producer.get()].node = producer;
      stack.push_back(producer);
    }
  }
}

}  // namespace

// ---- tape, grad mode, anomaly mode ----

Tensor shell_of(const Tensor& t) {
  if (!t.defined()) return t;
  const TensorImpl& impl = *t.unsafe_impl();
  auto shell = std::make_shared<TensorImpl>();
  shell->storage = std::make_shared<Storage>(0, t.device());  // 0 bytes: allocates nothing
  shell->shape = impl.shape;
  shell->strides = impl.strides;
  shell->offset = impl.offset;
  shell->dtype = impl.dtype;
  shell->requires_grad = impl.requires_grad;
  shell->autograd = impl.autograd;
  return Tensor(std::move(shell));
}

std::vector<std::shared_ptr<Node>> Tape::live_nodes() const {
  std::vector<std::shared_ptr<Node>> live;
  for (const auto& weak : nodes_)
    if (auto node = weak.lock()) live.push_back(std::move(node));
  return live;
}

void Tape::append(const std::shared_ptr<Node>& node) {
  // When the record is full, drop the expired entries first (and grow only if most are
  // live), so a long training loop keeps it proportional to the live graph.
  if (nodes_.size() == nodes_.capacity() && !nodes_.empty()) {
    nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [](const auto& w) { return w.expired(); }),
                 nodes_.end());
    if (nodes_.size() * 2 > nodes_.capacity()) nodes_.reserve(nodes_.capacity() * 2);
  }
  nodes_.push_back(node);
}

Tape& current_tape() {
  thread_local Tape own;
  return t_current_tape ? *t_current_tape : own;
}

TapeScope::TapeScope(Tape& tape) : previous_(t_current_tape) { t_current_tape = &tape; }
TapeScope::~TapeScope() { t_current_tape = previous_; }

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

DetectAnomalyGuard::DetectAnomalyGuard() : previous_(t_anomaly_enabled) { t_anomaly_enabled = true; }
DetectAnomalyGuard::~DetectAnomalyGuard() { t_anomaly_enabled = previous_; }
bool is_anomaly_enabled() { return t_anomaly_enabled; }

// ---- recording ----

bool any_requires_grad(std::initializer_list<const Tensor*> tensors) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : tensors)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

void record(const char* name, const TensorList& outputs, const TensorList& inputs, BackwardFn backward,
            Saves saves, bool twice_differentiable) {
  if (t_anomaly_enabled)
    for (const Tensor& out : outputs) check_anomaly(out, name, "forward");
  auto node = std::make_shared<Node>();
  node->name = name;
  node->inputs.reserve(inputs.size());
  for (const Tensor& input : inputs) node->inputs.push_back(edge_to(input));
  node->num_outputs = int(outputs.size());
  node->sequence = g_next_sequence.fetch_add(1);
  node->backward = std::move(backward);
  node->twice_differentiable = twice_differentiable;
  const auto save = [&](const TensorList& tensors, bool output) {
    for (size_t i = 0; i < tensors.size(); ++i)
      if (tensors[i].defined())
        node->saved.push_back({tensors[i].storage(), tensors[i].storage()->version(), output, i, tensors[i].shape(),
                               tensors[i].dtype()});
  };
  if (saves == Saves::Inputs || saves == Saves::InputsAndOutputs) save(inputs, false);
  if (saves == Saves::Outputs || saves == Saves::InputsAndOutputs) save(outputs, true);
  current_tape().append(node);
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const Tensor& in : inputs)
      MG_CHECK(!outputs[i].is_same(in), "record: output ", i, " of '", name,
               "' is one of its inputs; an op that returns its input must not record");
    AutogradMeta& meta = meta_of(outputs[i]);
    meta.grad_fn = node;
    meta.output_nr = int(i);
    outputs[i].unsafe_impl()->requires_grad = true;
  }
}

// ---- the walk ----

namespace {

// Under create_graph: the gradients a node that is not twice differentiable gave its inputs,
// replaced by aliases that a node of their own produced, whose backward throws naming the op.
void guard_second_derivatives(const Node& node, const TensorList& output_grads, TensorList& input_grads) {
  TensorList sources;  // what the gradients depend on: the op's inputs and output gradients
  for (const Tensor& t : node.inputs)
    if (t.defined() && t.requires_grad()) sources.push_back(t);
  for (const Tensor& g : output_grads)
    if (g.defined() && g.requires_grad()) sources.push_back(g);
  if (sources.empty()) return;
  const std::string name = node.name;
  for (Tensor& g : input_grads) {
    if (!g.defined()) continue;
    g = g.detach();
    record(("the backward of " + name).c_str(), {g}, sources, [name](const TensorList&) -> TensorList {
      MG_ERROR("backward: a second derivative through '", name, "' is not supported: its backward is not made of "
               "differentiable ops on its inputs (autograd/tape.h, Higher-order gradients, lists the ops that are)");
    }, Saves::None);
  }
}

// backward() (wrt null) or grad() (wrt the leaves to return gradients for): see the file comment.
// grad() adds nothing into any leaf, fires no hooks and gives backward functions no gradient
// destinations; its pass sums live in the walk's LeafStates, so a grad() run inside a
// backward function (autograd/checkpoint.cpp) leaves the outer pass's sums alone.
TensorList walk(const TensorList& outputs, const TensorList& grad_outputs, bool retain_graph, const TensorList* wrt,
                bool create_graph) {
  MG_CHECK(!outputs.empty(), "backward: expected at least one output");
  MG_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward: got ", outputs.size(),
           " outputs but ", grad_outputs.size(), " grad_outputs");
  if (create_graph) retain_graph = true;
  struct GradModeScope {
    bool previous = is_grad_enabled();
    explicit GradModeScope(bool on) { set_grad_enabled(on); }
    ~GradModeScope() { set_grad_enabled(previous); }
  } grad_mode(create_graph);
  const bool capture = wrt != nullptr;
  struct CapturingScope {
    bool previous = t_capturing;
    explicit CapturingScope(bool capture) { t_capturing = capture; }
    ~CapturingScope() { t_capturing = previous; }
  } capturing_scope(capture);

  std::vector<std::pair<Tensor, Tensor>> seeds;  // (output, its gradient)
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& out = outputs[i];
    MG_CHECK(out.defined(), "backward: output ", i, " is undefined");
    MG_CHECK(out.requires_grad(), "backward: output ", i, " (shape ", out.shape(),
             ") does not require grad and has no producing node");
    Tensor grad = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!grad.defined()) {
      MG_CHECK(out.numel() == 1, "backward: expected a one-element output, got shape ", out.shape(),
               "; pass grad_outputs");
      grad = ones(out.shape(), out.options());
    }
    MG_CHECK(grad.shape() == out.shape(), "backward: grad_outputs[", i, "] has shape ", grad.shape(),
             " but output ", i, " has shape ", out.shape());
    MG_CHECK(grad.device() == out.device(), "backward: grad_outputs[", i, "] is on ", grad.device(),
             " but output ", i, " is on ", out.device());
    seeds.emplace_back(out, grad.dtype() == out.dtype() ? grad : to(grad, out.dtype()));
  }

  std::vector<std::shared_ptr<Node>> roots;
  for (const auto& [out, grad] : seeds)
    if (const auto& fn = grad_fn_of(out)) roots.push_back(fn);
  std::unordered_map<Node*, NodeState> nodes;
  std::unordered_map<TensorImpl*, LeafState> leaves;
  collect_reachable(roots, nodes, leaves);
  // A pass that throws leaves no partial sum behind for the next one.
  struct DropPassSums {
    std::unordered_map<TensorImpl*, LeafState>& leaves;
    bool capture;
    ~DropPassSums() {
      if (capture) return;
      for (auto& [impl, state] : leaves) meta_of(state.leaf).pass_grad = Tensor();
    }
  } drop_pass_sums{leaves, capture};
  const auto pass_sum = [&](const Tensor& leaf) -> Tensor& {
    return capture ? leaves.at(leaf.unsafe_impl()).pass_grad : meta_of(leaf).pass_grad;
  };

  for (const auto& [out, grad] : seeds) {
    if (const auto& fn = grad_fn_of(out)) {
      accumulate(nodes[fn.get()].grads[size_t(meta_of(out).output_nr)], grad);
      continue;
    }
    if (capture) {  // grad() of a leaf itself
      LeafState& leaf = leaves[out.unsafe_impl()];
      leaf.leaf = out;
      accumulate(leaf.pass_grad, grad);
      continue;
    }
    accumulate_into_leaf(out, grad);  // backward() on a leaf itself
    if (!leaves.count(out.unsafe_impl())) fire_hooks(out);
  }

  std::vector<NodeState*> order;
  order.reserve(nodes.size());
  for (auto& [ptr, state] : nodes) order.push_back(&state);
  std::sort(order.begin(), order.end(),
            [](const NodeState* a, const NodeState* b) { return a->node->sequence > b->node->sequence; });

  for (NodeState* state : order) {
    Node& node = *state->node;
    const bool reached = std::any_of(state->grads.begin(), state->grads.end(),
                                     [](const Tensor& g) { return g.defined(); });
    TensorList input_grads;
    if (reached) {
      check_saved_versions(node);
      struct RecordingScope {
        Node* previous = t_recording_node;
        explicit RecordingScope(Node* node) { t_recording_node = node; }
        ~RecordingScope() { t_recording_node = previous; }
      } recording(create_graph ? &node : nullptr);
      input_grads = node.backward(state->grads);
      MG_CHECK(input_grads.size() == node.inputs.size(), "backward: '", node.name, "' returned ",
               input_grads.size(), " gradients for ", node.inputs.size(), " inputs");
      if (create_graph && !node.twice_differentiable) guard_second_derivatives(node, state->grads, input_grads);
      if (!retain_graph) {
        node.backward = nullptr;
        node.saved.clear();
      }
    }
    state->grads.clear();

    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const Tensor& input = node.inputs[i];
      if (!input.defined() || !input.requires_grad() || !reached || !input_grads[i].defined()) continue;
      Tensor g = std::move(input_grads[i]);  // so that a leaf may take it (accumulate_into_leaf)
      MG_CHECK(g.shape() == input.shape(), "backward: '", node.name, "' returned a gradient of shape ", g.shape(),
               " for input ", i, " of shape ", input.shape());
      if (t_anomaly_enabled) check_anomaly(g, node.name, "backward");
      if (g.dtype() != input.dtype()) g = to(g, input.dtype());
      if (const auto& producer = grad_fn_of(input)) {
        accumulate(nodes.at(producer.get()).grads[size_t(meta_of(input).output_nr)], g);
      } else {
        accumulate(pass_sum(input), g);
      }
    }
    // Only once every gradient of the node is in: a leaf the node takes twice (w * w) is final
    // after both.
    std::unordered_set<TensorImpl*> done_leaves;
    for (const Tensor& input : node.inputs) {
      if (!input.defined() || !input.requires_grad() || grad_fn_of(input)) continue;
      if (!done_leaves.insert(input.unsafe_impl()).second || --leaves.at(input.unsafe_impl()).consumers > 0 ||
          capture)  // grad() keeps the sum in the LeafState for its result
        continue;
      AutogradMeta& meta = meta_of(input);
      if (meta.pass_grad.defined()) accumulate_into_leaf(input, std::move(meta.pass_grad));
      meta.pass_grad = Tensor();
      fire_hooks(input);
    }
    // A released node keeps nothing alive: activations are freed as the walk passes them,
    // not when the loss is dropped (a second backward through it is an error anyway).
    if (reached && !retain_graph) node.inputs.clear();
  }
  TensorList captured;
  if (capture)
    for (const Tensor& input : *wrt) {
      auto it = leaves.find(input.unsafe_impl());
      captured.push_back(it != leaves.end() ? it->second.pass_grad : Tensor());
    }
  return captured;
}

}  // namespace

void backward(const TensorList& outputs, const TensorList& grad_outputs, bool retain_graph, bool create_graph) {
  walk(outputs, grad_outputs, retain_graph, nullptr, create_graph);
}

TensorList grad(const TensorList& outputs, const TensorList& grad_outputs, const TensorList& inputs,
                bool retain_graph, bool create_graph) {
  for (size_t i = 0; i < inputs.size(); ++i)
    MG_CHECK(inputs[i].defined() && inputs[i].requires_grad() && inputs[i].is_leaf(), "grad: inputs[", i,
             "] is not a leaf tensor that requires grad");
  return walk(outputs, grad_outputs, retain_graph, &inputs, create_graph);
}

void on_grad_ready(const Tensor& leaf, std::function<void(const Tensor& grad)> fn) {
  MG_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(),
           "on_grad_ready: expected a leaf tensor that requires grad");
  meta_of(leaf).grad_ready_hooks.push_back(std::move(fn));
}

void set_grad_destination(const Tensor& leaf, const Tensor& buffer) {
  if (!buffer.defined()) {
    if (leaf.defined() && leaf.unsafe_impl()->autograd) leaf.unsafe_impl()->autograd->grad_destination = Tensor();
    return;
  }
  MG_CHECK(leaf.defined() && leaf.requires_grad() && leaf.is_leaf(),
           "set_grad_destination: expected a leaf tensor that requires grad");
  MG_CHECK(buffer.shape() == leaf.shape() && buffer.dtype() == leaf.dtype() && buffer.device() == leaf.device(),
           "set_grad_destination: expected a buffer of shape ", leaf.shape(), ", dtype ", leaf.dtype(), " on ",
           leaf.device(), ", got shape ", buffer.shape(), ", dtype ", buffer.dtype(), " on ", buffer.device());
  MG_CHECK(buffer.is_contiguous(), "set_grad_destination: the buffer must be contiguous (strides ",
           buffer.strides(), " for shape ", buffer.shape(), ")");
  meta_of(leaf).grad_destination = buffer;
}

Tensor grad_destination(const Tensor& input) {
  const auto& slot = input.unsafe_impl()->autograd;
  // Not when this pass already holds a contribution: it may be the destination itself.
  if (t_capturing || !slot || slot->grad_fn || slot->grad.defined() || slot->pass_grad.defined()) return Tensor();
  return slot->grad_destination;
}

namespace {

// A tensor over values' memory that takes `meta`'s place in the graph.
Tensor with_meta(const Tensor& values, std::shared_ptr<AutogradMeta> meta) {
  Tensor t = values.detach();
  t.unsafe_impl()->requires_grad = true;
  t.unsafe_impl()->autograd = std::move(meta);
  return t;
}

}  // namespace

Tensor live_input(const Tensor& values, size_t index) {
  if (!t_recording_node || !values.defined()) return values;
  const Node& node = *t_recording_node;
  MG_CHECK(index < node.inputs.size(), "live_input: '", node.name, "' has ", node.inputs.size(), " inputs, not ",
           index + 1);
  const Tensor& edge = node.inputs[index];
  if (!edge.defined()) return values;  // needs no gradient: a constant
  MG_CHECK(edge.shape() == values.shape(), "live_input: '", node.name, "' saved values of shape ", values.shape(),
           " for its input ", index, " of shape ", edge.shape());
  if (!grad_fn_of(edge)) return edge.dtype() == values.dtype() ? edge : to(edge, values.dtype());  // the leaf
  MG_CHECK(edge.dtype() == values.dtype(), "live_input: '", node.name, "' saved ", values.dtype(),
           " values for its ", edge.dtype(), " input ", index);
  return with_meta(values, edge.unsafe_impl()->autograd);
}

Tensor live_output(const Tensor& values, int index) {
  if (!t_recording_node || !values.defined()) return values;
  auto meta = std::make_shared<AutogradMeta>();
  meta->grad_fn = t_recording_node->shared_from_this();
  meta->output_nr = index;
  return with_meta(values, std::move(meta));
}

std::vector<Tensor> reachable_leaves(const TensorList& outputs) {
  std::vector<std::shared_ptr<Node>> roots;
  std::vector<Tensor> found;
  for (const Tensor& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    if (const auto& fn = grad_fn_of(out)) {
      roots.push_back(fn);
    } else {
      found.push_back(out);  // an output that is itself a leaf
    }
  }
  std::unordered_map<Node*, NodeState> nodes;
  std::unordered_map<TensorImpl*, LeafState> leaves;
  collect_reachable(roots, nodes, leaves);
  for (const Tensor& leaf : found) leaves[leaf.unsafe_impl()].leaf = leaf;
  found.clear();
  for (auto& [impl, state] : leaves) found.push_back(state.leaf);
  return found;
}

// ---- Tensor's autograd methods ----

Tensor& Tensor::requires_grad_(bool requires_grad) {
  MG_CHECK(!requires_grad || is_floating(dtype()),
           "requires_grad_: only tensors of a floating dtype can require gradients, got ", dtype());
  const auto& fn = grad_fn_of(*this);
  MG_CHECK(!fn, "requires_grad_: can only change the flag of a leaf; this tensor was produced by '", fn->name,
           "' (use detach())");
  impl_->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& slot = impl().autograd;
  return slot ? slot->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined())
    MG_CHECK(grad.shape() == shape() && grad.dtype() == dtype() && grad.device() == device(),
             "set_grad: expected a gradient of shape ", shape(), ", dtype ", dtype(), " on ", device(),
             ", got shape ", grad.shape(), ", dtype ", grad.dtype(), " on ", grad.device());
  if (!grad.defined() && !impl().autograd) return;
  meta_of(*this).grad = grad;
}

bool Tensor::is_leaf() const { return !grad_fn_of(*this); }

Tensor Tensor::detach() const { return as_strided(shape(), strides(), offset()); }

void Tensor::set_data(const Tensor& source) const {
  MG_CHECK(source.defined(), "set_data: the source tensor is undefined");
  const auto& fn = grad_fn_of(*this);
  MG_CHECK(!fn, "set_data: only a leaf's data can be replaced; this tensor was produced by '", fn->name, "'");
  MG_CHECK(!requires_grad() || is_floating(source.dtype()), "set_data: a tensor that requires grad needs floating "
           "data, got ", source.dtype());
  TensorImpl& self = *impl_;
  const TensorImpl& from = *source.impl_;
  self.storage = from.storage;
  self.shape = from.shape;
  self.strides = from.strides;
  self.offset = from.offset;
  self.dtype = from.dtype;
}

void Tensor::backward(bool retain_graph, bool create_graph) const {
  mg::backward({*this}, {}, retain_graph, create_graph);
}

}  // namespace mg
