// autograd/tensor_print.cpp — a tensor's values as PyTorch prints them (core/tensor.h's
// operator<<): nested brackets row by row, the columns aligned, and past kSummarizeAbove elements
// only the first and last kEdgeItems of each dimension around "...".
//
// Floating values share one format, chosen from the finite ones as PyTorch chooses: integers
// (all whole) print with a trailing ".", values whose magnitudes span more than kMaxRatio or
// leave [kSciLow, kSciHigh) print in scientific notation, the rest with 4 decimals. BFloat16 and
// Float16 print their float values. The suffix names what differs from PyTorch's defaults
// (dtype other than Float32 and Int64, a device other than cpu:0, requires_grad).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "multigrad/autograd/ops.h"
#include "multigrad/autograd/tape.h"
#include "multigrad/core/tensor.h"

namespace mg {
namespace {

constexpr int64_t kSummarizeAbove = 1000;  // PyTorch's print threshold
constexpr int64_t kEdgeItems = 3;          // shown at each end of a summarised dimension
constexpr double kSciLow = 1e-4, kSciHigh = 1e8, kMaxRatio = 1e3;
constexpr int kDecimals = 4;

// How the elements print: one format for the whole tensor, padded to one width.
struct Format {
  enum Kind { Integer, WholeFloat, Fixed, Scientific, Boolean } kind = Fixed;
  size_t width = 0;

  std::string text(double v) const {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    switch (kind) {
      case Boolean: return v != 0 ? "True" : "False";
      case Integer: std::snprintf(buf, sizeof buf, "%.0f", v); break;
      case WholeFloat: std::snprintf(buf, sizeof buf, "%.0f.", v); break;
      case Fixed: std::snprintf(buf, sizeof buf, "%.*f", kDecimals, v); break;
      case Scientific: std::snprintf(buf, sizeof buf, "%.*e", kDecimals, v); break;
    }
    return buf;
  }
};

Format choose_format(const std::vector<double>& v, DType dtype) {
  Format f;
  if (dtype == DType::Bool) {
    f.kind = Format::Boolean;
  } else if (!is_floating(dtype)) {
    f.kind = Format::Integer;
  } else {
    std::vector<double> finite;
    std::copy_if(v.begin(), v.end(), std::back_inserter(finite), [](double x) { return std::isfinite(x); });
    const bool whole = std::all_of(finite.begin(), finite.end(), [](double x) { return x == std::nearbyint(x); });
    double lo = INFINITY, hi = 0;
    for (double x : finite)
      if (x != 0) lo = std::min(lo, std::abs(x)), hi = std::max(hi, std::abs(x));
    if (whole && hi < kSciHigh)
      f.kind = Format::WholeFloat;
    else if (hi > 0 && (hi / lo > kMaxRatio || lo < kSciLow || hi >= kSciHigh))
      f.kind = Format::Scientific;
  }
  for (double x : v) f.width = std::max(f.width, f.text(x).size());
  return f;
}

// The indices of dimension `d` that print: all, or the first and last kEdgeItems (-1 marks "...").
std::vector<int64_t> shown(int64_t size, bool summarize) {
  std::vector<int64_t> out;
  if (!summarize || size <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < size; ++i) out.push_back(i);
    return out;
  }
  for (int64_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
  out.push_back(-1);
  for (int64_t i = size - kEdgeItems; i < size; ++i) out.push_back(i);
  return out;
}

struct Printer {
  const std::vector<double>& values;  // row-major
  const Shape& shape;
  bool summarize;
  Format format;

  // The shown elements, for the format.
  void collect(size_t d, int64_t base, std::vector<double>& out) const {
    if (d == shape.size()) {
      out.push_back(values[size_t(base)]);
      return;
    }
    for (int64_t i : shown(shape[d], summarize))
      if (i >= 0) collect(d + 1, base * shape[d] + i, out);
  }

  // Dimension d of the block starting at `base`, indented by `indent` after a line break.
  void print(std::ostream& os, size_t d, int64_t base, size_t indent) const {
    if (d == shape.size()) {
      const std::string text = format.text(values[size_t(base)]);
      os << std::string(format.width - text.size(), ' ') << text;
      return;
    }
    os << '[';
    const std::vector<int64_t> indices = shown(shape[d], summarize);
    const bool innermost = d + 1 == shape.size();
    for (size_t k = 0; k < indices.size(); ++k) {
      if (k > 0) {
        os << ',';
        if (innermost) {
          os << ' ';
        } else {
          os << std::string(shape.size() - d - 1, '\n') << std::string(indent + 1, ' ');
        }
      }
      if (indices[k] < 0)
        os << (innermost ? " ..." : "...");  // PyTorch's spacing in a row
      else
        print(os, d + 1, base * shape[d] + indices[k], indent + 1);
    }
    os << ']';
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "tensor(undefined)";
  const std::vector<double> values = t.to_vector<double>();
  const Shape& shape = t.shape();
  Printer p{values, shape, t.numel() > kSummarizeAbove, {}};
  std::vector<double> shown_values;
  p.collect(0, 0, shown_values);
  p.format = choose_format(shown_values, t.dtype());
  os << "tensor(";
  if (t.numel() == 0)
    os << "[]";
  else
    p.print(os, 0, 0, std::string("tensor(").size());
  if (t.dtype() != DType::Float32 && t.dtype() != DType::Int64 && t.dtype() != DType::Bool)
    os << ", dtype=" << t.dtype();
  if (t.numel() == 0) os << ", size=" << to_string(shape);
  if (t.device() != Device("cpu:0")) os << ", device=" << t.device();
  const std::shared_ptr<AutogradMeta>& meta = t.unsafe_impl()->autograd;
  if (meta && meta->grad_fn)
    os << ", grad_fn=" << meta->grad_fn->name;
  else if (t.requires_grad())
    os << ", requires_grad=True";
  return os << ')';
}

}  // namespace mg
