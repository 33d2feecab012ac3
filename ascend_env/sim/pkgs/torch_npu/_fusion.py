"""``torch_npu.npu_fusion_attention`` on the simulated NPU: the attention it computes, in PyTorch ops.

The signature and results are op-plugin's (``npu_fusion_attention`` in
op_plugin/config/op_plugin_functions.yaml and its documentation): ``input_layout`` one of BSH,
SBH, BSND, BNSD, TND; ``atten_mask`` True where attention is masked out; ``sparse_mode`` 0 uses
``atten_mask`` as given, 2 a causal mask aligned top-left, 3 aligned bottom-right (transformers'
npu_flash_attention passes these); key/value may have fewer heads than query (grouped-query
attention). It returns (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels).
"""

from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

_Result = Tuple[Tensor, Tensor, Tensor, Tensor, int, int, int]

_LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")


def _to_bnsd(x: Tensor, layout: str, heads: int) -> Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    if layout == "BSH":
        b, s, h = x.shape
        return x.reshape(b, s, heads, h // heads).transpose(1, 2)
    # SBH
    s, b, h = x.shape
    return x.reshape(s, b, heads, h // heads).permute(1, 2, 0, 3)


def _from_bnsd(x: Tensor, layout: str) -> Tensor:
    if layout == "BNSD":
        return x
    if layout == "BSND":
        return x.transpose(1, 2)
    b, n, s, d = x.shape
    if layout == "BSH":
        return x.transpose(1, 2).reshape(b, s, n * d)
    return x.permute(2, 0, 1, 3).reshape(s, b, n * d)


def _attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], scale: float, keep_prob: float
) -> Tuple[Tensor, Tensor, Tensor]:
    """Attention over (B, N, S, D) tensors; ``mask`` True where masked out."""
    if k.shape[1] != q.shape[1]:
        repeat = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(repeat, dim=1)
        v = v.repeat_interleave(repeat, dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if mask is not None:
        scores = scores.masked_fill(mask.to(torch.bool), float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True)
    weights = torch.softmax(scores, dim=-1)
    weights = torch.nan_to_num(weights)  # rows masked out entirely
    if keep_prob < 1.0:
        weights = torch.nn.functional.dropout(weights, p=1.0 - keep_prob)
    out = torch.matmul(weights, v.float()).to(q.dtype)
    row_sum = torch.exp(scores - row_max).nan_to_num().sum(dim=-1, keepdim=True)
    return out, row_max, row_sum


def _mask(
    atten_mask: Optional[Tensor], sparse_mode: int, sq: int, skv: int, device: torch.device
) -> Optional[Tensor]:
    if sparse_mode in (2, 3):
        shift = 0 if sparse_mode == 2 else skv - sq
        rows = torch.arange(sq, device=device).unsqueeze(1)
        cols = torch.arange(skv, device=device).unsqueeze(0)
        return cols > rows + shift
    if atten_mask is None:
        return None
    return atten_mask[..., :sq, :skv] if atten_mask.dim() >= 2 else atten_mask


def npu_fusion_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    head_num: int,
    input_layout: str,
    pse: Optional[Tensor] = None,
    padding_mask: Optional[Tensor] = None,
    atten_mask: Optional[Tensor] = None,
    scale: float = 1.0,
    keep_prob: float = 1.0,
    pre_tockens: int = 2147483647,
    next_tockens: int = 2147483647,
    inner_precise: int = 0,
    prefix: Optional[Sequence[int]] = None,
    actual_seq_qlen: Optional[Sequence[int]] = None,
    actual_seq_kvlen: Optional[Sequence[int]] = None,
    sparse_mode: int = 0,
    gen_mask_parallel: bool = True,
    sync: bool = False,
) -> _Result:
    """Fused attention as torch_npu computes it (see the module docstring)."""
    if input_layout not in _LAYOUTS:
        raise ValueError(
            f"npu_fusion_attention: input_layout must be one of {_LAYOUTS}, got {input_layout!r}"
        )
    if input_layout == "TND":
        return _varlen(
            query,
            key,
            value,
            head_num,
            atten_mask,
            scale,
            keep_prob,
            actual_seq_qlen,
            actual_seq_kvlen,
            sparse_mode,
        )
    q = _to_bnsd(query, input_layout, head_num)
    kv_heads = head_num * key.shape[-1] // query.shape[-1] if input_layout in ("BSH", "SBH") else None
    k = _to_bnsd(key, input_layout, kv_heads or key.shape[-3 if input_layout == "BNSD" else -2])
    v = _to_bnsd(value, input_layout, kv_heads or value.shape[-3 if input_layout == "BNSD" else -2])
    mask = _mask(atten_mask, sparse_mode, q.shape[2], k.shape[2], q.device)
    if pse is not None:
        raise NotImplementedError("the simulated npu_fusion_attention does not model pse (position bias)")
    out, row_max, row_sum = _attend(q, k, v, mask, scale, keep_prob)
    return (
        _from_bnsd(out, input_layout),
        row_max.expand(*row_max.shape[:-1], 8).contiguous(),
        row_sum.expand(*row_sum.shape[:-1], 8).contiguous(),
        torch.empty(0, device=q.device),
        0,
        0,
        0,
    )


# seq_q and seq_kv: the actual_seq_* sequences of ints, or None (not given), which fails in zip.
def _varlen(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    head_num: int,
    atten_mask: Optional[Tensor],
    scale: float,
    keep_prob: float,
    seq_q: Any,
    seq_kv: Any,
    sparse_mode: int,
) -> _Result:
    """TND: sequences packed along T, ``actual_seq_*`` their cumulative ends."""
    outs: List[Tensor] = []
    maxes: List[Tensor] = []
    sums: List[Tensor] = []
    q_start = kv_start = 0
    for q_end, kv_end in zip(seq_q, seq_kv):
        q = query[q_start:q_end].transpose(0, 1).unsqueeze(0)
        k = key[kv_start:kv_end].transpose(0, 1).unsqueeze(0)
        v = value[kv_start:kv_end].transpose(0, 1).unsqueeze(0)
        mask = _mask(atten_mask, sparse_mode, q.shape[2], k.shape[2], q.device)
        out, row_max, row_sum = _attend(q, k, v, mask, scale, keep_prob)
        outs.append(out[0].transpose(0, 1))
        maxes.append(row_max[0].transpose(0, 1))
        sums.append(row_sum[0].transpose(0, 1))
        q_start, kv_start = q_end, kv_end
    row_max, row_sum = torch.cat(maxes), torch.cat(sums)
    return (
        torch.cat(outs),
        row_max.expand(*row_max.shape[:-1], 8).contiguous(),
        row_sum.expand(*row_sum.shape[:-1], 8).contiguous(),
        torch.empty(0, device=query.device),
        0,
        0,
        0,
    )
