"""torch_npu's two dispatch paths, modelled on the simulated NPU: would-be online compiles, the
64-bit slow-path warnings and host syncs, per decoding step of ``generate()``.

:func:`start` pushes a ``TorchDispatchMode`` that sees every aten op the process runs. For each op
on ``npu`` tensors it decides the path op-plugin's generated wrapper would take
(``op_plugin/OpInterface.cpp``: ``op_api::`` when ``CheckJitDisable()`` holds, else ``acl_op::``;
an op with only an ``acl_op`` implementation always takes it), from the release's op-path data
(:mod:`ascend_env.sim.oppaths`) and :mod:`ascend_env.sim.compile_mode` as it stands at that moment, so
a script that calls ``set_compile_mode`` mid-run is modelled from there on. Then:

- on ``acl_op`` with JIT compile on, each new key (op, input shapes and dtypes, non-tensor
  arguments) is one **would compile**: ``aclopCompileAndExecute`` compiles it online before it
  runs. Nothing here measures hardware: the counts say what a real NPU would be asked to compile;
- on ``acl_op``, the four ``TORCH_NPU_WARN_ONCE`` 64-bit warnings (``AddKernelNpu.cpp``,
  ``NeKernelNpu.cpp``, ``GatherKernelNpu.cpp``, ``IndexSelectKernelNpu.cpp``) are printed with
  the release's text and line, once per site per process, on fd 2, unless silenced as the
  simulator's CAUTION line is (:func:`warnings_silenced`);
- on any path, each device-to-host read is a **host sync**: ``_local_scalar_dense`` (``item()``,
  ``bool()``, ``int()`` of a tensor), ``equal``, copies to the CPU, and ops whose output shape
  depends on the data (``nonzero``, ``masked_select``, boolean indexing, ...), counted per op and
  per Python call site (the first frame outside torch).

Steps: :mod:`ascend_env.sim.steps` tells the model where each ``generate()`` call and each of its
decoding steps begin and end. Step 0 holds ``generate()``'s set-up and the prompt's forward pass;
what runs after the last step (the loop's final check) is reported apart.

Each process's findings are a :class:`ascend_env.sim.reports.PathsReport` (:func:`report`), the
last report's ``"paths"``; the audit sums them (:mod:`ascend_env.checks.paths_report`). Importing
this module imports no torch.
"""

from __future__ import annotations

import collections
import functools
import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, cast

from ascend_env.sim import compile_keys, compile_mode, oppaths, optables, steps
from ascend_env.sim.reports import Counts, GuardRecord, PathsReport, RunReport, Span, Steady, Warning64Record
from ascend_env.sim.silencing import warnings_silenced

__all__ = [
    "COPY_TO_HOST",
    "DATA_DEPENDENT",
    "DEVICE",
    "ENV",
    "INDEX_OPS",
    "INFRASTRUCTURE",
    "STEADY_FROM",
    "SYNC_OPS",
    "WARN_OPS",
    "Bucket",
    "Model",
    "active",
    "most_first",
    "report",
    "start",
    "start_from_environment",
    "steady_compiles",
    "steady_state",
]

ENV = "ASCEND_ENV_AUDIT_PATHS"
# Steps 0 (the prompt) and 1 (the first token read from the KV cache) see shapes no later step sees;
# from step 2 on every step is alike, so the steady state is reported from here.
STEADY_FROM = 2

# Ops that read device memory on the host (the stream must drain first).
SYNC_OPS = frozenset({"_local_scalar_dense", "is_nonzero", "item", "equal"})
# Ops whose output shape depends on the data: the host waits for the result to size it.
DATA_DEPENDENT = frozenset(
    {
        "nonzero",
        "nonzero_numpy",
        "masked_select",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "unique_dim_consecutive",
        "bincount",
        "repeat_interleave.Tensor",
    }
)
INDEX_OPS = frozenset({"index.Tensor", "index_put", "index_put_", "_index_put_impl_"})
# Copies that can move device data to the host. torch_npu registers to.device / to.dtype_layout /
# to.other itself, so they reach the dispatch mode before becoming _to_copy.
COPY_TO_HOST = frozenset({"_to_copy", "to", "copy_", "_copy_from", "_copy_from_and_resize"})

# The conditions of the four 64-bit warnings, from op-plugin's acl_op sources (v6.0.rc2-pytorch2.1.0
# pins op-plugin b761d5824d7bc3f48033fe7120552cc2cfbce56d, op_plugin/ops/base_ops/aclops/):
# AddKernelNpu.cpp add_out_npu_nocheck warns when neither operand is a CPU scalar, alpha is 1 and
# self, cast to the promoted type, is int64; NeKernelNpu.cpp warns in its Tensor overload (both
# operands on the device, promoted type int64) and in its Scalar one (other a scalar or a CPU
# scalar, promoted type int64); GatherKernelNpu.cpp and IndexSelectKernelNpu.cpp when self is int64.
WARN_OPS: Dict[str, frozenset[str]] = {
    "AddKernelNpu.cpp": frozenset({"add.Tensor", "add_.Tensor", "add.out"}),
    "NeKernelNpu.cpp": frozenset(
        {"ne.Tensor", "ne_.Tensor", "ne.Tensor_out", "ne.Scalar", "ne_.Scalar", "ne.Scalar_out"}
    ),
    "GatherKernelNpu.cpp": frozenset({"gather", "gather.out"}),
    "IndexSelectKernelNpu.cpp": frozenset({"index_select", "index_select.out"}),
}
DEVICE = "npu"
# The kernels the simulator registers whatever the table: kInfrastructure in sim/csrc/sim_backend.cpp
# (tests/unit/sim/test_dispatch_model.py reads it there).
INFRASTRUCTURE = frozenset(
    {
        "is_pinned",
        "_pin_memory",
        "empty.memory_format",
        "empty_strided",
        "_copy_from",
        "_copy_from_and_resize",
        "resize_",
        "as_strided",
        "set_.source_Storage_storage_offset",
        "set_.source_Storage",
        "set_.source_Tensor",
        "view",
        "_reshape_alias",
    }
)


class Bucket:
    """What ran in one step (or outside generate): counts by op, path and call site."""

    def __init__(self) -> None:
        self.paths: collections.Counter[str] = collections.Counter()
        self.compiles: collections.Counter[str] = collections.Counter()
        self.compile_sites: collections.Counter[str] = collections.Counter()
        self.syncs: collections.Counter[str] = collections.Counter()
        self.sync_sites: collections.Counter[str] = collections.Counter()
        self.warnings: collections.Counter[str] = collections.Counter()

    def to_json(self) -> Counts:
        return {
            "would_compile": sum(self.compiles.values()),
            "host_syncs": sum(self.syncs.values()),
            "warnings_64bit": sum(self.warnings.values()),
            "paths": dict(sorted(self.paths.items())),
            "would_compile_by_op": most_first(self.compiles),
            "would_compile_by_site": most_first(self.compile_sites),
            "host_syncs_by_op": most_first(self.syncs),
            "host_syncs_by_site": most_first(self.sync_sites),
            "warnings_64bit_by_site": most_first(self.warnings),
        }


def most_first(counter: Mapping[str, int]) -> Dict[str, int]:
    """``counter`` as a dict, the largest count first (ties by name)."""
    return dict(sorted(counter.items(), key=lambda item: (-item[1], item[0])))


class _Run:
    """One ``generate()`` call: its steps so far, what ran after the last one, where, which mode."""

    def __init__(self, site: str) -> None:
        self.steps: List[Bucket] = []
        self.after: Optional[Bucket] = None
        self.site = site
        self.mode: Optional[str] = None


class Model:
    """The process's model: the op-path data, the compile cache, the steps."""

    def __init__(
        self, data: oppaths.OpPaths, table_ops: frozenset[str], by_hand: frozenset[str] = frozenset()
    ) -> None:
        self.data = data
        self.table_ops = table_ops
        self.by_hand = by_hand  # the _foreach_* ops registered by hand: their per-tensor loop runs
        self.seen: set[tuple[Any, ...]] = set()
        self.names: Dict[Any, str] = {}
        self.outside = Bucket()
        self.totals = Bucket()
        self.runs: List[_Run] = []
        self.depth = 0
        self.current: Optional[Bucket] = None
        self.warned: Dict[Tuple[str, int], Warning64Record] = {}
        self.errors: List[str] = []

    # --- steps -------------------------------------------------------------------------------
    def enter_generate(self, site: str = "<unknown>") -> None:
        self.depth += 1
        if self.depth == 1:
            self.runs.append(_Run(site))
            self.current = Bucket()

    def generation_mode(self, mode: str) -> None:
        """The decoding mode transformers chose for the ``generate()`` call running now."""
        if self.depth >= 1 and self.runs and self.runs[-1].mode is None:
            self.runs[-1].mode = mode

    def step_done(self) -> None:
        if self.depth >= 1 and self.current is not None:
            self.runs[-1].steps.append(self.current)
            self.current = Bucket()

    def exit_generate(self) -> None:
        self.depth -= 1
        if self.depth == 0 and self.current is not None:
            self.runs[-1].after = self.current
            self.current = None

    def bucket(self) -> Bucket:
        return self.current if self.current is not None else self.outside

    # --- ops ---------------------------------------------------------------------------------
    def name(self, func: Any) -> str:
        found = self.names.get(func)
        if found is None:
            schema = func._schema
            base = schema.name.split("::", 1)[-1]
            found = base + ("." + schema.overload_name if schema.overload_name else "")
            self.names[func] = found
        return found

    def path(self, name: str) -> str:
        """``fallback`` (no NPU kernel: the CPU fallback runs it), ``acl_op``, ``op_api``, or
        ``torch_npu`` (not an op-plugin op: views, copies, allocation, composites, the
        ``_foreach_*`` ops registered by hand, whose per-tensor ops are counted one by one)."""
        if name not in self.table_ops and name not in INFRASTRUCTURE:
            return "torch_npu" if name in self.by_hand or _composite(name) else "fallback"
        has_api = name in self.data.op_api
        has_acl = name in self.data.acl_op
        if not has_api and not has_acl:
            return "torch_npu"
        return "acl_op" if has_acl and compile_mode.acl_op(has_api) else "op_api"

    def observe(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not _on_npu(args, kwargs):
            return
        name = self.name(func)
        path = self.path(name)
        buckets = (self.bucket(), self.totals)
        for bucket in buckets:
            bucket.paths[path] += 1
        sync = _host_sync(name, args, kwargs)
        if sync:
            site = self.site()
            for bucket in buckets:
                bucket.syncs[name] += 1
                bucket.sync_sites[site] += 1
        kernel = compile_keys.acl_kernel(name, path, args, kwargs, self.path)
        if kernel is None:
            return
        if compile_mode.jit_compile():
            key = (
                kernel,
                compile_keys.positional(func, args),
                compile_keys.signature(tuple(sorted(kwargs.items()))),
            )
            new = [k for k in (key, *compile_keys.helper_kernels(name, path, args)) if k not in self.seen]
            self.seen.update(new)
            if new:
                site = self.site()
                for bucket in buckets:
                    bucket.compiles[name] += len(new)
                    bucket.compile_sites[site] += len(new)
        if path != "acl_op":
            return
        for warning in self.data.warnings:
            if name in WARN_OPS.get(warning.file, ()) and _warns_64bit(warning, name, args, kwargs):
                self.warn(warning, name, buckets)

    def warn(self, warning: oppaths.Warning64, name: str, buckets: Tuple[Bucket, ...]) -> None:
        key = (warning.file, warning.line)
        label = f"{warning.file}:{warning.line}"
        for bucket in buckets:
            bucket.warnings[label] += 1
        record = self.warned.get(key)
        if record is not None:
            record["count"] += 1
            return
        printed = not warnings_silenced()
        self.warned[key] = {
            "file": warning.file,
            "line": warning.line,
            "op": name,
            "text": warning.text,
            "site": self.site(),
            "count": 1,
            "printed": printed,
        }
        if printed:
            _write_fd2(f"[W {warning.file}:{warning.line}] Warning: {warning.text} (function operator())\n")

    def site(self) -> str:
        """The first Python frame outside torch and ascend-env: ``file:line``."""
        return steps.caller_site()

    # --- report ------------------------------------------------------------------------------
    def report(self) -> PathsReport:
        runs: List[RunReport] = []
        for run in self.runs:
            steps = [bucket.to_json() for bucket in run.steps]
            runs.append(
                {
                    "steps": steps,
                    "after": (run.after or Bucket()).to_json(),
                    "steady": steady_state(steps),
                    "site": run.site,
                    "mode": run.mode,
                }
            )
        return {
            "soc": compile_mode.soc(),
            "soc_assumed": compile_mode.soc_assumed(),
            "jit_compile": compile_mode.jit_compile(),
            "jit_compile_set": compile_mode.jit_compile_set(),
            "op_paths": self.data.version,
            "op_paths_source": self.data.source,
            "steady_from": STEADY_FROM,
            "totals": self.totals.to_json(),
            "outside_generate": self.outside.to_json(),
            "generate": runs,
            "warnings_64bit": sorted(self.warned.values(), key=lambda w: (w["file"], w["line"])),
            "errors": self.errors[:5],
            "compile_guard": _guard_record(),
        }


def steady_state(steps: List[Counts]) -> Optional[Steady]:
    """Per-step minimum and maximum of each count over the steps from :data:`STEADY_FROM` on."""
    tail = steps[STEADY_FROM:]
    if not tail:
        return None
    return {
        "steps": len(tail),
        "first": STEADY_FROM,
        "would_compile": _span([step["would_compile"] for step in tail]),
        "host_syncs": _span([step["host_syncs"] for step in tail]),
        "warnings_64bit": _span([step["warnings_64bit"] for step in tail]),
    }


def _span(values: List[int]) -> Span:
    return {"min": min(values), "max": max(values), "total": sum(values)}


def steady_compiles(found: PathsReport) -> Tuple[int, Dict[str, int]]:
    """The would-be online compiles in the steady state of every ``generate()`` of ``found`` (the
    steps from :data:`STEADY_FROM` on): how many, and how many of each op, most first."""
    count = 0
    by_op: collections.Counter[str] = collections.Counter()
    for run in found["generate"]:
        for step in run["steps"][STEADY_FROM:]:
            count += step["would_compile"]
            by_op.update(step["would_compile_by_op"])
    return count, most_first(by_op)


def _guard_record() -> GuardRecord:
    """What the startup hook's compile-mode guard did in this process, and why: its decision
    (``ascend_env.hook.compile_guard.Decision``), or why it never decided."""
    from ascend_env.hook import files

    if files.running() is None:
        return {"ran": False, "why": "the startup hook is not installed in this Python"}
    from ascend_env.hook import runtime

    status = runtime.status()
    if status["disabled"]:
        return {"ran": False, "why": "the startup hook is switched off ($ASCEND_ENV_DISABLE)"}
    decision = status["compile_guard"]
    if decision is None:
        return {"ran": False, "why": "torch_npu was never imported, and the guard runs when it is"}
    return cast(GuardRecord, dict(decision, ran=True))


def _tensors(args: Any) -> Iterator[Any]:
    import torch

    for value in args:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    yield item


def _on_npu(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    for tensor in _tensors(args):
        if tensor.device.type == DEVICE:
            return True
    for value in kwargs.values():
        if getattr(value, "type", None) == DEVICE:  # a factory's device=
            return True
    return any(t.device.type == DEVICE for t in _tensors(kwargs.values()))


@functools.lru_cache(maxsize=None)
def _composite(name: str) -> bool:
    """Whether torch has a CompositeExplicitAutograd kernel for ``name``: the device runs that,
    not the CPU fallback (views such as ``slice.Tensor``, ``unsqueeze``)."""
    import torch

    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CompositeExplicitAutograd"))


def _cpu_scalar(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dim() == 0


def _host_sync(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    import torch

    base = name.split(".", 1)[0]
    if base in SYNC_OPS or name in SYNC_OPS or base in DATA_DEPENDENT or name in DATA_DEPENDENT:
        if name == "repeat_interleave.Tensor" and kwargs.get("output_size") is not None:
            return False
        return True
    if name in INDEX_OPS:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        masks = (torch.bool, torch.uint8)
        return any(isinstance(i, torch.Tensor) and i.dtype in masks for i in indices or ())
    if base in COPY_TO_HOST:
        if base in ("_to_copy", "to"):
            source = args[0] if args else kwargs.get("self")
            if not isinstance(source, torch.Tensor) or source.device.type != DEVICE:
                return False
            return any(_host_device(target) for target in list(args[1:]) + list(kwargs.values()))
        # copy_(self=destination, src): a device source written into a host tensor
        dst, src = (args + (None, None))[:2]
        return (
            isinstance(dst, torch.Tensor)
            and dst.device.type == "cpu"
            and isinstance(src, torch.Tensor)
            and src.device.type == DEVICE
        )
    return False


def _host_device(value: Any) -> bool:
    """Whether ``value`` (a ``to`` / ``_to_copy`` argument) names the CPU: a device or a CPU tensor."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.device.type == "cpu"
    if isinstance(value, torch.device):
        return value.type == "cpu"
    return isinstance(value, str) and value.split(":", 1)[0] == "cpu"


def _warns_64bit(
    warning: oppaths.Warning64, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> bool:
    import torch

    self = args[0] if args else kwargs.get("self")
    other = args[1] if len(args) > 1 else kwargs.get("other")
    if not isinstance(self, torch.Tensor):
        return False
    if warning.file in ("GatherKernelNpu.cpp", "IndexSelectKernelNpu.cpp"):
        return self.dtype == torch.int64
    scalar_other = not isinstance(other, torch.Tensor) or _cpu_scalar(other) or _cpu_scalar(self)
    if warning.file == "AddKernelNpu.cpp":
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if scalar_other or alpha != 1:
            return False
    elif warning.scalar_other != scalar_other:
        return False
    try:
        promoted = torch.result_type(self, other)  # type: ignore[arg-type]
    except (RuntimeError, TypeError):
        return False
    return promoted == torch.int64


def _write_fd2(line: str) -> None:
    data = line.encode("utf-8")
    while data:
        try:
            written = os.write(2, data)
        except OSError:
            return
        if written <= 0:
            return
        data = data[written:]


# ------------------------------------------------------------------------------- process state

_MODEL: List[Model] = []


def active() -> Optional[Model]:
    """The model running in this process, or None."""
    return _MODEL[0] if _MODEL else None


def start() -> Model:
    """Start the model in this process (the simulator must be enabled); idempotent."""
    if _MODEL:
        return _MODEL[0]
    from ascend_env import sim
    from ascend_env.exceptions import UsageError

    label = sim.enabled_table()
    data = oppaths.lookup(label)
    if data is None:
        raise UsageError(
            f"no op-path data for the simulated table {label!r}, so the dispatch paths cannot be modelled.",
            "audit with --torch-npu and one of "
            + ", ".join(oppaths.releases()[-5:])
            + " (or any of "
            + str(len(oppaths.releases()))
            + " known releases)",
        )
    compile_mode.soc()  # a bad $ASCEND_ENV_SOC fails here, before anything runs
    model = Model(data, sim.enabled_ops(), optables.by_hand(data.version))
    _MODEL.append(model)
    _push_mode(model)
    steps.listen(model)
    return model


def start_from_environment(environ: Optional[Mapping[str, str]] = None) -> bool:
    """:func:`start` if ``$ASCEND_ENV_AUDIT_PATHS`` is ``1``; whether it started."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV) != "1":
        return False
    start()
    return True


def report() -> Optional[PathsReport]:
    """The per-process report (``None`` if the model never started)."""
    model = active()
    return model.report() if model is not None else None


def _push_mode(model: Model) -> None:
    from torch.utils._python_dispatch import TorchDispatchMode

    # TorchDispatchMode's __init_subclass__, __init__ and __enter__ have no annotations.
    class PathsMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Optional[dict[str, Any]] = None
        ) -> Any:
            kwargs = kwargs or {}
            try:
                model.observe(func, args, kwargs)
            except Exception as exc:  # the model must never break the script it watches
                if len(model.errors) < 5:
                    model.errors.append(f"{func}: {type(exc).__name__}: {exc}")
            return func(*args, **kwargs)

    PathsMode().__enter__()  # type: ignore[no-untyped-call]
