"""What a call compiles online on a real NPU (``aclopCompileAndExecute``): which kernel it reaches and
the key a compiled kernel is cached under, for the dispatch-path model (:mod:`ascend_env.sim.dispatch_model`).
Checked against the real torch_npu 2.1.0.post6 binary on the emulated CANN
(``tests/cann/test_paths_binary.py``). Importing this module imports no torch.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Optional

__all__ = ["acl_kernel", "helper_kernels", "positional", "signature"]

# Measured on the real torch_npu 2.1.0.post6 with ACL_OP_JIT_COMPILE on (tests/cann/test_paths_binary.py):
# these ops run no kernel when not training (the input comes back), ...
_NO_KERNEL_UNLESS_TRAINING = frozenset(
    {"dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout"}
)
# ... these composites of torch reach one op-plugin kernel inside (its aclopCompileAndExecute counted
# under the outer op: Fill, MaskedFill), which the dispatch mode does not see by itself ...
_INNER_KERNEL = {
    "full": "fill_.Scalar",
    "new_ones": "fill_.Scalar",
    "new_full": "fill_.Scalar",
    "masked_fill.Scalar": "masked_fill_.Scalar",
    "masked_fill.Tensor": "masked_fill_.Tensor",
}
# ... and a copy whose source is not contiguous (a slice, an expanded or transposed view) compiles
# the view's own kernel (AsStrided, BroadcastTo, Slice) before the copy.
_COPIES = frozenset({"clone", "contiguous", "copy_", "_to_copy"})


def acl_kernel(
    name: str, path: str, args: tuple[Any, ...], kwargs: dict[str, Any], route: Any
) -> Optional[str]:
    """The op whose ``aclopCompileAndExecute`` a call of ``name`` (dispatched down ``path``) reaches,
    or None where it reaches none. ``route`` gives another op's path."""
    if name in _NO_KERNEL_UNLESS_TRAINING:
        train = args[2] if len(args) > 2 else kwargs.get("train", True)
        probability = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
        if not train or probability == 0:
            return None
    if path == "acl_op":
        return name
    inner = _INNER_KERNEL.get(name)
    if inner is not None and route(inner) == "acl_op":
        return inner
    if name in _COPIES and any(not t.is_contiguous() for t in args[:1] if hasattr(t, "is_contiguous")):
        return "non-contiguous " + name
    return None


def positional(func: Any, args: tuple[Any, ...]) -> Any:
    """:func:`signature` of the positional arguments, where a ``Scalar`` counts by its type only:
    torch_npu hands a scalar to aclopCompileAndExecute as a host-placed input, not an attribute,
    so its value compiles nothing new (``ge.Scalar`` against each step's position)."""
    arguments = func._schema.arguments
    found = []
    for index, value in enumerate(args):
        declared = str(arguments[index].type) if index < len(arguments) else ""
        if declared == "Scalar" and isinstance(value, (int, float, bool)):
            found.append(("S", type(value).__name__))
        else:
            found.append(signature(value))
    return tuple(found)


def signature(value: Any) -> Any:
    """A hashable stand-in for an argument: a tensor by shape and dtype, anything else by value."""
    torch = sys.modules.get("torch")  # no torch imported: no tensor to tell apart
    if torch is not None and isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(signature(item) for item in value)
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    return repr(value)


# Matrix products take a transposed operand as it is (MatMul's transpose_x1 / transpose_x2
# attributes: op-plugin aclops/MmKernelNpu.cpp, BmmKernelNpu.cpp, b761d58): no helper for it.
_TAKES_TRANSPOSED = frozenset({"matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "addbmm", "mv"})
# Ops whose integer or boolean tensor inputs are indices, masks or conditions, never cast to the
# values' dtype: the Cast helper is only for operands of one arithmetic.
_NOT_CAST = ("embedding", "index", "gather", "scatter", "masked", "where", "take", "isin", "put")


def helper_kernels(name: str, path: str, args: tuple[Any, ...]) -> list[Any]:
    """The kernels torch_npu compiles inside one acl_op call of ``name`` besides the op's own, each
    by its key: a non-contiguous tensor input is made contiguous first (``OpCommand::Input`` ->
    ``NpuUtils::format_contiguous``: a Transpose, Slice, BroadcastTo or AsStrided kernel of that
    view; a matrix product takes a transposed operand as it is), and an operand whose dtype is not
    the operands' common dtype is cast first (a Cast kernel). Measured against the binary in
    ``tests/cann/test_paths_binary.py``; torch_npu's casts for dtypes a kernel does not take
    (ArgMaxV2's output, a ReduceSum of bools) are not modelled."""
    torch = sys.modules.get("torch")
    if path != "acl_op" or torch is None:
        return []
    base = name.split(".", 1)[0]
    tensors = [a for a in args if isinstance(a, torch.Tensor) and a.dim() > 0]
    found: list[Any] = []
    for tensor in tensors:
        if tensor.is_contiguous():
            continue
        if base in _TAKES_TRANSPOSED and tensor.dim() >= 2 and tensor.transpose(-1, -2).is_contiguous():
            continue
        found.append(("contiguous", tuple(tensor.shape), tuple(tensor.stride()), str(tensor.dtype)))
    operands = tensors
    dtypes = {t.dtype for t in operands}
    if len(dtypes) > 1 and not any(word in base for word in _NOT_CAST):
        common = functools.reduce(torch.promote_types, dtypes)
        for tensor in operands:
            if tensor.dtype != common:
                found.append(("Cast", tuple(tensor.shape), str(tensor.dtype), str(common)))
    return found
