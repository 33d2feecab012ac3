"""Run under ``python -m ascend_env.cann --soc SOC`` by test_emulated_cann.py: the real torch_npu on
the emulated CANN against the CPU. Prints one JSON document on stdout: per check, whether the NPU
result equals the CPU's, and the emulated CANN's counters each check added (``delta``); for the
Llama, the counters of each decoding step too."""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List

import torch
import torch_npu  # noqa: F401  (the real binary, on the emulated CANN)

from ascend_env.cann import runtime
from ascend_env.checks.smoke import GENERATE_OPTIONS, PROMPT, tiny_llama


def counters() -> Dict[str, Dict[str, int]]:
    return {kind: dict(names) for kind, names in runtime.report()["counters"].items()}


def delta(before: Dict[str, Dict[str, int]], after: Dict[str, Dict[str, int]]) -> Dict[str, Dict[str, int]]:
    out: Dict[str, Dict[str, int]] = {}
    for kind, names in after.items():
        changed = {n: c - before.get(kind, {}).get(n, 0) for n, c in names.items()}
        changed = {n: c for n, c in changed.items() if c}
        if changed:
            out[kind] = changed
    return out


def mlp_step(device: str) -> Any:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(5, 8).to(device)
    y = torch.tensor([0, 1, 2, 3, 1]).to(device)
    loss = torch.nn.functional.nll_loss(torch.log_softmax(model(x), dim=1), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return (
        [loss.detach().cpu()]
        + [p.grad.cpu() for p in model.parameters()]
        + [p.detach().cpu() for p in model.parameters()]
    )


def main() -> None:
    result: Dict[str, Any] = {}
    torch.npu.set_device(0)
    result["jit_compile"] = torch_npu.npu.is_jit_compile_false() is False

    elements, tests = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([2, 4, 9])
    before = counters()
    first = torch.isin(elements.npu(), tests.npu()).cpu()
    second = torch.isin(elements.npu(), tests.npu(), invert=True).cpu()
    result["isin"] = {
        "equal": torch.equal(first, torch.isin(elements, tests))
        and torch.equal(second, torch.isin(elements, tests, invert=True)),
        "delta": delta(before, counters()),
    }

    # A floating argument: aclnnLayerNorm's eps (a double, in the generic signature's xmm0); a
    # large one, so that a wrong decoding shows in the result.
    x, weight, bias = torch.randn(3, 8), torch.randn(8), torch.randn(8)
    before = counters()
    got = torch.nn.functional.layer_norm(x.npu(), (8,), weight.npu(), bias.npu(), eps=0.75).cpu()
    result["layer_norm"] = {
        "equal": torch.allclose(
            got, torch.nn.functional.layer_norm(x, (8,), weight, bias, eps=0.75), atol=1e-5
        ),
        "delta": delta(before, counters()),
    }

    # isin with a scalar element (isin.Scalar_Tensor: a 0-dim out) and masked_select (a dynamic
    # output shape: the kernel sets it, aclGetViewShape reads it back), against the CPU.
    x, mask = torch.arange(12.0).reshape(3, 4), torch.tensor([True, False, True, True])
    before = counters()
    scalar_isin = [torch.isin(v, tests.npu(), invert=i).cpu() for v in (4, 5) for i in (False, True)]
    selected = [torch.masked_select(x.npu(), m.npu()).cpu() for m in (mask, x > 100)]
    result["scalar_isin_masked_select"] = {
        "equal": all(
            got.shape == want.shape and torch.equal(got, want)
            for got, want in zip(
                scalar_isin + selected,
                [torch.isin(v, tests, invert=i) for v in (4, 5) for i in (False, True)]
                + [torch.masked_select(x, m) for m in (mask, x > 100)],
            )
        ),
        "delta": delta(before, counters()),
    }

    before = counters()
    cpu, npu = mlp_step("cpu"), mlp_step("npu")
    result["mlp"] = {
        "loss": [float(cpu[0]), float(npu[0])],
        "equal": all(torch.allclose(a, b, atol=1e-6) for a, b in zip(cpu, npu)),
        "delta": delta(before, counters()),
    }

    # Indexing as generation strategies use it: x[i, []] = v (a real, empty index: writes nothing)
    # beside x[:, j] = v (a left-out dim: op-plugin's placeholder, an empty tensor of x's dtype),
    # reads alike, index_add, nonzero / torch.where, one_hot, repeat_interleave with a dim, a
    # floor division by a scalar, topk and scatter: each against the CPU.
    def indexing(device: str) -> List[Any]:
        x = torch.arange(12.0).reshape(3, 4).to(device)
        empty, cols = torch.tensor([], dtype=torch.long).to(device), torch.tensor([1, 3]).to(device)
        written = x.clone()
        written[1, empty] = -1.0
        written[:, cols] = -2.0
        added = x.index_add(0, torch.tensor([0, 2]).to(device), torch.ones(2, 4).to(device), alpha=3)
        flags = (x % 3 == 0).to(device)
        return [
            written,
            x[:, cols],
            x[1, empty],
            added,
            torch.nonzero(flags),
            *torch.where(flags),
            torch.nn.functional.one_hot(torch.tensor([0, 3, 1]).to(device), 5),
            x.repeat_interleave(2, dim=1),
            torch.div(x, 3, rounding_mode="floor"),
            *torch.topk(x, 2, dim=1),
            x.scatter(1, torch.tensor([[0], [1], [2]]).to(device), -5.0),
        ]

    before = counters()
    got, want = indexing("npu"), indexing("cpu")
    result["indexing"] = {
        "equal": [a.shape == b.shape and torch.equal(a.cpu(), b) for a, b in zip(got, want)],
        "delta": delta(before, counters()),
    }

    model = tiny_llama()
    ids = torch.tensor(PROMPT)
    steps: List[Dict[str, Dict[str, int]]] = []

    def snapshot(input_ids: Any, scores: Any) -> Any:
        steps.append(counters())
        return scores

    with torch.no_grad():
        expected = model.generate(ids, attention_mask=torch.ones_like(ids), **GENERATE_OPTIONS)
        on_npu = ids.npu()
        before = counters()
        got = model.npu().generate(
            on_npu, attention_mask=torch.ones_like(on_npu), logits_processor=[snapshot], **GENERATE_OPTIONS
        )
    result["llama"] = {
        "tokens": got.cpu().tolist(),
        "expected": expected.tolist(),
        "equal": torch.equal(got.cpu(), expected),
        "delta": delta(before, counters()),
        "steps": [delta(a, b) for a, b in zip(steps, steps[1:])],
    }
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


main()
