"""``from torch_npu.contrib import transfer_to_npu``: run CUDA-written code on the (simulated) NPU.

Modelled on torch_npu/contrib/transfer_to_npu.py of the 2.1.0.post6 release (Ascend/pytorch tag
v6.0.rc2-pytorch2.1.0, commit 06cec48dda7dda594c652ec907cf296fc82a70c7); importing it:

- copies ``torch_npu.npu.__all__`` onto ``torch.cuda`` (so ``torch.cuda.is_available()`` is True,
  ``torch.cuda.synchronize()`` synchronizes the NPU, ...), and ``torch_npu.npu.random`` / ``amp``
  onto ``torch.cuda.random`` / ``amp``;
- rewrites "cuda" device arguments to "npu" (positional strings and ``torch.device``, the keywords
  ``device``, ``device_type``, ``map_location``, ``device_id``, ``device_ids`` lists, and int devices
  for ``to``/``to_empty``) in the torch factory functions of ``torch_fn_white_list``, ``Tensor.new_*``
  and ``Tensor.to``, ``Module.to``/``to_empty``, the ``torch.cuda`` functions of
  ``torch_cuda_fn_white_list``, ``torch.cuda.device``, ``torch.UntypedStorage``, DDP and FSDP;
- makes ``Tensor.cuda``/``Module.cuda`` the ``npu`` methods and ``Tensor.is_cuda`` ``is_npu``;
- turns ``nccl`` into ``hccl`` in ``torch.distributed.init_process_group`` (``is_nccl_available`` is
  ``is_hccl_available``; on the simulator the ``hccl`` backend is gloo);
- sends ``DataLoader(pin_memory=True)`` to pin for npu;
- disables ``torch.jit.script`` / ``script_method`` (they return their argument), with torch_npu's
  RuntimeWarning, and prints torch_npu's banner as an ImportWarning after
  ``warnings.filterwarnings("once")``.

One departure: 2.1.0.post6 wraps ``torch.Generator`` in a function (its "cuda" device rewritten),
which breaks any module imported afterwards that writes ``torch.Generator | None`` in an annotation
(torch.distributed on newer torch); here ``torch.Generator`` becomes the proxy class that newer
releases use (Ascend/pytorch v2.8.0, commit c4194988d3c830375abf08e01d5bec3fe6a86406: same
rewriting, ``isinstance`` kept). Not modelled: the profiler patches (the simulated torch_npu has no
profiler), ``torch.cuda.DoubleTensor`` (no legacy tensor types) and the ``apis_config.json``
wrappers of third-party libraries. Newer releases also wrap ``Tensor.pin_memory`` and drop the
DataLoader wrapper.
"""

# Mirrors torch_npu's code: its exact type checks (type(x) == str), its warnings' stack levels.
# ruff: noqa: E721, B028, UP032

import os
import warnings
from functools import wraps
from typing import Any, Callable, Dict, List

import torch

import torch_npu

warnings.filterwarnings(action="once")

__all__ = []

torch_fn_white_list = [
    "logspace",
    "randint",
    "hann_window",
    "rand",
    "full_like",
    "ones_like",
    "rand_like",
    "randperm",
    "arange",
    "frombuffer",
    "normal",
    "_empty_per_channel_affine_quantized",
    "empty_strided",
    "empty_like",
    "scalar_tensor",
    "tril_indices",
    "bartlett_window",
    "ones",
    "sparse_coo_tensor",
    "randn",
    "kaiser_window",
    "tensor",
    "triu_indices",
    "as_tensor",
    "zeros",
    "randint_like",
    "full",
    "eye",
    "_sparse_csr_tensor_unsafe",
    "empty",
    "_sparse_coo_tensor_unsafe",
    "blackman_window",
    "zeros_like",
    "range",
    "sparse_csr_tensor",
    "randn_like",
    "from_file",
    "_cudnn_init_dropout_state",
    "_empty_affine_quantized",
    "linspace",
    "hamming_window",
    "empty_quantized",
    "_pin_memory",
    "autocast",
    "load",
]
torch_tensor_fn_white_list = [
    "new_empty",
    "new_empty_strided",
    "new_full",
    "new_ones",
    "new_tensor",
    "new_zeros",
    "to",
]
torch_module_fn_white_list = ["to", "to_empty"]
torch_cuda_fn_white_list = [
    "get_device_properties",
    "get_device_name",
    "get_device_capability",
    "list_gpu_processes",
    "set_device",
    "synchronize",
    "mem_get_info",
    "memory_stats",
    "memory_summary",
    "memory_allocated",
    "max_memory_allocated",
    "reset_max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
]
torch_distributed_fn_white_list = ["__init__"]
is_available = torch.cuda.is_available
device_kwargs_list = ["device", "device_type", "map_location", "device_id"]


# torch.Generator's metaclass is its C extension's, which no annotation can name.
class _TorchTypeProxyMeta(type(torch.Generator)):  # type: ignore[misc]
    # isinstance(obj, torch.Generator) stays true for generators made before the patch.
    def __instancecheck__(cls, instance: object) -> bool:
        return super().__instancecheck__(instance) or isinstance(instance, cls.__mro__[1])


class _GeneratorProxy(torch.Generator, metaclass=_TorchTypeProxyMeta):
    """``torch.Generator`` with "cuda" devices rewritten to "npu" (the newer releases' form)."""

    def __new__(cls, device: Any = "cpu") -> "_GeneratorProxy":
        device = _replace_cuda_to_npu_in_list([device], False)[0]
        # The C type takes its device in __new__; torch's stub declares only __init__.
        return super().__new__(cls, device)  # type: ignore[call-arg]


# As torch_npu's code, the wrappers rebind ``args`` (a tuple) to a list: type: ignore[assignment].
def _wrapper_cuda(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        replace_int = fn.__name__ in ["to", "to_empty"]
        if args:
            args = _replace_cuda_to_npu_in_list(list(args), replace_int)  # type: ignore[assignment]
        if kwargs:
            for device_arg in device_kwargs_list:
                device = kwargs.get(device_arg, None)
                if device is not None:
                    _replace_cuda_to_npu_in_kwargs(kwargs, device_arg, device)
            device_ids = kwargs.get("device_ids", None)
            if type(device_ids) == list:
                _replace_cuda_to_npu_in_list(device_ids, replace_int)
        return fn(*args, **kwargs)

    return decorated


def _replace_cuda_to_npu_in_kwargs(kwargs: Dict[str, Any], device_arg: str, device: Any) -> None:
    if type(device) == str and "cuda" in device:
        kwargs[device_arg] = device.replace("cuda", "npu")
    elif type(device) == torch.device and "cuda" in device.type:
        index = device.index
        kwargs[device_arg] = torch.device("npu:{}".format(index) if index is not None else "npu")
    elif type(device) == int:
        kwargs[device_arg] = f"npu:{device}"
    elif type(device) == dict:
        kwargs[device_arg] = _replace_cuda_to_npu_in_dict(device)


def _replace_cuda_to_npu_in_list(args_list: List[Any], replace_int: bool) -> List[Any]:
    for idx, arg in enumerate(args_list):
        if isinstance(arg, str) and "cuda" in arg:
            args_list[idx] = arg.replace("cuda", "npu")
        elif isinstance(arg, torch.device) and "cuda" in arg.type:
            args_list[idx] = torch.device("npu:{}".format(arg.index) if arg.index is not None else "npu")
        elif replace_int and not isinstance(arg, bool) and isinstance(arg, int):
            args_list[idx] = f"npu:{arg}"
        elif isinstance(arg, dict):
            args_list[idx] = _replace_cuda_to_npu_in_dict(arg)
    return args_list


def _replace_cuda_to_npu_in_dict(device_dict: Dict[Any, Any]) -> Dict[Any, Any]:
    new_dict = {}
    for key, value in device_dict.items():
        if isinstance(key, str):
            key = key.replace("cuda", "npu")
        if isinstance(value, str):
            value = value.replace("cuda", "npu")
        new_dict[key] = value
    return new_dict


def _device_wrapper(enter_fn: Any, white_list: List[str]) -> None:
    for fn_name in white_list:
        fn = getattr(enter_fn, fn_name, None)
        if fn:
            setattr(enter_fn, fn_name, _wrapper_cuda(fn))


def _wrapper_hccl(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = [
                arg.replace("nccl", "hccl") if type(arg) == str and "nccl" in arg else arg  # type: ignore[assignment]
                for arg in args
            ]
        backend = kwargs.get("backend", None)
        if type(backend) == str and "nccl" in backend:
            kwargs["backend"] = backend.replace("nccl", "hccl")
        return fn(*args, **kwargs)

    return decorated


def _wrapper_data_loader(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def decorated(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            pin_memory = kwargs.get("pin_memory", False)
            pin_memory_device = kwargs.get("pin_memory_device", None)
            if pin_memory and not pin_memory_device:
                kwargs["pin_memory_device"] = "npu"
            if pin_memory and type(pin_memory_device) == str and "cuda" in pin_memory_device:
                kwargs["pin_memory_device"] = pin_memory_device.replace("cuda", "npu")
        return fn(*args, **kwargs)

    return decorated


def _jit_script(
    obj: Any, optimize: Any = None, _frames_up: int = 0, _rcb: Any = None, example_inputs: Any = None
) -> Any:
    return obj


def _jit_script_method(fn: Any) -> Any:
    return fn


def _patch_jit_script() -> None:
    msg = (
        "torch.jit.script and torch.jit.script_method will be disabled by transfer_to_npu, "
        "which currently does not support them, if you need to enable them, please do not use "
        "transfer_to_npu."
    )
    warnings.warn(msg, RuntimeWarning)
    torch.jit.script = _jit_script
    # torch.jit has script_method at run time (torch/jit/_script.py) but does not re-export it.
    torch.jit.script_method = _jit_script_method  # type: ignore[attr-defined]


def _patch_cuda() -> None:
    patches = [
        ["cuda", torch_npu.npu],
        ["cuda.amp", torch_npu.npu.amp],
        ["cuda.random", torch_npu.npu.random],
    ]
    torch_npu._apply_patches(patches)


def _warning_fn(msg: str, rank0: bool = True) -> None:
    is_distributed = (
        torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )
    env_rank = os.getenv("RANK", None)
    if rank0 and is_distributed:
        if torch.distributed.get_rank() == 0:
            warnings.warn(msg, ImportWarning)
    elif rank0 and env_rank:
        if env_rank == "0":
            warnings.warn(msg, ImportWarning)
    else:
        warnings.warn(msg, ImportWarning)


def _patch_distributed() -> None:
    """nccl -> hccl; the simulator's ``hccl`` process groups are gloo's (host memory, as npu's is)."""
    # This module replaces torch's functions and methods (what it is for), and sets what torch_npu
    # adds to torch (is_hccl_available, Tensor.npu, ...): type: ignore[method-assign, attr-defined].
    import torch.distributed as dist

    if not dist.is_available():
        return
    if "hccl" not in getattr(dist.Backend, "backend_list", ["hccl"]) and "HCCL" not in dir(dist.Backend):

        def _hccl(store: Any, rank: int, size: int, timeout: Any) -> Any:
            return dist.ProcessGroupGloo(store, rank, size, timeout)

        try:
            dist.Backend.register_backend("hccl", _hccl, devices=["cpu", "npu"])
        except TypeError:  # torch 2.1's register_backend takes no devices
            dist.Backend.register_backend("hccl", _hccl)
    if not hasattr(dist, "is_hccl_available"):
        dist.is_hccl_available = lambda: True  # type: ignore[attr-defined]
    dist.init_process_group = _wrapper_hccl(dist.init_process_group)
    dist.is_nccl_available = dist.is_hccl_available  # type: ignore[attr-defined]
    dist.ProcessGroup._get_backend = _wrapper_cuda(dist.ProcessGroup._get_backend)  # type: ignore[method-assign]
    from torch.distributed.fsdp import fully_sharded_data_parallel as fsdp

    fsdp.FullyShardedDataParallel.__init__ = _wrapper_cuda(fsdp.FullyShardedDataParallel.__init__)  # type: ignore[method-assign]
    _device_wrapper(torch.nn.parallel.DistributedDataParallel, torch_distributed_fn_white_list)


_STARS = "    " + "*" * 109
# torch_npu's banner, line for line.
_BANNER = "\n".join(
    [
        "",
        _STARS,
        "    The torch.Tensor.cuda and torch.nn.Module.cuda are replaced with torch.Tensor.npu and "
        "torch.nn.Module.npu now..",
        "    The torch.cuda.DoubleTensor is replaced with torch.npu.FloatTensor cause the double type is not "
        "supported now..",
        "    The backend in torch.distributed.init_process_group set to hccl now..",
        "    The torch.cuda.* and torch.cuda.amp.* are replaced with torch.npu.* and torch.npu.amp.* now..",
        "    The device parameters have been replaced with npu in the function below:",
        "    {}",
        _STARS,
        "    ",
    ]
)


def _init() -> None:
    # Replaces torch's methods and classes: type: ignore[method-assign, misc], as in _patch_distributed.
    _warning_fn(
        _BANNER.format(
            ", ".join(
                ["torch." + i for i in torch_fn_white_list]
                + ["torch.Tensor." + i for i in torch_tensor_fn_white_list]
                + ["torch.nn.Module." + i for i in torch_module_fn_white_list]
            )
        )
    )

    # torch.cuda.*
    _patch_cuda()
    _device_wrapper(torch.cuda, torch_cuda_fn_white_list)
    torch.cuda.device.__init__ = _wrapper_cuda(torch.cuda.device.__init__)  # type: ignore[method-assign]

    # torch.*
    _device_wrapper(torch, torch_fn_white_list)
    torch.Generator = _GeneratorProxy  # type: ignore[misc]
    torch.UntypedStorage.__new__ = _wrapper_cuda(torch.UntypedStorage.__new__)  # type: ignore[method-assign]

    # torch.Tensor.*
    _device_wrapper(torch.Tensor, torch_tensor_fn_white_list)
    torch.Tensor.cuda = torch.Tensor.npu  # type: ignore[method-assign, attr-defined]
    torch.Tensor.is_cuda = torch.Tensor.is_npu  # type: ignore[attr-defined]

    # torch.nn.Module.*
    _device_wrapper(torch.nn.Module, torch_module_fn_white_list)
    torch.nn.Module.cuda = torch.nn.Module.npu  # type: ignore[method-assign, attr-defined]

    _patch_distributed()

    # torch.utils.data.DataLoader
    torch.utils.data.DataLoader.__init__ = _wrapper_data_loader(torch.utils.data.DataLoader.__init__)  # type: ignore[method-assign]

    _patch_jit_script()


_init()
