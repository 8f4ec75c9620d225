// kernels/cpu/binary.cpp — binary elementwise ops on the CPU (kernels/kernels.h's BinaryOp):
// tensor-tensor and tensor-scalar (the scalar on either side), through elementwise_map.h's loop.
// Comparisons write Bool, the rest the operands' dtype (op_functors.h maps each op to its functor).
#include <type_traits>

#include "multigrad/kernels/cpu/cpu_kernels.h"
#include "multigrad/kernels/cpu/elementwise_map.h"
#include "multigrad/kernels/functors.h"
#include "multigrad/kernels/op_functors.h"

namespace mg::kernels::cpu {

using detail::check_out_dtype;
using detail::check_same_dtype;
using detail::map;

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* name = op_name(op);
  check_same_dtype(name, a, b);
  with_binary_functor(op, [&](auto f) {
    MG_DISPATCH_ARITH(a.dtype(), name, [&] {
      using Res = std::invoke_result_t<decltype(f), scalar_t, scalar_t>;
      check_out_dtype<Res>(name, out);
      map<Res, scalar_t, scalar_t>(f, out, a, b);
    });
  });
}

void binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first, const Tensor& out) {
  const char* name = op_name(op);
  with_binary_functor(op, [&](auto f) {
    using Op = decltype(f);
    MG_DISPATCH_ARITH(a.dtype(), name, [&] {
      using Res = std::invoke_result_t<Op, scalar_t, scalar_t>;
      check_out_dtype<Res>(name, out);
      const scalar_t value = convert<scalar_t>(s);
      if (scalar_first) map<Res, scalar_t>(BindScalar<Op, scalar_t, true>{value}, out, a);
      else map<Res, scalar_t>(BindScalar<Op, scalar_t, false>{value}, out, a);
    });
  });
}

}  // namespace mg::kernels::cpu
