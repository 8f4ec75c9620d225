// core/dtype.cpp — dtype sizes, names, type promotion and the arithmetic-dtype check.
#include "multigrad/core/dtype.h"

namespace mg {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Int64: return 8;
    case DType::BFloat16: return 2;
    case DType::Float16: return 2;
    case DType::Bool: return 1;
  }
  MG_ERROR("dtype_size: unknown dtype ", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "Float32";
    case DType::Float64: return "Float64";
    case DType::Int64: return "Int64";
    case DType::BFloat16: return "BFloat16";
    case DType::Float16: return "Float16";
    case DType::Bool: return "Bool";
  }
  MG_ERROR("dtype_name: unknown dtype ", int(t));
}

namespace {
// Position in the promotion order Bool < Int64 < Float32 < Float64.
int promotion_rank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::Int64: return 1;
    case DType::Float32: return 2;
    case DType::Float64: return 3;
    case DType::BFloat16:
    case DType::Float16: break;
  }
  MG_ERROR("promotion_rank: dtype ", t, " takes part in no arithmetic");
}

bool storage_only(DType t) { return t == DType::BFloat16 || t == DType::Float16; }
}  // namespace

DType promote_types(DType a, DType b, const char* op) {
  MG_CHECK(!storage_only(a) && !storage_only(b), op, ": cannot compute with dtypes ", a, " and ", b, "; ",
           storage_only(a) ? a : b, " is storage-only, convert with .to(DType::Float32) first");
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

void check_arithmetic_dtype(DType t, const char* op) {
  MG_CHECK(!storage_only(t), op, ": dtype ", t, " is storage-only; convert with .to(DType::Float32) first");
  MG_CHECK(t != DType::Bool, op,
           ": expected a numeric dtype, got Bool; convert with .to(DType::Float32) or .to(DType::Int64) first");
}

}  // namespace mg
