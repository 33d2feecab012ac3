// The emulated CANN's shared state: the counters, the SoC, the compile options, the loud failure.
// Compiled against the ACL headers torch_npu's wheel ships (torch_npu/include/third_party/acl/inc).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace cann {

// Count one event under a kind ("aclnn", "aclop", "unimplemented", ...) and a name.
void count(const char* kind, const std::string& name);
// Record a failure: its text becomes aclGetRecentErrMsg's answer; printed to fd 2 once per text.
int fail(const std::string& message, int code);
// An entry point the emulated CANN does not implement: says so loudly, counts it, returns code.
int unimplemented(const char* name, int code);
// The SoC name ($ASCEND_ENV_SOC, else Ascend910B1).
const std::string& soc();
// Whether ptr is a live object aclCreate* made, of kind T S A B F L C (tensor, scalar, int/bool/
// float array, tensor/scalar list).
bool live(const void* ptr, char kind);

// An aclTensor as torch_npu created it (aclCreateTensor), held by value.
struct Tensor {
  bool defined = false;
  int dtype = -1;
  int format = 2;
  std::vector<int64_t> sizes, strides, storage;
  int64_t offset = 0;
  void* data = nullptr;
};
struct Scalar {
  int dtype = -1;
  unsigned char value[16] = {0};
};

}  // namespace cann

// An aclop attribute: which of the fields holds its value.
namespace cann {
struct AttrValue {
  char kind = 0;  // b i f s d (data type) B I F L (list list int)
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::vector<std::vector<int64_t>> lists;
};
}  // namespace cann

struct aclTensorDesc {
  int dtype = -1;
  int format = 2;
  int storage_format = 2;
  int placement = 0;  // ACL_MEMTYPE_DEVICE; 2 (ACL_MEMTYPE_HOST_COMPILE_INDEPENDENT) for host scalars
  std::vector<int64_t> dims;
  std::vector<int64_t> shape;  // aclSetTensorShape's (the storage shape), where set
  bool shape_set = false;
  std::string name;
  std::vector<unsigned char> constant;
};
struct aclDataBuffer {
  void* data;
  size_t size;
};
struct aclopAttr {
  std::map<std::string, cann::AttrValue> values;
};
struct aclTensor { cann::Tensor t; };
struct aclScalar { cann::Scalar s; };
struct aclIntArray { std::vector<int64_t> v; };
struct aclFloatArray { std::vector<float> v; };
struct aclBoolArray { std::vector<bool> v; };
struct aclTensorList { std::vector<cann::Tensor> v; };
struct aclScalarList { std::vector<cann::Scalar> v; };
