"""``torch_npu.npu_rotary_mul`` on the simulated NPU: the rotary embedding it computes, in PyTorch ops.

op-plugin declares ``npu_rotary_mul(Tensor self, Tensor r1, Tensor r2) -> Tensor`` (later releases add
``str rotary_mode='half'``): ``self * r1 + rotate_half(self) * r2``, where ``rotate_half`` swaps the
two halves of the last dimension and negates the new first half, with ``r1`` (cos) and ``r2`` (sin)
broadcast against ``self``. transformers 4.53 imports it where torch_npu imports
(transformers/integrations/npu_flash_attention.py, ``npu_apply_rotary_emb``).
"""

from torch import Tensor, cat


def npu_rotary_mul(self: Tensor, r1: Tensor, r2: Tensor, rotary_mode: str = "half") -> Tensor:
    """Rotary position embedding, ``half`` mode (see the module docstring)."""
    if rotary_mode != "half":
        raise NotImplementedError(
            f"the simulated npu_rotary_mul models rotary_mode='half' only, got {rotary_mode!r}"
        )
    first, second = self.chunk(2, dim=-1)
    return self * r1 + cat((-second, first), dim=-1) * r2
