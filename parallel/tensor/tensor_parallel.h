// parallel/tensor/tensor_parallel.h — Megatron-LM's tensor parallelism (Shoeybi et al., "Megatron-LM:
// Training Multi-Billion Parameter Language Models Using Model Parallelism", 2019) over a
// Communicator whose ranks form one tensor-parallel group: every rank sees the same batch and
// holds 1/N of each split layer.
//
// A pair of linear layers with an elementwise activation between them, Y = act(X A^T) B^T, splits
// with one all-reduce in forward and one in backward:
//   - ColumnParallelLinear holds rows [r out/N, (r+1) out/N) of A (and of its bias): rank r
//     computes its out/N features of act(X A^T) with no communication (the activation is
//     elementwise, so it applies to the shard);
//   - RowParallelLinear holds the matching columns of B: rank r computes the partial product of
//     its features, and the all-reduce sums the N partials into Y (then adds the bias, whole on
//     every rank).
// Their conjugate operators carry the gradients: copy_to_tensor_parallel (f) is the identity in
// forward and all-reduces the input's gradient in backward (each rank's shard of A contributes a
// part of dX); reduce_from_tensor_parallel (g) all-reduces in forward and is the identity in
// backward (every rank needs the whole dY).
//
// What differs from one device. A column shard's products are the same sums as the whole
// layer's; the row-parallel sum Y = sum_r Z_r B_r^T and the column-parallel dX = sum_r dZ_r A_r
// are cut at the shard boundaries and summed across ranks (in rank order with
// mg::set_deterministic), where one device sums the whole inner dimension in its GEMM's order. So
// the results are not bit-identical to one device: each such sum differs by its float32 rounding,
// at most 2 (K - 1) u sum |terms| per element (u = 2^-24, K the inner dimension: both orders are
// within (K - 1) u sum |terms| of the exact sum), and the differences propagate through the
// layers. tests/parallel/tensor/test_tensor_parallel.cpp bounds them so, layer by layer. The BLAS kernel
// may also sum a shard's columns in another order than the whole layer's (its blocking can
// depend on the matrix's shape): the same bound covers it.
//
// A GPT (tensor_parallel_gpt): each block's attention is split by heads — c_attn column-parallel
// with its q, k and v each cut (rank r computes heads [r H/N, (r+1) H/N) whole, the causal softmax
// included, with no communication), c_proj row-parallel — and its MLP as the pair above: two
// all-reduces per block in forward, two in backward. The embeddings, the layer norms and the tied
// head stay whole on every rank; their gradients come out equal on every rank (what reaches them
// has been all-reduced), so they need no communication of their own. Or (vocab_parallel) the token
// embedding is a VocabParallelEmbedding and the head, tied to it, gives this rank's columns of the
// logits (VocabParallelHead): one all-reduce more in forward (the embedding's g) and one in
// backward (the head's f), and no rank holds the (B, T, V) logits.
//
// Sequence parallelism (Korthikanti et al. 2022, Megatron-LM's --sequence-parallel;
// tensor_parallel_gpt's option). Between a block's split layers the activations (B, T, C) are
// whole on every rank above, and the layer norms, dropouts and residual adds there repeat the same
// work on every rank and keep N copies of it. With sequence parallelism rank r keeps only its
// positions [r T/N, (r+1) T/N) there: the column-parallel layer's f becomes an all-gather of the
// positions (backward: a reduce-scatter, summing the ranks' partial input gradients), the
// row-parallel layer's g a reduce-scatter (backward: an all-gather) — the same bytes as the
// all-reduce they replace, which is a reduce-scatter and an all-gather. The layer norms run on
// the rank's positions; their weight and bias, whole on every rank, enter through f, so their
// gradients (each rank's from its positions) are summed over the ranks, as are the row-parallel
// bias's. A GPT's embeddings run whole and each rank takes its positions; ln_f's output is
// all-gathered for the whole tied head (backward: each rank keeps its positions' gradient). Not
// bit-identical to plain tensor parallelism either: a layer norm's weight gradient is summed over
// each rank's positions and then over the ranks, not over all the positions in one sum.
//
// Building. The split layers are made from a whole nn::Linear (each rank takes its part of the
// same initial weights, as from one seed), so a tensor-parallel model starts as the one-device
// model does; tensor_parallel_mlp converts an nn::mlp (or nn::fashion_cnn's classifier),
// tensor_parallel_gpt an nn::GPT. The
// communicator must outlive the layers.
#pragma once

// The parts, each in a file of its own:
#include "multigrad/parallel/tensor/layers.h"     // the split layers
#include "multigrad/parallel/tensor/operators.h"  // f, g and sequence parallelism's operators
#include "multigrad/parallel/tensor/plans.h"      // which layers of an MLP and a GPT are split
#include "multigrad/parallel/tensor/state.h"      // how parameters are cut; state for checkpoints
#include "multigrad/parallel/tensor/vocab.h"      // the vocabulary split: embedding, head, loss
