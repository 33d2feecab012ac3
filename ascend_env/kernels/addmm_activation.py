"""``_addmm_activation`` (and ``.out``) built only from ops that every torch_npu release it serves
runs natively.

``torch._addmm_activation(self, mat1, mat2, beta=1, alpha=1, use_gelu=False)`` is ``addmm``
followed by relu (or gelu): PyTorch's ``Linear`` + activation fusion reaches it (ViT MLP blocks
under torch.compile's and the transformer fast paths' ``_addmm_activation``), and 26 of the 52
torch_npu releases register no kernel for its ``out=`` form. ATen's CPU kernel
(``addmm_activation_out_cpu``, ``aten/src/ATen/native/LinearAlgebra.cpp``) runs ``addmm`` into
the result, then ``gelu_`` or ``relu_`` in place; here ``addmm``, then ``relu_`` (bit for bit the
CPU's result) or gelu as ATen's vectorised GeLU kernel computes it, ``x * 0.5 * (1 + erf(x *
M_SQRT1_2))`` from separate ops (``gelu_`` is in no release's table, ``gelu`` is missing from 26
and ``gelu.out`` from the other 26), equal within a few ulp. The shape and dtype checks are the CPU's own:
the op's meta kernel runs on meta tensors of the same shapes. No value is read back to the host.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, FrozenSet, Union

import torch
from torch import Tensor

from ascend_env.kernels.outputs import dtype_name, not_implemented, resize_output

__all__ = ["KERNELS", "NATIVE_OPS", "Scalar", "addmm_activation", "addmm_activation_out", "gelu_"]

Scalar = Union[bool, int, float, complex]

#: Every aten op the kernels dispatch on the device; each is in the ``supported:`` op lists of
#: every torch_npu release that lacks ``_addmm_activation.out``.
NATIVE_OPS: FrozenSet[str] = frozenset(
    {"addmm", "relu_", "erf", "mul.Tensor", "add.Tensor", "copy_", "resize_", "empty.memory_format"}
)


# caffe2::TypeMeta's names, as the structured kernels' out= dtype check prints them.
_TYPE_META = {
    torch.float32: "float",
    torch.float64: "double",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int",
    torch.int32: "int",
    torch.int16: "short int",
    torch.int8: "signed char",
    torch.uint8: "unsigned char",
    torch.bool: "bool",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
}


def gelu_(x: Tensor) -> Tensor:
    """GeLU in place as ATen's vectorised kernel computes it (``GeluKernel.cpp``):
    ``x * 0.5 * (1 + erf(x * M_SQRT1_2))``, one op per step."""
    wide = x
    if x.dtype in (torch.float16, torch.bfloat16):  # computed in float, rounded once, as there
        wide = torch.empty(x.shape, dtype=torch.float32, device=x.device).copy_(x)
    half = torch.mul(wide, 0.5)
    return x.copy_(torch.mul(half, torch.add(torch.erf(torch.mul(wide, math.sqrt(0.5))), 1)))


def _meta_check(
    self: Tensor, mat1: Tensor, mat2: Tensor, beta: Scalar, alpha: Scalar, use_gelu: bool
) -> None:
    """The CPU kernel's checks and messages: ATen's ADDMM_META shape checks (whose messages the
    meta kernel words otherwise), then the meta kernel on meta tensors of the same shapes."""
    for name, mat in (("mat1", mat1), ("mat2", mat2)):
        if mat.dim() != 2:
            raise RuntimeError(f"{name} must be a matrix, got {mat.dim()}-D tensor")
    if mat1.shape[1] != mat2.shape[0]:
        raise RuntimeError(
            f"mat1 and mat2 shapes cannot be multiplied ({mat1.shape[0]}x{mat1.shape[1]} and "
            f"{mat2.shape[0]}x{mat2.shape[1]})"
        )

    def meta(x: Tensor) -> Tensor:
        return torch.empty(x.shape, dtype=x.dtype, device="meta")

    torch.ops.aten._addmm_activation(
        meta(self), meta(mat1), meta(mat2), beta=beta, alpha=alpha, use_gelu=use_gelu
    )


def addmm_activation(
    self: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Scalar = 1, alpha: Scalar = 1, use_gelu: bool = False
) -> Tensor:
    """``aten::_addmm_activation``."""
    _meta_check(self, mat1, mat2, beta, alpha, use_gelu)
    result = torch.addmm(self, mat1, mat2, beta=beta, alpha=alpha)
    if use_gelu and not result.is_floating_point():  # the CPU's GeLU has no integer loop
        raise not_implemented("GeluKernelImpl", dtype_name(result.dtype))
    return gelu_(result) if use_gelu else torch.relu_(result)


def addmm_activation_out(
    self: Tensor,
    mat1: Tensor,
    mat2: Tensor,
    *,
    beta: Scalar = 1,
    alpha: Scalar = 1,
    use_gelu: bool = False,
    out: Tensor,
) -> Tensor:
    """``aten::_addmm_activation.out``."""
    result = addmm_activation(self, mat1, mat2, beta=beta, alpha=alpha, use_gelu=use_gelu)
    if out.dtype != result.dtype:  # the structured kernel's check, dtypes as caffe2 names them
        wanted, got = (_TYPE_META.get(d, str(d)) for d in (result.dtype, out.dtype))
        raise RuntimeError(f"Expected out tensor to have dtype {wanted}, but got {got} instead")
    resize_output(out, tuple(result.shape))
    return out.copy_(result)


#: The kernels by overload, callable as the dispatcher calls one registered with
#: ``torch.library.Library("aten", "IMPL").impl``.
KERNELS: Dict[str, Callable[..., Tensor]] = {
    "_addmm_activation": addmm_activation,
    "_addmm_activation.out": addmm_activation_out,
}
