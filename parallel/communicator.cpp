// parallel/communicator.cpp — what every backend shares: the names of the reduce ops.
#include "parallel/communicator.h"

namespace mg::parallel {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

}  // namespace mg::parallel
