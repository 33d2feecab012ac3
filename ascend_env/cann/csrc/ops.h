// What the op translation units share: decoded arguments, host buffers as CPU tensors.
#pragma once
#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <acl/acl.h>
#include <acl/acl_op_compiler.h>

#include <algorithm>

#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cann.h"

namespace cann {

//: ACL_ERROR_INTERNAL_ERROR (acl_base.h).
constexpr int kAclError = 500000;

// One decoded aclnn argument: kind T S A B L (objects), i n c b (integers), d f (floating).
struct Arg {
  char kind = 0;
  bool present = false;
  Tensor t;
  Scalar s;
  std::vector<int64_t> ints;
  std::vector<Tensor> list;
  int64_t i = 0;
  double d = 0;
  void* raw = nullptr;  // the aclTensor itself, for ops whose output shape CANN updates in place
};
using Args = std::vector<Arg>;
using OpRun = std::function<void(Args&)>;

int prepare(const char* name, const char* kinds, const OpRun* run, const uint64_t* ints, const double* floats);
int execute(const char* name, void* executor);

inline at::ScalarType scalar_type(int acl) {
  switch (acl) {
    case 0: return at::kFloat;
    case 1: return at::kHalf;
    case 2: return at::kChar;
    case 3: return at::kInt;
    case 4: return at::kByte;
    case 6: return at::kShort;
    case 9: return at::kLong;
    case 11: return at::kDouble;
    case 12: return at::kBool;
    case 16: return at::kComplexFloat;
    case 17: return at::kComplexDouble;
    case 27: return at::kBFloat16;
  }
  throw std::runtime_error("aclDataType " + std::to_string(acl) + " has no ATen dtype here");
}

// The host buffer of an aclTensor as a CPU tensor: its sizes, strides, offset and dtype.
inline at::Tensor wrap(const Tensor& t) {
  if (!t.defined) return at::Tensor();
  auto options = at::TensorOptions().dtype(scalar_type(t.dtype));
  int64_t numel = 1;
  for (auto s : t.sizes) numel *= s;
  if (numel == 0 || !t.data) return at::empty(t.sizes, options);
  auto* base = static_cast<char*>(t.data) + t.offset * at::elementSize(scalar_type(t.dtype));
  std::vector<int64_t> strides = t.strides;
  if (strides.size() != t.sizes.size()) {
    auto contiguous = c10::contiguous_strides(t.sizes);
    strides.assign(contiguous.begin(), contiguous.end());
  }
  return at::from_blob(base, t.sizes, strides, options);
}

// A temporary as the lvalue the *_out functions take; it lives to the end of the full expression.
inline at::Tensor& lvalue(at::Tensor&& t) { return t; }

inline at::Scalar scalar(const Scalar& s) {
  const void* v = s.value;
  switch (s.dtype) {
    case 0: return *static_cast<const float*>(v);
    case 1: return *static_cast<const at::Half*>(v);
    case 2: return *static_cast<const int8_t*>(v);
    case 3: return *static_cast<const int32_t*>(v);
    case 4: return *static_cast<const uint8_t*>(v);
    case 6: return *static_cast<const int16_t*>(v);
    case 9: return *static_cast<const int64_t*>(v);
    case 11: return *static_cast<const double*>(v);
    case 12: return *static_cast<const bool*>(v);
    case 16: return *static_cast<const c10::complex<float>*>(v);
    case 17: return *static_cast<const c10::complex<double>*>(v);
    case 27: return *static_cast<const at::BFloat16*>(v);
  }
  throw std::runtime_error("aclScalar of aclDataType " + std::to_string(s.dtype) + " is not handled here");
}

// Write value into out (the wrapped output), cast to out's dtype.
inline void assign(const at::Tensor& out, const at::Tensor& value) {
  if (!out.defined()) return;
  if (value.sizes() == out.sizes())
    out.copy_(value);
  else if (value.numel() == out.numel())  // the same elements, kept dims of size 1 or not
    out.copy_(value.reshape(out.sizes()));
  else
    out.copy_(value.expand_as(out));
}

}  // namespace cann

// The generic signature (see aclnn_exec.inc) and the macro that defines one aclnn op's pair of
// entry points from its kind string and its body (a lambda over `Args& a`).
#define CANN_GENERIC_PARAMS                                                                            \
  uint64_t r0, uint64_t r1, uint64_t r2, uint64_t r3, uint64_t r4, uint64_t r5, double x0, double x1, \
      double x2, double x3, double x4, double x5, double x6, double x7, uint64_t s0, uint64_t s1,      \
      uint64_t s2, uint64_t s3, uint64_t s4, uint64_t s5, uint64_t s6, uint64_t s7, uint64_t s8,       \
      uint64_t s9, uint64_t s10, uint64_t s11
#define ACLNN(NAME, KINDS, ...)                                                                        \
  static const cann::OpRun NAME##_run = [](cann::Args & a) { __VA_ARGS__; };                           \
  extern "C" int NAME##GetWorkspaceSize(CANN_GENERIC_PARAMS) {                                         \
    const uint64_t ints[] = {r0, r1, r2, r3, r4, r5, s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11}; \
    const double floats[] = {x0, x1, x2, x3, x4, x5, x6, x7};                                          \
    return cann::prepare(#NAME, KINDS, &NAME##_run, ints, floats);                                     \
  }                                                                                                    \
  extern "C" int NAME(void*, uint64_t, void* executor, void*) { return cann::execute(#NAME, executor); }
