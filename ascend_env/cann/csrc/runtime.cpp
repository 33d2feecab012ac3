// The emulated CANN runtime: devices, memory, streams, events, compile options, tensor
// descriptors, aclnn argument objects, the ge:: registration symbols and the counters.
//
// Everything runs on the host: "device" memory is malloc'd, every aclrtMemcpy kind is memcpy, and
// since work is done synchronously (aclnnXxx and aclopCompileAndExecute compute before they
// return), synchronising a stream, an event or the device has nothing to wait for.
// Signatures and types come from the ACL headers torch_npu ships
// (torch_npu/include/third_party/acl/inc); the options and the SoC answers follow what the real
// binary asks for at start-up (docs: shared/design/real-torch-npu.md).
#include <acl/acl.h>
#include <acl/acl_op_compiler.h>
#include <graph/ascend_string.h>
#include <graph/operator.h>
#include <graph/operator_factory.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <unistd.h>

#include "cann.h"

namespace cann {
namespace {
// The state is never destroyed (heap, not static objects): the report is written by a static
// destructor at exit, after function-local statics constructed later are gone.
std::mutex& lock() {
  static auto* m = new std::mutex();
  return *m;
}
// kind -> name -> count; kept for the life of the process (never destroyed: read at exit).
std::map<std::string, std::map<std::string, int64_t>>& counters() {
  static auto* c = new std::map<std::string, std::map<std::string, int64_t>>();
  return *c;
}
std::vector<std::pair<int, std::string>>& compile_calls() {
  static auto* c = new std::vector<std::pair<int, std::string>>();
  return *c;
}
std::map<int, std::string>& options() {
  static auto* o = new std::map<int, std::string>();
  return *o;
}
std::string& last_error() {
  static auto* e = new std::string();
  return *e;
}
std::set<std::string>& printed() {
  static auto* p = new std::set<std::string>();
  return *p;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

std::string report_json() {
  std::lock_guard<std::mutex> g(lock());
  std::string out = "{\"soc\": ";
  json_string(out, soc());
  out += ", \"counters\": {";
  bool first_kind = true;
  for (auto& kind : counters()) {
    out += first_kind ? "" : ", ";
    first_kind = false;
    json_string(out, kind.first);
    out += ": {";
    bool first = true;
    for (auto& entry : kind.second) {
      out += first ? "" : ", ";
      first = false;
      json_string(out, entry.first);
      out += ": " + std::to_string(entry.second);
    }
    out += "}";
  }
  out += "}, \"compile_options_set\": [";
  bool first = true;
  for (auto& call : compile_calls()) {
    out += first ? "[" : ", [";
    first = false;
    out += std::to_string(call.first) + ", ";
    json_string(out, call.second);
    out += "]";
  }
  out += "]}";
  return out;
}

struct ReportAtExit {
  ~ReportAtExit() {
    const char* env = getenv("ASCEND_ENV_CANN_REPORT");
    if (!env || !*env) return;
    // "%p" in the path stands for the process id: one file per process where several share it.
    std::string path = env;
    for (size_t at = path.find("%p"); at != std::string::npos; at = path.find("%p"))
      path.replace(at, 2, std::to_string(getpid()));
    std::string text = report_json();
    std::string partial = path + ".partial";
    if (FILE* f = fopen(partial.c_str(), "w")) {
      fwrite(text.data(), 1, text.size(), f);
      fclose(f);
      rename(partial.c_str(), path.c_str());
    }
  }
} report_at_exit;
}  // namespace

void count(const char* kind, const std::string& name) {
  std::lock_guard<std::mutex> g(lock());
  counters()[kind][name] += 1;
}

int fail(const std::string& message, int code) {
  std::lock_guard<std::mutex> g(lock());
  last_error() = message;
  if (printed().insert(message).second) {
    std::string line = message + "\n";
    ssize_t ignored = write(2, line.data(), line.size());
    (void)ignored;
  }
  return code;
}

int unimplemented(const char* name, int code) {
  count("unimplemented", name);
  return fail(std::string("ascend-env emulated CANN: ") + name + " is not implemented", code);
}

namespace {
std::map<const void*, char>& objects() {
  static auto* o = new std::map<const void*, char>();
  return *o;
}
template <typename P>
P* track(P* p, char kind) {
  std::lock_guard<std::mutex> g(lock());
  objects()[p] = kind;
  return p;
}
template <typename P>
int untrack(const P* p) {
  {
    std::lock_guard<std::mutex> g(lock());
    objects().erase(p);
  }
  delete p;
  return 0;
}
}  // namespace

bool live(const void* ptr, char kind) {
  std::lock_guard<std::mutex> g(lock());
  auto found = objects().find(ptr);
  return found != objects().end() && found->second == kind;
}

const std::string& soc() {
  static const std::string* name = [] {
    const char* env = getenv("ASCEND_ENV_SOC");
    return new std::string(env && *env ? env : "Ascend910B1");
  }();
  return *name;
}

}  // namespace cann

using cann::count;

extern "C" {

// ---- The report, for ctypes: the JSON text's length; copied into buf where it fits.
size_t ascend_env_cann_report(char* buf, size_t length) {
  std::string text = cann::report_json();
  if (buf && length > text.size()) memcpy(buf, text.c_str(), text.size() + 1);
  return text.size();
}

// ---- Process, logging, errors.
aclError aclInit(const char*) { return ACL_SUCCESS; }
aclError aclFinalize() { return ACL_SUCCESS; }
void aclAppLog(aclLogLevel, const char*, const char*, uint32_t, const char*, ...) {}
const char* aclGetRecentErrMsg() {
  std::lock_guard<std::mutex> g(cann::lock());
  static thread_local std::string copy;
  copy = cann::last_error();
  return copy.empty() ? nullptr : copy.c_str();
}
aclError aclmdlInitDump() { return ACL_SUCCESS; }
aclError aclmdlSetDump(const char*) { return ACL_SUCCESS; }
aclError aclmdlFinalizeDump() { return ACL_SUCCESS; }
aclError aclGetCannAttribute(aclCannAttr, int32_t* value) {
  if (value) *value = 0;
  return ACL_SUCCESS;
}
aclError aclGetDeviceCapability(uint32_t, aclDeviceInfo, int64_t* value) {
  if (value) *value = 0;
  return ACL_SUCCESS;
}

// ---- Devices and contexts: one device, 0.
static thread_local int32_t current_device = 0;
static int context_token;
aclError aclrtSetDevice(int32_t id) {
  if (id != 0) return cann::fail("ascend-env emulated CANN: only device 0 exists", ACL_ERROR_INVALID_PARAM);
  current_device = id;
  return ACL_SUCCESS;
}
aclError aclrtGetDevice(int32_t* id) {
  *id = current_device;
  return ACL_SUCCESS;
}
aclError aclrtGetDeviceCount(uint32_t* n) {
  *n = 1;
  return ACL_SUCCESS;
}
aclError aclrtResetDevice(int32_t) { return ACL_SUCCESS; }
aclError aclrtSynchronizeDevice() { return ACL_SUCCESS; }
aclError aclrtGetCurrentContext(aclrtContext* context) {
  *context = &context_token;
  return ACL_SUCCESS;
}
aclError aclrtSetCurrentContext(aclrtContext) { return ACL_SUCCESS; }
aclError aclrtCtxSetSysParamOpt(aclSysParamOpt, int64_t) { return ACL_SUCCESS; }
aclError aclrtDeviceCanAccessPeer(int32_t* can, int32_t, int32_t) {
  *can = 0;
  return ACL_SUCCESS;
}
aclError aclrtDeviceEnablePeerAccess(int32_t, uint32_t) { return ACL_SUCCESS; }
aclError aclrtSetExceptionInfoCallback(aclrtExceptionInfoCallback) { return ACL_SUCCESS; }
aclError aclrtSetDeviceSatMode(aclrtFloatOverflowMode) { return ACL_SUCCESS; }
aclError aclrtSetOpExecuteTimeOut(uint32_t) { return ACL_SUCCESS; }
aclError aclrtSetOpWaitTimeout(uint32_t) { return ACL_SUCCESS; }
const char* aclrtGetSocName() { return cann::soc().c_str(); }

// ---- Memory: the host's.
static const size_t kTotalMemory = size_t(32) << 30;
aclError aclrtMalloc(void** ptr, size_t size, aclrtMemMallocPolicy) {
  *ptr = aligned_alloc(512, (size + 511) / 512 * 512 + 512);
  return *ptr ? ACL_SUCCESS : cann::fail("ascend-env emulated CANN: out of host memory", ACL_ERROR_BAD_ALLOC);
}
aclError aclrtMallocAlign32(void** ptr, size_t size, aclrtMemMallocPolicy policy) {
  return aclrtMalloc(ptr, size, policy);
}
aclError aclrtFree(void* ptr) {
  free(ptr);
  return ACL_SUCCESS;
}
aclError aclrtMallocHost(void** ptr, size_t size) { return aclrtMalloc(ptr, size, ACL_MEM_MALLOC_HUGE_FIRST); }
aclError aclrtFreeHost(void* ptr) { return aclrtFree(ptr); }
aclError aclrtReserveMemAddress(void** ptr, size_t size, size_t, void*, uint64_t) {
  return aclrtMalloc(ptr, size, ACL_MEM_MALLOC_HUGE_FIRST);
}
aclError aclrtReleaseMemAddress(void* ptr) { return aclrtFree(ptr); }
aclError aclrtMemcpy(void* dst, size_t dest_max, const void* src, size_t count, aclrtMemcpyKind) {
  if (count > dest_max) return cann::fail("ascend-env emulated CANN: aclrtMemcpy past its destination", ACL_ERROR_INVALID_PARAM);
  if (count) memmove(dst, src, count);
  return ACL_SUCCESS;
}
aclError aclrtMemcpyAsync(void* dst, size_t dest_max, const void* src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream) {
  return aclrtMemcpy(dst, dest_max, src, count, kind);
}
aclError aclrtMemset(void* dst, size_t dest_max, int32_t value, size_t count) {
  if (count > dest_max) return cann::fail("ascend-env emulated CANN: aclrtMemset past its destination", ACL_ERROR_INVALID_PARAM);
  memset(dst, value, count);
  return ACL_SUCCESS;
}
aclError aclrtMemsetAsync(void* dst, size_t dest_max, int32_t value, size_t count, aclrtStream) {
  return aclrtMemset(dst, dest_max, value, count);
}
aclError aclrtGetMemInfo(aclrtMemAttr, size_t* free_bytes, size_t* total) {
  *free_bytes = kTotalMemory;
  *total = kTotalMemory;
  return ACL_SUCCESS;
}

// ---- Streams and events: work is done when it is submitted.
aclError aclrtCreateStream(aclrtStream* stream) {
  *stream = new int(0);
  return ACL_SUCCESS;
}
aclError aclrtCreateStreamWithConfig(aclrtStream* stream, uint32_t, uint32_t) { return aclrtCreateStream(stream); }
aclError aclrtDestroyStream(aclrtStream stream) {
  delete static_cast<int*>(stream);
  return ACL_SUCCESS;
}
aclError aclrtDestroyStreamForce(aclrtStream stream) { return aclrtDestroyStream(stream); }
aclError aclrtSynchronizeStream(aclrtStream) { return ACL_SUCCESS; }
aclError aclrtSynchronizeStreamWithTimeout(aclrtStream, int32_t) { return ACL_SUCCESS; }
aclError aclrtStreamQuery(aclrtStream, aclrtStreamStatus* status) {
  *status = ACL_STREAM_STATUS_COMPLETE;
  return ACL_SUCCESS;
}
aclError aclrtSetStreamFailureMode(aclrtStream, uint64_t) { return ACL_SUCCESS; }
aclError aclrtSetStreamOverflowSwitch(aclrtStream, uint32_t) { return ACL_SUCCESS; }
aclError aclrtGetStreamOverflowSwitch(aclrtStream, uint32_t* flag) {
  *flag = 0;
  return ACL_SUCCESS;
}
aclError aclrtStreamWaitEvent(aclrtStream, aclrtEvent) { return ACL_SUCCESS; }

struct EmulatedEvent {
  double ms = 0;
};
static double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}
aclError aclrtCreateEvent(aclrtEvent* event) {
  *event = new EmulatedEvent();
  return ACL_SUCCESS;
}
aclError aclrtCreateEventWithFlag(aclrtEvent* event, uint32_t) { return aclrtCreateEvent(event); }
aclError aclrtCreateEventExWithFlag(aclrtEvent* event, uint32_t) { return aclrtCreateEvent(event); }
aclError aclrtDestroyEvent(aclrtEvent event) {
  delete static_cast<EmulatedEvent*>(event);
  return ACL_SUCCESS;
}
aclError aclrtRecordEvent(aclrtEvent event, aclrtStream) {
  static_cast<EmulatedEvent*>(event)->ms = now_ms();
  return ACL_SUCCESS;
}
aclError aclrtSynchronizeEvent(aclrtEvent) { return ACL_SUCCESS; }
aclError aclrtQueryEvent(aclrtEvent, aclrtEventStatus* status) {
  *status = ACL_EVENT_STATUS_COMPLETE;
  return ACL_SUCCESS;
}
aclError aclrtQueryEventStatus(aclrtEvent, aclrtEventRecordedStatus* status) {
  *status = ACL_EVENT_RECORDED_STATUS_COMPLETE;
  return ACL_SUCCESS;
}
aclError aclrtQueryEventWaitStatus(aclrtEvent, aclrtEventWaitStatus* status) {
  *status = ACL_EVENT_WAIT_STATUS_COMPLETE;
  return ACL_SUCCESS;
}
aclError aclrtEventElapsedTime(float* ms, aclrtEvent start, aclrtEvent end) {
  *ms = static_cast<float>(static_cast<EmulatedEvent*>(end)->ms - static_cast<EmulatedEvent*>(start)->ms);
  return ACL_SUCCESS;
}

// ---- Compile options: recorded. ACL_OP_JIT_COMPILE starts "disable" where the SoC is a 910B
// (and later), "enable" elsewhere, as CANN does.
size_t aclGetCompileoptSize(aclCompileOpt) { return 256; }
aclError aclGetCompileopt(aclCompileOpt opt, char* value, size_t length) {
  std::string answer;
  {
    std::lock_guard<std::mutex> g(cann::lock());
    auto found = cann::options().find(opt);
    if (found != cann::options().end()) {
      answer = found->second;
    } else if (opt == ACL_OP_JIT_COMPILE) {
      answer = cann::soc().find("910B") != std::string::npos || cann::soc().find("910_93") != std::string::npos
                   ? "disable"
                   : "enable";
    }
  }
  if (!value || length <= answer.size()) return ACL_ERROR_INVALID_PARAM;
  memcpy(value, answer.c_str(), answer.size() + 1);
  return ACL_SUCCESS;
}
aclError aclSetCompileopt(aclCompileOpt opt, const char* value) {
  std::lock_guard<std::mutex> g(cann::lock());
  cann::options()[opt] = value ? value : "";
  cann::compile_calls().emplace_back(opt, value ? value : "");
  cann::counters()["aclSetCompileopt"][std::to_string(opt) + "=" + (value ? value : "")] += 1;
  return ACL_SUCCESS;
}

// ---- Tensor descriptors, data buffers and aclop attributes (aclop's arguments).
aclTensorDesc* aclCreateTensorDesc(aclDataType dtype, int num_dims, const int64_t* dims, aclFormat format) {
  auto* desc = new aclTensorDesc();
  desc->dtype = dtype;
  desc->format = desc->storage_format = format;
  if (num_dims > 0 && dims) desc->dims.assign(dims, dims + num_dims);
  return desc;
}
void aclDestroyTensorDesc(const aclTensorDesc* desc) { delete desc; }
aclDataType aclGetTensorDescType(const aclTensorDesc* desc) { return desc ? aclDataType(desc->dtype) : ACL_DT_UNDEFINED; }
aclFormat aclGetTensorDescFormat(const aclTensorDesc* desc) { return desc ? aclFormat(desc->format) : ACL_FORMAT_UNDEFINED; }
size_t aclGetTensorDescNumDims(const aclTensorDesc* desc) { return desc ? desc->dims.size() : 0; }
aclError aclGetTensorDescDimV2(const aclTensorDesc* desc, size_t index, int64_t* size) {
  if (!desc || index >= desc->dims.size()) return ACL_ERROR_INVALID_PARAM;
  *size = desc->dims[index];
  return ACL_SUCCESS;
}
void aclSetTensorDescName(aclTensorDesc* desc, const char* name) {
  if (desc && name) desc->name = name;
}
aclError aclSetTensorFormat(aclTensorDesc* desc, aclFormat format) {
  desc->storage_format = format;
  return ACL_SUCCESS;
}
aclError aclSetTensorPlaceMent(aclTensorDesc* desc, aclMemType placement) {
  desc->placement = placement;
  return ACL_SUCCESS;
}
aclError aclSetTensorShape(aclTensorDesc* desc, int num_dims, const int64_t* dims) {
  desc->shape.assign(dims, dims + num_dims);
  desc->shape_set = true;
  return ACL_SUCCESS;
}
aclError aclSetTensorConst(aclTensorDesc* desc, void* data, size_t length) {
  auto* bytes = static_cast<unsigned char*>(data);
  desc->constant.assign(bytes, bytes + length);
  return ACL_SUCCESS;
}
aclDataBuffer* aclCreateDataBuffer(void* data, size_t size) { return new aclDataBuffer{data, size}; }
aclError aclDestroyDataBuffer(const aclDataBuffer* buffer) {
  delete buffer;
  return ACL_SUCCESS;
}
void* aclGetDataBufferAddr(const aclDataBuffer* buffer) { return buffer ? buffer->data : nullptr; }
size_t aclGetDataBufferSizeV2(const aclDataBuffer* buffer) { return buffer ? buffer->size : 0; }

aclopAttr* aclopCreateAttr() { return new aclopAttr(); }
void aclopDestroyAttr(const aclopAttr* attr) { delete attr; }
static cann::AttrValue& attr_slot(aclopAttr* attr, const char* name, char kind) {
  auto& value = attr->values[name];
  value = cann::AttrValue();
  value.kind = kind;
  return value;
}
aclError aclopSetAttrBool(aclopAttr* attr, const char* name, uint8_t value) {
  attr_slot(attr, name, 'b').i = value;
  return ACL_SUCCESS;
}
aclError aclopSetAttrInt(aclopAttr* attr, const char* name, int64_t value) {
  attr_slot(attr, name, 'i').i = value;
  return ACL_SUCCESS;
}
aclError aclopSetAttrFloat(aclopAttr* attr, const char* name, float value) {
  attr_slot(attr, name, 'f').f = value;
  return ACL_SUCCESS;
}
aclError aclopSetAttrString(aclopAttr* attr, const char* name, const char* value) {
  attr_slot(attr, name, 's').s = value ? value : "";
  return ACL_SUCCESS;
}
aclError aclopSetAttrDataType(aclopAttr* attr, const char* name, aclDataType value) {
  attr_slot(attr, name, 'd').i = value;
  return ACL_SUCCESS;
}
aclError aclopSetAttrListBool(aclopAttr* attr, const char* name, int n, const uint8_t* values) {
  attr_slot(attr, name, 'B').ints.assign(values, values + n);
  return ACL_SUCCESS;
}
aclError aclopSetAttrListInt(aclopAttr* attr, const char* name, int n, const int64_t* values) {
  attr_slot(attr, name, 'I').ints.assign(values, values + n);
  return ACL_SUCCESS;
}
aclError aclopSetAttrListFloat(aclopAttr* attr, const char* name, int n, const float* values) {
  attr_slot(attr, name, 'F').floats.assign(values, values + n);
  return ACL_SUCCESS;
}
aclError aclopSetAttrListListInt(aclopAttr* attr, const char* name, int n, const int* counts,
                                 const int64_t* const values[]) {
  auto& slot = attr_slot(attr, name, 'L');
  for (int k = 0; k < n; ++k) slot.lists.emplace_back(values[k], values[k] + counts[k]);
  return ACL_SUCCESS;
}

// ---- aclnn's argument objects (op-plugin op_plugin/utils/op_api_common.h, commit b761d58:
// ConvertType calls aclCreateTensor with the view's sizes and strides, the storage offset and
// the storage's base pointer).
aclTensor* aclCreateTensor(const int64_t* view_dims, uint64_t view_num, aclDataType dtype, const int64_t* strides,
                           int64_t offset, aclFormat format, const int64_t* storage_dims, uint64_t storage_num,
                           void* data) {
  auto* tensor = new aclTensor();
  cann::Tensor& t = tensor->t;
  t.defined = true;
  t.dtype = dtype;
  t.format = format;
  t.sizes.assign(view_dims, view_dims + view_num);
  if (strides) t.strides.assign(strides, strides + view_num);
  if (storage_dims) t.storage.assign(storage_dims, storage_dims + storage_num);
  t.offset = offset;
  t.data = data;
  return cann::track(tensor, 'T');
}
aclScalar* aclCreateScalar(void* value, aclDataType dtype) {
  auto* scalar = new aclScalar();
  scalar->s.dtype = dtype;
  size_t size = dtype == ACL_DOUBLE || dtype == ACL_INT64 || dtype == ACL_COMPLEX64 ? 8
                : dtype == ACL_COMPLEX128                                            ? 16
                : dtype == ACL_BOOL || dtype == ACL_INT8 || dtype == ACL_UINT8       ? 1
                : dtype == ACL_FLOAT16 || dtype == ACL_BF16 || dtype == ACL_INT16    ? 2
                                                                                     : 4;
  memcpy(scalar->s.value, value, size);
  return cann::track(scalar, 'S');
}
aclIntArray* aclCreateIntArray(const int64_t* values, uint64_t n) {
  return cann::track(new aclIntArray{{values, values + n}}, 'A');
}
aclFloatArray* aclCreateFloatArray(const float* values, uint64_t n) {
  return cann::track(new aclFloatArray{{values, values + n}}, 'F');
}
aclBoolArray* aclCreateBoolArray(const bool* values, uint64_t n) {
  return cann::track(new aclBoolArray{{values, values + n}}, 'B');
}
aclTensorList* aclCreateTensorList(const aclTensor* const* values, uint64_t n) {
  auto* list = new aclTensorList();
  for (uint64_t k = 0; k < n; ++k) list->v.push_back(values[k] ? values[k]->t : cann::Tensor());
  return cann::track(list, 'L');
}
aclScalarList* aclCreateScalarList(const aclScalar* const* values, uint64_t n) {
  auto* list = new aclScalarList();
  for (uint64_t k = 0; k < n; ++k) list->v.push_back(values[k]->s);
  return cann::track(list, 'C');
}
int aclDestroyTensor(const aclTensor* p) { return cann::untrack(p); }
int aclDestroyScalar(const aclScalar* p) { return cann::untrack(p); }
int aclDestroyIntArray(const aclIntArray* p) { return cann::untrack(p); }
int aclDestroyFloatArray(const aclFloatArray* p) { return cann::untrack(p); }
int aclDestroyBoolArray(const aclBoolArray* p) { return cann::untrack(p); }
int aclDestroyTensorList(const aclTensorList* p) { return cann::untrack(p); }
int aclDestroyScalarList(const aclScalarList* p) { return cann::untrack(p); }

}  // extern "C"

// ---- ge:: operator registration, run by torch_npu's static initialisers: nothing to register.
namespace ge {
AscendString::AscendString(const char* name) {
  if (name) name_ = std::make_shared<std::string>(name);
}
Operator::Operator(const char*, const char*) {}
Operator::Operator(const AscendString&, const AscendString&) {}
void Operator::InputRegister(const char*) {}
void Operator::OutputRegister(const char*) {}
void Operator::DynamicInputRegister(const char*, const uint32_t, bool) {}
void Operator::DynamicInputRegisterByIndex(const char*, const uint32_t, size_t) {}
void Operator::RequiredAttrRegister(const char*) {}
void Operator::AttrRegister(const char*, bool) {}
void Operator::AttrRegister(const char*, int64_t) {}
OperatorCreatorRegister::OperatorCreatorRegister(const char*, const OpCreatorV2&) {}
}  // namespace ge
