// kernels/op_functors.h — from an op's enum (kernels/kernels.h) to its functor
// (kernels/functors.h), for the CPU loop and the CUDA launchers alike. Host code.
#pragma once

#include "multigrad/core/error.h"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/kernels.h"

namespace mg::kernels {

// Calls fn(functor) with the functor of a binary op.
template <class Fn>
void with_binary_functor(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::Add: return fn(AddOp{});
    case BinaryOp::Sub: return fn(SubOp{});
    case BinaryOp::Mul: return fn(MulOp{});
    case BinaryOp::Div: return fn(DivOp{});
    case BinaryOp::Pow: return fn(PowOp{});
    case BinaryOp::Maximum: return fn(MaximumOp{});
    case BinaryOp::Minimum: return fn(MinimumOp{});
    case BinaryOp::ReluBackward: return fn(ReluBackwardOp{});
    case BinaryOp::GeluBackward: return fn(GeluBackwardOp{});
    case BinaryOp::Eq: return fn(EqOp{});
    case BinaryOp::Ne: return fn(NeOp{});
    case BinaryOp::Lt: return fn(LtOp{});
    case BinaryOp::Le: return fn(LeOp{});
    case BinaryOp::Gt: return fn(GtOp{});
    case BinaryOp::Ge: return fn(GeOp{});
  }
  MG_ERROR("binary: unknown op ", int(op));
}

}  // namespace mg::kernels
