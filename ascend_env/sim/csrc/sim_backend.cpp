// The simulated Ascend NPU: PyTorch's PrivateUse1 backend with CPU memory behind it.
//
// Memory: tensors on npu:0 live in host memory allocated by SimAllocator; their storage's DataPtr
// says PrivateUse1, so the rest of PyTorch treats them as device tensors.
//
// Dispatch, as torch_npu does it:
//   * the infrastructure kernels below (empty, copy, resize, views) are always registered;
//   * enable_table() registers a pass-through kernel for each op of one torch_npu release's
//     `supported:` lists: it runs the op's CPU kernel on CPU views of the same memory, silently
//     (an op PyTorch builds out of other ops runs that decomposition on npu: runs_decomposition);
//   * autograd is PyTorch's: the derivative formulas of the ops that run, whether native or not;
//   * a `_foreach_*` op the table does not list runs PyTorch's per-tensor loop (foreach_slow);
//   * what a listed op's decomposition reaches, and the backward of what it reaches, is its kernel's
//     insides: an unlisted op there runs on the CPU uncounted (the insides of a listed op);
//   * CPU and npu tensors are shallow-copy compatible, as on torch_npu (`param.data = t`);
//   * every other op reaches the boxed fallback, which does what torch_npu's npu_cpu_fallback does:
//     count it, warn once per op per process on fd 2, and run it on the CPU (at::native::cpu_fallback).
//
// Process-wide state (the dispatcher registrations, the fallback counts, the set of warned ops) lives
// in the `state()` singleton at the end of the anonymous namespace; Python reaches it through the
// `ascend_sim::*` operators defined at the bottom of this file.
//
// One source for torch 2.1 to the newest: `c10::optional` (its own class in torch 2.1 and 2.2, an alias
// of std::optional since); and the members that only some torch versions declare virtual
// (Allocator::copy_data from 2.3, DeviceGuardImplInterface::getNewStream and synchronizeDevice,
// most PrivateUse1 hooks) carry no `override`: they override where the base class declares them
// and are unused extras where it does not.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/SequenceNumber.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/record_function.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/library.h>
#include <torch/version.h>
#if __has_include(<ATen/core/GeneratorForPrivateuseone.h>)
#include <ATen/core/GeneratorForPrivateuseone.h>
#define ASCEND_SIM_GENERATOR_REGISTER 1
#endif

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;
const c10::Device kNpuDevice(kNpu, 0);

// ---------------------------------------------------------------- memory

// Byte counts of the npu memory in use, for torch.npu.memory_allocated() and its peak.
struct MemoryCounts {
  std::mutex mutex;
  std::unordered_map<void*, size_t> sizes;
  int64_t allocated = 0;
  int64_t peak = 0;
};

MemoryCounts& memory_counts() {
  static auto* counts = new MemoryCounts();
  return *counts;
}

struct SimAllocator final : c10::Allocator {
  // `allocate` is const up to torch 2.2 and not const from 2.3: define both, one overrides.
  c10::DataPtr allocate(size_t nbytes) const {
    void* data = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (data) {
      MemoryCounts& counts = memory_counts();
      std::lock_guard<std::mutex> lock(counts.mutex);
      counts.sizes[data] = nbytes;
      counts.allocated += static_cast<int64_t>(nbytes);
      counts.peak = std::max(counts.peak, counts.allocated);
    }
    return {data, data, &release, kNpuDevice};
  }
  c10::DataPtr allocate(size_t nbytes) { return static_cast<const SimAllocator*>(this)->allocate(nbytes); }
  static void release(void* ptr) {
    if (ptr) {
      {
        MemoryCounts& counts = memory_counts();
        std::lock_guard<std::mutex> lock(counts.mutex);
        auto it = counts.sizes.find(ptr);
        if (it != counts.sizes.end()) {
          counts.allocated -= static_cast<int64_t>(it->second);
          counts.sizes.erase(it);
        }
      }
      c10::free_cpu(ptr);
    }
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count) {
      std::memcpy(dest, src, count);
    }
  }
};

SimAllocator sim_allocator;

// Pinned host memory (torch_npu's pinned allocator hands out page-locked host memory): ordinary host
// memory whose blocks are remembered, so that `is_pinned()` can tell them from other CPU memory.
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) const {
    void* data = c10::alloc_cpu(nbytes ? nbytes : 1);
    {
      std::lock_guard<std::mutex> lock(mutex());
      blocks()[data] = nbytes;
    }
    return {data, data, &release, c10::Device(c10::kCPU)};
  }
  c10::DataPtr allocate(size_t nbytes) { return static_cast<const PinnedAllocator*>(this)->allocate(nbytes); }
  static void release(void* ptr) {
    {
      std::lock_guard<std::mutex> lock(mutex());
      blocks().erase(ptr);
    }
    c10::free_cpu(ptr);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const {
    if (count) {
      std::memcpy(dest, src, count);
    }
  }
  // Whether `ptr` points into a block this allocator handed out.
  static bool owns(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex());
    auto it = blocks().upper_bound(const_cast<void*>(ptr));
    if (it == blocks().begin()) {
      return false;
    }
    --it;
    const char* base = static_cast<const char*>(it->first);
    const char* p = static_cast<const char*>(ptr);
    return p >= base && p < base + std::max<size_t>(it->second, 1);
  }
  static std::mutex& mutex() {
    static std::mutex* m = new std::mutex();
    return *m;
  }
  static std::map<void*, size_t>& blocks() {
    static auto* b = new std::map<void*, size_t>();
    return *b;
  }
};

PinnedAllocator pinned_allocator;

// ---------------------------------------------------------------- random numbers
//
// An npu generator is a CPU generator (mt19937, the CPU's algorithm, so that a seeded npu stream
// reproduces the CPU's) that says it lives on npu:0. CPU kernels accept only CPU generators, so an
// op on npu runs with a CPU twin that takes the npu generator's state and gives it back afterwards.
struct NpuGenerator final : at::CPUGeneratorImpl {
  explicit NpuGenerator(uint64_t seed = c10::default_rng_seed_val) : at::CPUGeneratorImpl(seed) {
    device_ = kNpuDevice;
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
  NpuGenerator* clone_impl() const override {
    auto* copy = new NpuGenerator();
    copy_state(const_cast<NpuGenerator*>(this), copy);
    return copy;
  }
  static void copy_state(at::CPUGeneratorImpl* from, at::CPUGeneratorImpl* to) {
    to->set_engine(from->engine());
    to->set_next_float_normal_sample(from->next_float_normal_sample());
    to->set_next_double_normal_sample(from->next_double_normal_sample());
  }
};

at::Generator new_npu_generator(c10::DeviceIndex = -1) { return at::make_generator<NpuGenerator>(); }

const at::Generator& default_npu_generator() {
  static const at::Generator* generator = new at::Generator(at::make_generator<NpuGenerator>());
  return *generator;
}


// The generators of one npu op: each npu generator argument (or the npu default generator, where the
// op was given none) swapped for a CPU twin while the CPU kernel runs.
struct GeneratorSwaps {
  std::vector<std::pair<at::Generator, at::Generator>> swaps;  // (npu generator, its CPU twin)

  void swap_in(const c10::FunctionSchema& schema, torch::jit::Stack* stack, size_t first) {
    const auto& arguments = schema.arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      c10::IValue& value = (*stack)[first + i];
      at::Generator npu;
      if (value.isGenerator()) {
        npu = value.toGenerator();
        if (npu.device().type() != kNpu) {
          continue;
        }
      } else if (value.isNone() && arguments[i].type()->str().rfind("Generator", 0) == 0) {
        npu = default_npu_generator();
      } else {
        continue;
      }
      at::Generator cpu = at::make_generator<at::CPUGeneratorImpl>();
      {
        std::lock_guard<std::mutex> lock(npu.mutex());
        NpuGenerator::copy_state(npu.get<at::CPUGeneratorImpl>(), cpu.get<at::CPUGeneratorImpl>());
      }
      value = c10::IValue(cpu);
      swaps.emplace_back(npu, cpu);
    }
  }

  void swap_out() {
    for (auto& [npu, cpu] : swaps) {
      std::lock_guard<std::mutex> lock(npu.mutex());
      NpuGenerator::copy_state(cpu.get<at::CPUGeneratorImpl>(), npu.get<at::CPUGeneratorImpl>());
    }
  }
};

// The conjugate and negative bits of a lazily conjugated or negated view (`x.conj()`, `_neg_view`)
// carried from one tensor to another over the same bytes: a kernel that reads the view must see
// the bits, or it computes with the unconjugated values (`x.conj().clone()` returning `x`).
void copy_math_bits(const at::Tensor& from, const at::Tensor& to) {
  to.unsafeGetTensorImpl()->_set_conj(from.is_conj());
  to.unsafeGetTensorImpl()->_set_neg(from.is_neg());
}

// A tensor for dispatch `key` over `storage`, with the dtype, sizes, strides and storage offset of
// `like` (not its conjugate and negative bits: the caller decides).
at::Tensor tensor_over(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  auto tensor = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), like.dtype());
  tensor.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return tensor;
}

// A CPU tensor over the memory of an npu tensor: its own CPU StorageImpl around the same bytes
// (not owning them), so that every view a CPU kernel derives from it is a CPU tensor too; with the
// npu tensor's conjugate and negative bits, which the CPU kernels resolve as they do for CPU
// tensors. The caller keeps the npu tensor alive while the view is in use.
at::Tensor cpu_view(const at::Tensor& npu) {
  const c10::Storage& source = npu.storage();
  c10::Storage storage(c10::Storage::use_byte_size_t(), source.nbytes(),
                       c10::DataPtr(const_cast<void*>(source.data()), c10::Device(c10::kCPU)),
                       c10::GetCPUAllocator(), /*resizable=*/true);
  auto view = tensor_over(std::move(storage), c10::DispatchKey::CPU, npu);
  copy_math_bits(npu, view);
  return view;
}

// An npu tensor over `storage` with the geometry (and conjugate and negative bits) of `like`.
at::Tensor npu_over(const c10::Storage& storage, const at::Tensor& like) {
  auto tensor = tensor_over(storage, c10::DispatchKey::PrivateUse1, like);
  copy_math_bits(like, tensor);
  return tensor;
}

// A fresh npu copy of a CPU tensor, storage and geometry alike (strides kept exactly).
c10::Storage npu_storage_copy(const c10::Storage& cpu) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), cpu.nbytes(), &sim_allocator, /*resizable=*/true);
  if (cpu.nbytes()) {
    std::memcpy(storage.mutable_data(), cpu.data(), cpu.nbytes());
  }
  return storage;
}

// ---------------------------------------------------------------- infrastructure kernels

at::Tensor empty_memory_format(c10::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                               c10::optional<at::Layout>, c10::optional<at::Device>,
                               c10::optional<bool>, c10::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &sim_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, c10::optional<at::ScalarType> dtype,
                         c10::optional<at::Layout>, c10::optional<at::Device>, c10::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, &sim_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor as_cpu(const at::Tensor& t) { return t.device().type() == kNpu ? cpu_view(t) : t; }

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool) {
  TORCH_CHECK(self.device().type() == kNpu || self.is_cpu(), "npu copy: unsupported source device ", self.device());
  TORCH_CHECK(dst.device().type() == kNpu || dst.is_cpu(), "npu copy: unsupported target device ", dst.device());
  as_cpu(dst).copy_(as_cpu(self));
  return dst;
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size,
                          c10::optional<at::MemoryFormat> memory_format) {
  at::TensorImpl* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(size);
  const auto nbytes = at::detail::computeStorageNbytesContiguous(size, impl->dtype().itemsize(),
                                                                 impl->storage_offset());
  at::native::maybe_resize_storage_cpu(impl, nbytes);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    resize_(dst, self.sizes(), c10::nullopt);
  }
  return copy_from(self, dst, false);
}

at::Tensor& set_source_storage_offset(at::Tensor& result, c10::Storage storage, int64_t offset,
                                      c10::IntArrayRef size, c10::IntArrayRef stride) {
  result.unsafeGetTensorImpl()->set_storage_keep_dtype(std::move(storage));
  result.unsafeGetTensorImpl()->set_storage_offset(offset);
  at::OptionalIntArrayRef stride_opt =
      stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : c10::nullopt;
  at::native::resize_impl_cpu_(result.unsafeGetTensorImpl(), size, stride_opt, /*resize_storage=*/true);
  return result;
}

// set_(Storage): the whole storage as a 1-d tensor (at::storage_copy, behind UntypedStorage.copy_,
// clone() and deepcopy, sets tensors to storages this way).
at::Tensor& set_source_storage(at::Tensor& result, c10::Storage storage) {
  const int64_t itemsize = static_cast<int64_t>(result.dtype().itemsize());
  const int64_t numel = static_cast<int64_t>(storage.nbytes()) / itemsize;
  return set_source_storage_offset(result, std::move(storage), 0, {numel}, {});
}

at::Tensor& set_source_tensor(at::Tensor& result, const at::Tensor& source) {
  if (result.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) {
    return result;
  }
  return set_source_storage_offset(result, source.storage(), source.storage_offset(), source.sizes(),
                                   source.strides());
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

// Pinned memory with npu as the pinned backend (torch_npu's torch_npu/csrc/aten/PinMemory.cpp,
// Ascend/pytorch v6.0.rc2-pytorch2.1.0, commit 06cec48dda7dda594c652ec907cf296fc82a70c7, sends
// is_pinned and _pin_memory without a device to PrivateUse1 through BackendSelect; their
// PrivateUse1 kernels are these).
bool is_pinned(const at::Tensor& self, c10::optional<at::Device>) {
  return self.is_cpu() && self.has_storage() && self.storage().data() != nullptr &&
         PinnedAllocator::owns(self.storage().data());
}

at::Tensor pin_memory(const at::Tensor& self, c10::optional<at::Device>) {
  TORCH_CHECK(self.is_cpu(), "cannot pin '", self.toString(), "' only dense CPU tensors can be pinned");
  c10::Storage storage(c10::Storage::use_byte_size_t(), self.storage().nbytes(), &pinned_allocator,
                       /*resizable=*/false);
  auto pinned = tensor_over(std::move(storage), c10::DispatchKey::CPU, self);
  pinned.copy_(self);
  return pinned;
}

bool is_pinned_select(const at::Tensor& self, c10::optional<at::Device> device) {
  if (!self.is_cpu()) {
    return false;
  }
  c10::DispatchKeySet keys(c10::computeDispatchKey(c10::nullopt, self.layout(), device.value_or(kNpu)));
  return at::_ops::is_pinned::redispatch(keys, self, device);
}

at::Tensor pin_memory_select(const at::Tensor& self, c10::optional<at::Device> device) {
  TORCH_CHECK(self.is_cpu(), "cannot pin '", self.toString(), "' only dense CPU tensors can be pinned");
  c10::DispatchKeySet keys(c10::computeDispatchKey(c10::nullopt, self.layout(), device.value_or(kNpu)));
  return at::_ops::_pin_memory::redispatch(keys, self, device);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("is_pinned", &is_pinned);
  m.impl("_pin_memory", &pin_memory);
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("resize_", &resize_);
  m.impl("as_strided", at::native::as_strided_tensorimpl);
  m.impl("set_.source_Storage_storage_offset", &set_source_storage_offset);
  m.impl("set_.source_Storage", &set_source_storage);
  m.impl("set_.source_Tensor", &set_source_tensor);
  m.impl("view", &view);
  m.impl("_reshape_alias", &reshape_alias);
}

const std::set<std::string> kInfrastructure = {
    "is_pinned", "_pin_memory", "empty.memory_format", "empty_strided", "_copy_from", "_copy_from_and_resize",
    "resize_", "as_strided", "set_.source_Storage_storage_offset", "set_.source_Storage", "set_.source_Tensor",
    "view", "_reshape_alias",
};

// ---------------------------------------------------------------- device guard and hooks

struct SimGuardImpl final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device) const override { return kNpuDevice; }
  c10::Device getDevice() const override { return kNpuDevice; }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.index() <= 0, "the simulated NPU has one device, npu:0; got ", d);
  }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, kNpuDevice);
  }
  c10::Stream getNewStream(c10::Device, int = 0) const {
    return c10::Stream(c10::Stream::DEFAULT, kNpuDevice);
  }
  c10::Stream exchangeStream(c10::Stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, kNpuDevice);
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuardImpl);

struct SimHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const { return true; }
  bool isAvailable() const { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const { return true; }
  c10::DeviceIndex deviceCount() const { return 1; }
  c10::DeviceIndex getCurrentDevice() const { return 0; }
  at::Device getDeviceFromPtr(void*) const override { return kNpuDevice; }
  bool isPinnedPtr(const void* data) const { return PinnedAllocator::owns(data); }
  c10::Allocator* getPinnedMemoryAllocator() const { return &pinned_allocator; }
  // const from torch 2.2 (or so), not const in 2.1: define both, one overrides.
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const { return default_npu_generator(); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) { return default_npu_generator(); }
  at::Generator getNewGenerator(c10::DeviceIndex index = -1) const { return new_npu_generator(index); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
};

// ---------------------------------------------------------------- process-wide state

struct State {
  std::mutex mutex;
  std::unique_ptr<torch::Library> kernels;   // pass-through kernels of the enabled table
  std::unique_ptr<torch::Library> autograd;  // autograd fallthroughs of its composite ops
  // Their conjugate and negative fallthroughs: the decomposition gets the views as the CPU's does.
  std::vector<std::pair<c10::DispatchKey, std::unique_ptr<torch::Library>>> math_bits;
  std::unique_ptr<torch::Library> fallback;  // the boxed fallback
  std::vector<std::unique_ptr<torch::Library>> fallthroughs;  // autograd and autocast, where torch has none
  std::unique_ptr<torch::Library> pinned_select;  // is_pinned / _pin_memory default to npu
  std::unique_ptr<torch::Library> shallow_copy;   // CPU and npu tensors shallow-copy compatible
  bool fallback_disable_supported = false;   // whether the table honours TORCH_NPU_FALLBACK_CPU_DISABLE
  std::map<std::string, int64_t> counts;     // fallbacks since the last reset
  std::set<std::string> warned;              // ops whose warning line was written
};

// torch 2.1 to 2.3 register no autograd fallback for AutogradPrivateUse1 (they leave it to the
// extension; 2.13 has one), so an op with a PrivateUse1 kernel and no autograd kernel of its own
// cannot run; and no AutocastPrivateUse1 fallback in any version, so no op runs inside
// `torch.autocast("npu")`. torch_npu registers fallthroughs for both (Ascend/pytorch
// torch_npu/csrc/aten/VariableFallbackKernel.cpp, commit 5af0eb0a1728438c6094508c634e9cb1018ad6ca,
// and AutoCastOps.cpp); its autocast kernels are below (autocast policy).
std::vector<std::unique_ptr<torch::Library>> missing_fallthroughs() {
  std::vector<std::unique_ptr<torch::Library>> libraries;
  for (auto key : {c10::DispatchKey::AutogradPrivateUse1, c10::DispatchKey::AutocastPrivateUse1}) {
    if (!c10::Dispatcher::singleton().hasBackendFallbackForDispatchKey(key)) {
      auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "_", key, __FILE__, __LINE__);
      library->fallback(torch::CppFunction::makeFallthrough());
      libraries.push_back(std::move(library));
    }
  }
  return libraries;
}

// ---------------------------------------------------------------- autocast policy
//
// Inside `torch.autocast("npu", dtype)` the ops below cast their floating-point npu arguments as
// torch_npu's AutocastPrivateUse1 kernels do (torch_npu/csrc/aten/AutoCastOps.cpp, the same list
// on Ascend/pytorch branch v2.1.0-6.0.rc2, commit 5c2df843879f67947f7bc24e2f8cfca73be3ef3d, and
// master, commit 9e73e708ab9350d203475609f36f8a43f6a0c2ab), with PyTorch's own casting wrappers:
// matrix products and convolutions to the autocast dtype, reductions, losses and norms to float32,
// binary_cross_entropy refused. Every other op runs in the dtypes it is given (the fallthrough).

#ifdef KERNEL_PRIVATEUSEONE2  // torch 2.1 to 2.3: a macro for ops with an overload name
#define SIM_AUTOCAST_OVERLOAD(OP, OVERLOAD, POLICY) KERNEL_PRIVATEUSEONE2(OP, OVERLOAD, POLICY)
#else
#define SIM_AUTOCAST_OVERLOAD(OP, OVERLOAD, POLICY) KERNEL_PRIVATEUSEONE(OP, OVERLOAD, POLICY)
#endif

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const c10::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // lower_precision_fp
  SIM_AUTOCAST_OVERLOAD(_convolution, deprecated, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv3d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_tbc, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv_transpose1d, lower_precision_fp)
  SIM_AUTOCAST_OVERLOAD(conv_transpose2d, input, lower_precision_fp)
  SIM_AUTOCAST_OVERLOAD(conv_transpose3d, input, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(cudnn_convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(cudnn_convolution_transpose, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(prelu, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmv, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addr, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(einsum, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mv, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(baddbmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(chain_matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linalg_multi_dot, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_thnn_fused_lstm_cell, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_thnn_fused_gru_cell, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(lstm_cell, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(gru_cell, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(rnn_tanh_cell, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(rnn_relu_cell, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_scaled_dot_product_flash_attention, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)
  // fp32
  KERNEL_PRIVATEUSEONE(acos, fp32)
  KERNEL_PRIVATEUSEONE(asin, fp32)
  KERNEL_PRIVATEUSEONE(cosh, fp32)
  KERNEL_PRIVATEUSEONE(erfinv, fp32)
  KERNEL_PRIVATEUSEONE(exp, fp32)
  KERNEL_PRIVATEUSEONE(expm1, fp32)
  KERNEL_PRIVATEUSEONE(log, fp32)
  KERNEL_PRIVATEUSEONE(log10, fp32)
  KERNEL_PRIVATEUSEONE(log2, fp32)
  KERNEL_PRIVATEUSEONE(log1p, fp32)
  KERNEL_PRIVATEUSEONE(reciprocal, fp32)
  KERNEL_PRIVATEUSEONE(rsqrt, fp32)
  KERNEL_PRIVATEUSEONE(sinh, fp32)
  KERNEL_PRIVATEUSEONE(tan, fp32)
  SIM_AUTOCAST_OVERLOAD(pow, Tensor_Scalar, fp32)
  SIM_AUTOCAST_OVERLOAD(pow, Tensor_Tensor, fp32)
  SIM_AUTOCAST_OVERLOAD(pow, Scalar, fp32)
  KERNEL_PRIVATEUSEONE(softplus, fp32)
  KERNEL_PRIVATEUSEONE(layer_norm, fp32)
  KERNEL_PRIVATEUSEONE(native_layer_norm, fp32)
  KERNEL_PRIVATEUSEONE(group_norm, fp32)
  SIM_AUTOCAST_OVERLOAD(frobenius_norm, dim, fp32)
  KERNEL_PRIVATEUSEONE(nuclear_norm, fp32)
  SIM_AUTOCAST_OVERLOAD(nuclear_norm, dim, fp32)
  KERNEL_PRIVATEUSEONE(cosine_similarity, fp32)
  KERNEL_PRIVATEUSEONE(poisson_nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(cosine_embedding_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss2d, fp32)
  KERNEL_PRIVATEUSEONE(hinge_embedding_loss, fp32)
  KERNEL_PRIVATEUSEONE(kl_div, fp32)
  KERNEL_PRIVATEUSEONE(l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(smooth_l1_loss, fp32)
  KERNEL_PRIVATEUSEONE(huber_loss, fp32)
  KERNEL_PRIVATEUSEONE(mse_loss, fp32)
  KERNEL_PRIVATEUSEONE(margin_ranking_loss, fp32)
  KERNEL_PRIVATEUSEONE(multilabel_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(soft_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(triplet_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(multi_margin_loss, fp32)
  KERNEL_PRIVATEUSEONE(binary_cross_entropy_with_logits, fp32)
  KERNEL_PRIVATEUSEONE(dist, fp32)
  KERNEL_PRIVATEUSEONE(pdist, fp32)
  KERNEL_PRIVATEUSEONE(cdist, fp32)
  KERNEL_PRIVATEUSEONE(renorm, fp32)
  KERNEL_PRIVATEUSEONE(logsumexp, fp32)
  // fp32_set_opt_dtype
  KERNEL_PRIVATEUSEONE(prod, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(prod, dim_int, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(softmax, int, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(log_softmax, int, fp32_set_opt_dtype)
  KERNEL_PRIVATEUSEONE(cumprod, fp32_set_opt_dtype)
  KERNEL_PRIVATEUSEONE(cumsum, fp32_set_opt_dtype)
  KERNEL_PRIVATEUSEONE(linalg_vector_norm, fp32_set_opt_dtype)
  KERNEL_PRIVATEUSEONE(linalg_matrix_norm, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(linalg_matrix_norm, str_ord, fp32_set_opt_dtype)
  KERNEL_PRIVATEUSEONE(sum, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(sum, dim_IntList, fp32_set_opt_dtype)
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13  // named-tensor overloads, gone from torch 2.13
  SIM_AUTOCAST_OVERLOAD(prod, dim_Dimname, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(softmax, Dimname, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(log_softmax, Dimname, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(cumprod, dimname, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(cumsum, dimname, fp32_set_opt_dtype)
  SIM_AUTOCAST_OVERLOAD(sum, dim_DimnameList, fp32_set_opt_dtype)
#endif
  // fp32_append_dtype
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(
      ADD_NS(norm), "norm.Scalar", at::Tensor(const at::Tensor&, const c10::Scalar&),
      at::Tensor(const at::Tensor&, const c10::optional<c10::Scalar>&, at::ScalarType), fp32_append_dtype)
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(
      ADD_NS(norm), "norm.ScalarOpt_dim",
      at::Tensor(const at::Tensor&, const c10::optional<c10::Scalar>&, at::IntArrayRef, bool),
      at::Tensor(const at::Tensor&, const c10::optional<c10::Scalar>&, at::IntArrayRef, bool, at::ScalarType),
      fp32_append_dtype)
#if TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 13
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(
      ADD_NS(norm), "norm.names_ScalarOpt_dim",
      at::Tensor(const at::Tensor&, const c10::optional<c10::Scalar>&, at::DimnameList, bool),
      at::Tensor(const at::Tensor&, const c10::optional<c10::Scalar>&, at::DimnameList, bool, at::ScalarType),
      fp32_append_dtype)
#endif
  // promote
  KERNEL_PRIVATEUSEONE(addcdiv, promote)
  KERNEL_PRIVATEUSEONE(addcmul, promote)
  KERNEL_PRIVATEUSEONE(atan2, promote)
  KERNEL_PRIVATEUSEONE(bilinear, promote)
  KERNEL_PRIVATEUSEONE(cross, promote)
  KERNEL_PRIVATEUSEONE(dot, promote)
  KERNEL_PRIVATEUSEONE(grid_sampler, promote)
  KERNEL_PRIVATEUSEONE(index_put, promote)
  KERNEL_PRIVATEUSEONE(tensordot, promote)
  KERNEL_PRIVATEUSEONE(scatter_add, promote)
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN((&binary_cross_entropy_banned)));
}

// A warning handler that drops warnings: torch_npu silences the dispatcher's "Overriding a
// previously registered kernel" while it replaces the BackendSelect kernels below, as here.
struct IgnoreWarnings final : c10::WarningHandler {
  void process(const c10::Warning&) override {}
};

// CPU and npu tensors may take each other's place in a TensorImpl (`param.data = t`, and so
// `Module.to("npu")` keeps its Parameter objects, and with them an optimizer's references and a lazy
// module's uninitialized parameters): torch_npu replaces PyTorch's check, which counts PrivateUse1
// among no dense backend, with one that counts CPU and PrivateUse1 alike
// (torch_npu/csrc/aten/ops/HasCompatibleShallowCopyType.cpp, registered for CatchAll, Ascend/pytorch
// v6.0.rc2-pytorch2.1.0, commit 06cec48dda7dda594c652ec907cf296fc82a70c7, the same on master, commit
// 9e73e708ab9350d203475609f36f8a43f6a0c2ab). Here PyTorch's own answer stands for every other pair.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto is_dense = [](c10::DispatchKeySet keys) {
    return keys.has(c10::DispatchKey::CPU) || keys.has(c10::DispatchKey::PrivateUse1);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (is_dense(self.key_set()) && is_dense(from.key_set()));
}

std::unique_ptr<torch::Library> shallow_copy_check() {
  static IgnoreWarnings ignore;  // "Overriding a previously registered kernel", as torch_npu's
  c10::WarningUtils::WarningHandlerGuard guard(&ignore);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                  c10::DispatchKey::CompositeImplicitAutograd, __FILE__, __LINE__);
  library->impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
  return library;
}

std::unique_ptr<torch::Library> pinned_backend_select() {
  static IgnoreWarnings ignore;
  c10::WarningUtils::WarningHandlerGuard guard(&ignore);
  auto library = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::BackendSelect,
                                                  __FILE__, __LINE__);
  library->impl("is_pinned", TORCH_FN(is_pinned_select));
  library->impl("_pin_memory", TORCH_FN(pin_memory_select));
  return library;
}

State& state() {
  static State* s = [] {
    at::RegisterPrivateUse1HooksInterface(new SimHooks());
    // Storage made for npu by device type alone (UntypedStorage(n, device="npu"), so storage
    // clone() and deepcopy) asks this registry for an allocator.
    c10::SetAllocator(kNpu, &sim_allocator);
    auto* created = new State();
    created->fallthroughs = missing_fallthroughs();
    created->pinned_select = pinned_backend_select();
    created->shallow_copy = shallow_copy_check();
#ifdef ASCEND_SIM_GENERATOR_REGISTER
    {
      // torch 2.1 to 2.4 create `torch.Generator(device="npu")` through this registry; newer ones ask
      // the hooks' getNewGenerator (above) and call the registry deprecated, with a warning.
      static IgnoreWarnings ignore;
      c10::WarningUtils::WarningHandlerGuard guard(&ignore);
      static at::_GeneratorRegister registered(&new_npu_generator);
    }
#endif
    return created;
  }();
  return *s;
}

// ---------------------------------------------------------------- the pass-through kernel

std::string op_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

struct Converted {
  std::vector<std::pair<at::Tensor, at::Tensor>> args;                // (npu argument, its CPU view)
  std::unordered_map<c10::StorageImpl*, c10::Storage> storages;       // CPU view storage -> npu storage
  std::vector<std::pair<at::Tensor, at::Tensor>> mutated;             // the written ones among args
  std::set<c10::StorageImpl*> host;                                   // storages of host arguments
};

at::Tensor to_cpu_arg(const at::Tensor& t, Converted& conv, bool written) {
  if (!t.defined() || t.device().type() != kNpu) {
    if (t.defined() && t.has_storage()) {
      conv.host.insert(t.storage().unsafeGetStorageImpl());
    }
    return t;
  }
  for (const auto& [original, view] : conv.args) {
    if (original.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
      return view;
    }
  }
  auto view = cpu_view(t);
  conv.args.emplace_back(t, view);
  conv.storages.emplace(view.storage().unsafeGetStorageImpl(), t.storage());
  if (written) {
    conv.mutated.emplace_back(t, view);
  }
  return view;
}

// Written arguments: carry back what the CPU kernel changed besides the bytes (an out= tensor
// resized, possibly into new memory; the geometry changed by an in-place view op).
void sync_mutated(Converted& conv) {
  for (auto& [original, view] : conv.mutated) {
    at::TensorImpl* impl = original.unsafeGetTensorImpl();
    if (view.storage().data() != original.storage().data()) {
      c10::Storage moved = npu_storage_copy(view.storage());
      impl->set_storage_keep_dtype(moved);
      conv.storages[view.storage().unsafeGetStorageImpl()] = moved;
    }
    if (view.sizes() != original.sizes() || view.strides() != original.strides() ||
        view.storage_offset() != original.storage_offset()) {
      impl->set_sizes_and_strides(view.sizes(), view.strides(), view.storage_offset());
    }
  }
}

// The result of the CPU kernel, as the npu op returns it. `on_host`: the op was asked for host
// results (an explicit non-npu device argument, as in `_to_copy(device=cpu)`).
at::Tensor to_npu_result(const at::Tensor& r, const Converted& conv, bool on_host,
                         std::unordered_map<c10::StorageImpl*, c10::Storage>& fresh) {
  if (!r.defined() || !r.is_cpu() || !r.has_storage()) {
    return r;
  }
  c10::StorageImpl* storage = r.storage().unsafeGetStorageImpl();
  auto known = conv.storages.find(storage);
  if (known != conv.storages.end()) {
    if (on_host) {  // never hand out a CPU tensor over npu memory
      return r.clone(at::MemoryFormat::Preserve);
    }
    for (const auto& [original, view] : conv.args) {
      if (view.unsafeGetTensorImpl() == r.unsafeGetTensorImpl()) {
        return original;
      }
    }
    return npu_over(known->second, r);
  }
  if (on_host || conv.host.count(storage)) {  // a host result, or an argument already on the host
    return r;
  }
  auto it = fresh.find(storage);
  if (it == fresh.end()) {
    it = fresh.emplace(storage, npu_storage_copy(r.storage())).first;
  }
  return npu_over(it->second, r);
}

// ---------------------------------------------------------------- float16 where the CPU has no kernel
//
// NPU kernels compute float16; the CPU kernels of torch 2.1 to 2.3 refuse it in many ops (mm, addmm,
// bmm, softmax and layer_norm on 2.1, layer_norm on 2.2, log_softmax on 2.3), so a float16 model or
// `torch.autocast("npu")` (float16 by default) would stop where the device runs. A native op whose
// CPU kernel refuses float16 runs again with its float16 tensors in float32, and its float32 results
// and written arguments are rounded back to float16 (an NPU matrix kernel also accumulates in float32).
// Ops that fall back get no such help: torch_npu's fallback runs the CPU kernel, which refuses.

bool refuses_half(const c10::Error& error) {
  return std::string(error.what_without_backtrace()).find("not implemented for 'Half'") != std::string::npos;
}

c10::IValue upcast(const c10::IValue& value, std::vector<std::pair<at::Tensor, at::Tensor>>& upcasts) {
  auto up = [&upcasts](const at::Tensor& t) {
    if (!t.defined() || t.scalar_type() != at::kHalf) {
      return t;
    }
    for (const auto& [half, single] : upcasts) {
      if (half.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
        return single;
      }
    }
    at::Tensor single = t.to(at::kFloat);
    upcasts.emplace_back(t, single);
    return single;
  };
  if (value.isTensor()) {
    return up(value.toTensor());
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorList().vec()) {
      list.push_back(up(t));
    }
    return list;
  }
  if (value.isOptionalTensorList()) {
    c10::List<c10::optional<at::Tensor>> list;
    for (const c10::optional<at::Tensor>& t : value.toOptionalTensorList().vec()) {
      list.push_back(t.has_value() ? c10::optional<at::Tensor>(up(*t)) : c10::nullopt);
    }
    return list;
  }
  return value;
}

// The CPU kernel on `args` (the converted arguments, at stack position `first`), float16 in float32.
void redispatch_in_float32(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t first,
                           const std::vector<c10::IValue>& args) {
  std::vector<std::pair<at::Tensor, at::Tensor>> upcasts;  // (float16 tensor, its float32 copy)
  stack->resize(first);
  for (const auto& value : args) {
    stack->push_back(upcast(value, upcasts));
  }
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  const auto& arguments = op.schema().arguments();
  std::set<c10::TensorImpl*> written;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      for (const auto& [half, single] : upcasts) {
        const bool is_arg = args[i].isTensor() && args[i].toTensor().unsafeGetTensorImpl() == half.unsafeGetTensorImpl();
        if (is_arg || args[i].isTensorList()) {
          written.insert(half.unsafeGetTensorImpl());
        }
      }
    }
  }
  for (auto& [half, single] : upcasts) {
    if (written.count(half.unsafeGetTensorImpl())) {
      if (half.sizes() != single.sizes()) {
        half.resize_(single.sizes());
      }
      half.copy_(single);
    }
  }
  auto back = [&upcasts](const at::Tensor& r) {
    for (const auto& [half, single] : upcasts) {
      if (single.unsafeGetTensorImpl() == r.unsafeGetTensorImpl()) {
        return half;
      }
    }
    return r.defined() && r.scalar_type() == at::kFloat ? r.to(at::kHalf) : r;
  };
  const size_t num_returns = op.schema().returns().size();
  for (size_t i = stack->size() - num_returns; i < stack->size(); ++i) {
    c10::IValue& value = (*stack)[i];
    if (value.isTensor()) {
      value = back(value.toTensor());
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList().vec()) {
        list.push_back(back(t));
      }
      value = list;
    }
  }
}

void passthrough(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const auto& arguments = schema.arguments();
  const size_t num_args = arguments.size();
  const size_t first = stack->size() - num_args;
  Converted conv;
  bool keep_results_on_host = false;  // an explicit non-npu device argument, e.g. _to_copy(device=cpu)
  bool npu_device_argument = false;
  for (size_t i = 0; i < num_args; ++i) {
    c10::IValue& value = (*stack)[first + i];
    const auto* alias = arguments[i].alias_info();
    const bool written = alias != nullptr && alias->isWrite();
    if (value.isTensor()) {
      value = to_cpu_arg(value.toTensor(), conv, written);
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        list.set(j, to_cpu_arg(list.get(j), conv, written));
      }
    } else if (value.isOptionalTensorList()) {
      auto list = value.toOptionalTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        c10::optional<at::Tensor> item = list.get(j);
        if (item.has_value()) {
          list.set(j, to_cpu_arg(*item, conv, written));
        }
      }
    } else if (value.isDevice()) {
      if (value.toDevice().type() == kNpu) {
        value = c10::IValue(c10::Device(c10::kCPU));
        npu_device_argument = true;
      } else {
        keep_results_on_host = true;
      }
    }
  }
  GeneratorSwaps generators;
  generators.swap_in(schema, stack, first);
  const std::vector<c10::IValue> args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  } catch (const c10::Error& error) {
    if (!refuses_half(error)) {
      throw;
    }
    redispatch_in_float32(op, stack, first, args);
  }
  generators.swap_out();

  sync_mutated(conv);
  const bool on_host = keep_results_on_host && !npu_device_argument;
  std::unordered_map<c10::StorageImpl*, c10::Storage> fresh;
  const size_t num_returns = schema.returns().size();
  const size_t first_return = stack->size() - num_returns;
  for (size_t i = 0; i < num_returns; ++i) {
    c10::IValue& value = (*stack)[first_return + i];
    if (value.isTensor()) {
      value = to_npu_result(value.toTensor(), conv, on_host, fresh);
    } else if (value.isTensorList()) {
      auto list = value.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) {
        list.set(j, to_npu_result(list.get(j), conv, on_host, fresh));
      }
    }
  }
}

// ---------------------------------------------------------------- the insides of a listed op
//
// A listed op that PyTorch builds out of other ops runs that decomposition here (decomposition_on_npu),
// where the release runs its own kernel. The ops the decomposition reaches are the kernel's insides, not
// the program's calls: an unlisted one among them (`_weight_norm`'s `_weight_norm_interface`, which
// op-plugin's kernel never calls: it computes v * (g / norm_except_dim(v, 2, dim))) runs on the CPU
// silently, uncounted, whatever TORCH_NPU_FALLBACK_CPU_DISABLE says. So does an unlisted op that the
// backward of an inside op runs (`_weight_norm_interface_backward`; `_thnn_fused_gru_cell_backward`
// below `gru.input`, which torch_npu runs with its own backward): autograd numbers the nodes each
// thread creates (at::sequence_number), so the numbers taken while a listed kernel ran, on that thread,
// are its insides' nodes, and a RecordFunction callback on the backward scope (the engine reports each
// node's number and forward thread, torch/csrc/autograd/function.h, Node::operator()) tells the
// fallback it runs inside one of them. The kernels that created nodes are remembered (the last
// kMaxInsideRanges), and the callback is added the first time one does: inference pays nothing.

struct InsideThread {
  int depth = 0;            // listed kernels running their decomposition on this thread
  bool in_backward = false; // the backward node running on this thread is an inside's
};
thread_local InsideThread inside_thread;

constexpr size_t kMaxInsideRanges = 1 << 14;

struct InsideRanges {
  std::mutex mutex;
  std::map<std::pair<uint64_t, int64_t>, int64_t> ranges;  // (forward thread, first number) -> end
  std::atomic<bool> any{false};
};

InsideRanges& inside_ranges() {
  static auto* ranges = new InsideRanges();
  return *ranges;
}

bool inside_node(uint64_t thread, int64_t number) {
  InsideRanges& r = inside_ranges();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.ranges.upper_bound({thread, number});
  if (it == r.ranges.begin()) {
    return false;
  }
  --it;
  return it->first.first == thread && number < it->second;
}

struct InsideBackward final : at::ObserverContext {
  bool previous = false;
};

std::unique_ptr<at::ObserverContext> backward_node_starts(const at::RecordFunction& fn) {
  auto context = std::make_unique<InsideBackward>();
  context->previous = inside_thread.in_backward;
  inside_thread.in_backward = inside_node(fn.forwardThreadId(), fn.seqNr());
  return context;
}

void backward_node_ends(const at::RecordFunction&, at::ObserverContext* context) {
  inside_thread.in_backward = static_cast<InsideBackward*>(context)->previous;
}

void remember_inside(uint64_t thread, int64_t first, int64_t end) {
  InsideRanges& r = inside_ranges();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.ranges[{thread, first}] = end;
    if (r.ranges.size() > kMaxInsideRanges) {
      r.ranges.erase(r.ranges.begin());
    }
  }
  if (!r.any.exchange(true)) {
    at::addGlobalCallback(at::RecordFunctionCallback(&backward_node_starts, &backward_node_ends)
                              .scopes({at::RecordScope::BACKWARD_FUNCTION}));
  }
}

// While a listed kernel runs its decomposition: the autograd numbers it takes are its insides'.
struct InsideListedKernel {
  int64_t first = static_cast<int64_t>(at::sequence_number::peek());
  InsideListedKernel() { ++inside_thread.depth; }
  ~InsideListedKernel() {
    if (--inside_thread.depth == 0) {
      const auto end = static_cast<int64_t>(at::sequence_number::peek());
      if (end > first) {
        remember_inside(at::RecordFunction::currentThreadId(), first, end);
      }
    }
  }
};

// Whether an op that reached the fallback is a listed kernel's insides (the forward or the backward).
bool runs_inside() { return inside_thread.depth > 0 || inside_thread.in_backward; }

// ---------------------------------------------------------------- the fallback (npu_cpu_fallback)

bool env_is(const char* name, const char* value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::strcmp(set, value) == 0;
}

bool warnings_silenced() {
  const char* rank = std::getenv("RANK");
  if (rank != nullptr && *rank != '\0' && std::strcmp(rank, "0") != 0) {
    return true;
  }
  if (env_is("TORCH_NPU_DISABLED_WARNING", "1") || env_is("TORCH_NPU_WARNING_DISABLE", "1")) {
    return true;
  }
  const char* level = std::getenv("TORCH_CPP_LOG_LEVEL");
  if (level != nullptr) {
    std::string upper(level);
    std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
    return upper == "ERROR" || upper == "FATAL" || upper == "2" || upper == "3";
  }
  return false;
}

void write_fd2(const std::string& line) {
  const char* data = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(2, data, left);
    if (n <= 0) {
      return;
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
}

void cpu_kernel_on_npu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  GeneratorSwaps generators;
  generators.swap_in(op.schema(), stack, stack->size() - op.schema().arguments().size());
  at::native::cpu_fallback(op, stack);
  generators.swap_out();
}

void npu_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (runs_inside()) {
    cpu_kernel_on_npu(op, stack);
    return;
  }
  const std::string name = op.schema().operator_name().name +
      (op.schema().operator_name().overload_name.empty() ? "" : "." + op.schema().operator_name().overload_name);
  bool warn = false;
  bool disabled = false;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.counts[name] += 1;
    disabled = s.fallback_disable_supported && env_is("TORCH_NPU_FALLBACK_CPU_DISABLE", "1");
    if (!disabled && !s.warned.count(name) && !warnings_silenced()) {
      s.warned.insert(name);
      warn = true;
    }
  }
  TORCH_CHECK(!disabled, "CAUTION: The operator '", name,
              "' is not currently supported on the NPU backend, and falling back to the CPU is disabled "
              "by TORCH_NPU_FALLBACK_CPU_DISABLE=1.");
  if (warn) {
    write_fd2("[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator '" + name +
              "' is not currently supported on the NPU backend and will fall back to run on the CPU. "
              "This may have performance implications. (function npu_cpu_fallback)\n");
  }
  cpu_kernel_on_npu(op, stack);
}

// ---------------------------------------------------------------- the op table

// Whether a native op of the table is one PyTorch builds out of other ops (a CompositeImplicitAutograd
// kernel) with no CPU kernel of its own, such as softmax.int, matmul, dropout or to.dtype. Its npu
// kernel runs that decomposition on the npu tensors (decomposition_on_npu), under autograd.
//
// torch_npu registers such an op under PrivateUse1 like any other (codegen/gen_backend_stubs.py,
// Ascend/pytorch branch v2.1.0-6.0.rc2, commit 5c2df843879f67947f7bc24e2f8cfca73be3ef3d; only
// to.device and to.dtype also get an AutogradPrivateUse1 kernel there), and its kernel calls the
// ops of the decomposition through the dispatcher: op-plugin's softmax.int returns at::_softmax
// (op_plugin/ops/base_ops/aclops/SoftmaxKernelNpu.cpp, Ascend/op-plugin branch 6.0.rc2, commit
// b761d5824d7bc3f48033fe7120552cc2cfbce56d). Under AutogradPrivateUse1 torch_npu has a fallthrough
// (torch_npu/csrc/aten/VariableFallbackKernel.cpp, v2.1.0-6.0.rc2) or, from 7.0.0
// (v2.1.0-7.0.0, commit 76913c98310bdf27c1284a67c13f3d92840d8df2), a fallback that warns and
// redispatches: either way autograd is not excluded while the kernel runs, so the ops it calls
// record the gradient, each of them native or falling back by the table. A pass-through kernel
// would run the decomposition on CPU views, where nothing records it: the gradient was lost.
//
// Here each such op gets the kernel below and, under AutogradPrivateUse1, a fallthrough of its own
// (the era before 7.0.0, without its warning; torch 2.13 has a warning fallback for every op, which
// would also take the place of PyTorch's autograd kernel of matmul). Under Conjugate and Negative it
// gets fallthroughs too: on the CPU the decomposition runs above those keys, so its ops see lazily
// conjugated views and resolve them themselves (a complex mm folds the conjugation into the matrix
// product); resolving them before the decomposition rounds differently. matmul's backward on the device
// is VariableType's, through torch_npu's native matmul_backward (listed by every table that lists
// matmul), which has no CPU kernel; the decomposition's backward gives the same gradients.
// An op with a CPU kernel as well (silu_backward) keeps its pass-through kernel.
bool runs_decomposition(const c10::OperatorHandle& op) {
  return op.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd) &&
         !op.hasKernelForDispatchKey(c10::DispatchKey::CPU);
}

// The decomposition on the npu tensors: with no CPU kernel, the CPU entry of such an op's dispatch
// table is its CompositeImplicitAutograd kernel, whose ops dispatch afresh (npu, autograd on).
void decomposition_on_npu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  InsideListedKernel inside;
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

// The `_foreach_*` ops a table does not list: torch_npu registers, under PrivateUse1, the CPU kernel
// of each foreach op that has one (codegen/gen_backend_stubs.py, gen_foreach_register, and
// codegen/templates/ForeachRegister.cpp, Ascend/pytorch branch v2.1.0-6.0.rc2, commit
// 5c2df843879f67947f7bc24e2f8cfca73be3ef3d): PyTorch's slow kernels, which loop over the tensors
// calling the per-tensor ops, each native or falling back by the table. So an optimizer's foreach
// step (AdamW's _foreach_lerp_, clip_grad_norm_'s _foreach_norm) never falls back as a whole. Here
// the same: the CPU kernel runs on the npu tensors themselves.
void foreach_slow(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
}

bool is_cpu_foreach(const c10::OperatorName& name) {
  if (name.name.rfind("aten::_foreach_", 0) != 0) {
    return false;
  }
  auto op = c10::Dispatcher::singleton().findSchema(name);
  return op.has_value() && op->hasKernelForDispatchKey(c10::DispatchKey::CPU);
}

// ---------------------------------------------------------------- the interface to Python

std::vector<std::string> enable_table(const std::vector<std::string>& ops, bool fallback_disable) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  TORCH_CHECK(!s.kernels, "the simulated NPU already has an op table in this process");
  std::vector<std::string> unknown;
  s.kernels = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                               c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  s.autograd = std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__);
  for (auto key : {c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}) {
    s.math_bits.emplace_back(key, std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__));
  }
  for (const auto& name : ops) {
    if (kInfrastructure.count(name)) {
      continue;
    }
    const auto dot = name.find('.');
    c10::OperatorName opname("aten::" + name.substr(0, dot), dot == std::string::npos ? "" : name.substr(dot + 1));
    auto op = c10::Dispatcher::singleton().findSchema(opname);
    if (!op.has_value()) {
      unknown.push_back(name);
      continue;
    }
    if (runs_decomposition(*op)) {
      s.kernels->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&decomposition_on_npu>());
      s.autograd->impl(name.c_str(), torch::CppFunction::makeFallthrough());
      for (auto& [key, library] : s.math_bits) {
        if (!op->hasKernelForDispatchKey(key)) {
          library->impl(name.c_str(), torch::CppFunction::makeFallthrough());
        }
      }
      continue;
    }
    s.kernels->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&passthrough>());
  }
  const std::set<std::string> listed(ops.begin(), ops.end());
  for (const auto& opname : c10::Dispatcher::singleton().getAllOpNames()) {
    const std::string name = opname.name.substr(6) + (opname.overload_name.empty() ? "" : "." + opname.overload_name);
    if (is_cpu_foreach(opname) && !listed.count(name)) {
      s.kernels->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&foreach_slow>());
    }
  }
  s.fallback = std::make_unique<torch::Library>(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse1,
                                                __FILE__, __LINE__);
  s.fallback->fallback(torch::CppFunction::makeFromBoxedFunction<&npu_cpu_fallback>());
  s.fallback_disable_supported = fallback_disable;
  return unknown;
}

std::tuple<std::vector<std::string>, std::vector<int64_t>> fallback_counts() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  for (const auto& [name, count] : s.counts) {
    names.push_back(name);
    counts.push_back(count);
  }
  return {names, counts};
}

void reset_counts() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.counts.clear();
}

void init() { state(); }

c10::optional<at::Generator> default_generator() { return default_npu_generator(); }

// (bytes in use, peak since start or the last reset)
std::vector<int64_t> memory_stats() {
  MemoryCounts& counts = memory_counts();
  std::lock_guard<std::mutex> lock(counts.mutex);
  return {counts.allocated, counts.peak};
}

void reset_peak_memory() {
  MemoryCounts& counts = memory_counts();
  std::lock_guard<std::mutex> lock(counts.mutex);
  counts.peak = counts.allocated;
}

// Autocast on the npu device, which torch 2.1 to 2.3 ask of the device module (torch.npu) and
// torch_npu answers from its own C++: the PrivateUse1 autocast state. Newer torch keeps it per
// device type (and declares the per-backend functions deprecated, with a warning on every call).
#ifdef AT_FORALL_DEPRECATED_AUTOCAST_BACKENDS
bool autocast_enabled() { return at::autocast::is_autocast_enabled(kNpu); }
void set_autocast_enabled(bool enabled) { at::autocast::set_autocast_enabled(kNpu, enabled); }
at::ScalarType autocast_scalar_type() { return at::autocast::get_autocast_dtype(kNpu); }
void set_autocast_dtype(at::ScalarType dtype) { at::autocast::set_autocast_dtype(kNpu, dtype); }
#else
bool autocast_enabled() { return at::autocast::is_privateuseone_enabled(); }
void set_autocast_enabled(bool enabled) { at::autocast::set_privateuseone_enabled(enabled); }
at::ScalarType autocast_scalar_type() { return at::autocast::get_autocast_privateuseone_dtype(); }
void set_autocast_dtype(at::ScalarType dtype) { at::autocast::set_autocast_privateuseone_dtype(dtype); }
#endif
// An empty CPU tensor of that dtype: an operator returns a ScalarType to Python as a bare int.
at::Tensor autocast_dtype() { return at::empty({0}, at::TensorOptions().dtype(autocast_scalar_type())); }

}  // namespace

TORCH_LIBRARY(ascend_sim, m) {
  m.def("init() -> ()", &init);
  m.def("default_generator() -> Generator?", &default_generator);
  m.def("memory_stats() -> int[]", &memory_stats);
  m.def("reset_peak_memory() -> ()", &reset_peak_memory);
  m.def("enable_table(str[] ops, bool fallback_disable) -> str[]", &enable_table);
  m.def("fallback_counts() -> (str[], int[])", &fallback_counts);
  m.def("reset_counts() -> ()", &reset_counts);
  m.def("autocast_enabled() -> bool", &autocast_enabled);
  m.def("set_autocast_enabled(bool enabled) -> ()", &set_autocast_enabled);
  m.def("autocast_dtype() -> Tensor", &autocast_dtype);
  m.def("set_autocast_dtype(ScalarType dtype) -> ()", &set_autocast_dtype);
}
