"""Supervised fine-tuning of a tiny Llama, as LLaMA-Factory and the HF Trainer do it, on any device.

    python sft_llama.py DEVICE OUT        (DEVICE: cpu or npu; OUT: where torch.save puts the results)

Prompt and padding tokens are masked out of the labels with ``torch.isin``; batches come from a
DataLoader with two worker processes; AdamW, gradient clipping, two micro-batches of gradient
accumulation per step, and bfloat16 autocast. Saves ``{"losses", "grad_norms", "initial", "weights"}``.
Eager attention: scaled_dot_product_attention picks its kernel by device (the CPU's fused one on
the CPU, the decomposition on the simulated NPU, torch_npu's on the device), which changes
bfloat16 results in the last bits; every other op runs the same CPU kernel on either device.
"""

import sys

import torch
import transformers
from torch.utils.data import DataLoader, Dataset

PAD, BOS, EOS, SEP = 0, 1, 2, 3
STEPS, ACCUMULATION, BATCH = 3, 2, 4


class Conversations(Dataset):
    """Deterministic prompt/response pairs of token ids: BOS prompt SEP response EOS."""

    def __len__(self):
        return STEPS * ACCUMULATION * BATCH

    def __getitem__(self, index):
        generator = torch.Generator().manual_seed(index)
        prompt = torch.randint(4, 96, (3 + index % 4,), generator=generator)
        response = torch.randint(4, 96, (2 + index % 3,), generator=generator)
        return torch.cat([torch.tensor([BOS]), prompt, torch.tensor([SEP]), response, torch.tensor([EOS])])


def collate(rows):
    ids = torch.full((len(rows), max(len(r) for r in rows)), PAD)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids


def model():
    config = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def train(device):
    net = model().to(device)
    net.train()
    initial = {name: p.detach().cpu().clone() for name, p in net.named_parameters()}
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)
    loader = DataLoader(Conversations(), batch_size=BATCH, num_workers=2, collate_fn=collate)
    losses, norms = [], []
    batches = iter(loader)
    for _ in range(STEPS):
        total = 0.0
        for _ in range(ACCUMULATION):
            ids = next(batches).to(device)
            labels = ids.clone()
            # Train on the responses only: mask padding and special tokens, then the prompts.
            labels[torch.isin(labels, torch.tensor([PAD, BOS, SEP], device=device))] = -100
            after_sep = (ids == SEP).long().cumsum(-1) > 0
            labels[~after_sep] = -100
            with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
                loss = net(input_ids=ids, attention_mask=(ids != PAD).long(), labels=labels).loss
            (loss / ACCUMULATION).backward()
            total += loss.item() / ACCUMULATION
        norms.append(torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0).item())
        optimizer.step()
        optimizer.zero_grad()
        losses.append(total)
    return {
        "losses": losses,
        "grad_norms": norms,
        "initial": initial,
        "weights": {name: p.detach().cpu() for name, p in net.named_parameters()},
    }


if __name__ == "__main__":
    torch.save(train(sys.argv[1]), sys.argv[2])
