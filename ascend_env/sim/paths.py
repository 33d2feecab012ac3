"""torch_npu's two dispatch paths, modelled on the simulated NPU: would-be online compiles, the
64-bit slow-path warnings and host syncs, per decoding step of ``generate()``.

:func:`start` pushes a ``TorchDispatchMode`` that sees every aten op the process runs. For each op
on ``npu`` tensors it decides the path op-plugin's generated wrapper would take
(``op_plugin/OpInterface.cpp``: ``op_api::`` when ``CheckJitDisable()`` holds, else ``acl_op::``;
an op with only an ``acl_op`` implementation always takes it), from the release's op-path data
(:mod:`ascend_env.oppaths`) and :mod:`ascend_env.sim.compile_mode` as it stands at that moment, so
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

Steps: the decoding loops call ``StoppingCriteriaList.__call__`` once per iteration
(``unfinished_sequences & ~stopping_criteria(input_ids, scores)`` in transformers 4.46.3's
``_sample``, ``generation/utils.py``; the same line ends the loop of ``_greedy_search`` / ``_sample``
in the 4.40 releases), so each return from it inside ``GenerationMixin.generate`` closes one step.
Step 0 holds ``generate()``'s set-up and the prompt's forward pass; what runs after the last step
(the loop's final check) is reported apart. Importing this module imports no torch.
"""

from __future__ import annotations

import collections
import functools
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from ascend_env.hook import compile_guard
from ascend_env.sim import compile_mode, oppaths
from ascend_env.utils import importhooks

__all__ = [
    "ENV", "STEADY_FROM", "Bucket", "Model", "active", "report", "start", "start_from_environment",
    "warnings_silenced",
]

ENV = "ASCEND_ENV_AUDIT_PATHS"
# Steps 0 (the prompt) and 1 (the first token read from the KV cache) see shapes no later step sees;
# from step 2 on every step is alike, so the steady state is reported from here.
STEADY_FROM = 2

# Ops that read device memory on the host (the stream must drain first).
SYNC_OPS = frozenset({"_local_scalar_dense", "is_nonzero", "item", "equal"})
# Ops whose output shape depends on the data: the host waits for the result to size it.
DATA_DEPENDENT = frozenset({
    "nonzero", "nonzero_numpy", "masked_select", "_unique", "_unique2", "unique_dim",
    "unique_consecutive", "unique_dim_consecutive", "bincount", "repeat_interleave.Tensor",
})
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
    "NeKernelNpu.cpp": frozenset({"ne.Tensor", "ne_.Tensor", "ne.Tensor_out", "ne.Scalar", "ne_.Scalar",
                                  "ne.Scalar_out"}),
    "GatherKernelNpu.cpp": frozenset({"gather", "gather.out"}),
    "IndexSelectKernelNpu.cpp": frozenset({"index_select", "index_select.out"}),
}
DEVICE = "npu"
# The kernels the simulator registers whatever the table (kInfrastructure in sim/csrc/sim_backend.cpp).
INFRASTRUCTURE = frozenset({
    "empty.memory_format", "empty_strided", "_copy_from", "_copy_from_and_resize", "resize_", "as_strided",
    "set_.source_Storage_storage_offset", "view", "_reshape_alias",
})


def warnings_silenced(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether torch_npu's warnings are off: the rule of the simulator's CAUTION line
    (``warnings_silenced()`` in ``sim/csrc/sim_backend.cpp``), read at each warning as it is."""
    environ = os.environ if environ is None else environ
    rank = environ.get("RANK")
    if rank and rank != "0":
        return True
    if environ.get("TORCH_NPU_DISABLED_WARNING") == "1" or environ.get("TORCH_NPU_WARNING_DISABLE") == "1":
        return True
    level = environ.get("TORCH_CPP_LOG_LEVEL")
    return level is not None and level.upper() in ("ERROR", "FATAL", "2", "3")


class Bucket:
    """What ran in one step (or outside generate): counts by op, path and call site."""

    def __init__(self) -> None:
        self.paths: collections.Counter[str] = collections.Counter()
        self.compiles: collections.Counter[str] = collections.Counter()
        self.compile_sites: collections.Counter[str] = collections.Counter()
        self.syncs: collections.Counter[str] = collections.Counter()
        self.sync_sites: collections.Counter[str] = collections.Counter()
        self.warnings: collections.Counter[str] = collections.Counter()

    def to_json(self) -> dict[str, Any]:
        return {
            "would_compile": sum(self.compiles.values()), "host_syncs": sum(self.syncs.values()),
            "warnings_64bit": sum(self.warnings.values()), "paths": dict(sorted(self.paths.items())),
            "would_compile_by_op": _sorted(self.compiles),
            "would_compile_by_site": _sorted(self.compile_sites),
            "host_syncs_by_op": _sorted(self.syncs), "host_syncs_by_site": _sorted(self.sync_sites),
            "warnings_64bit_by_site": _sorted(self.warnings),
        }


def _sorted(counter: collections.Counter[str]) -> Dict[str, int]:
    return dict(sorted(counter.items(), key=lambda item: (-item[1], item[0])))


class Model:
    """The process's model: the op-path data, the compile cache, the steps."""

    def __init__(self, data: oppaths.OpPaths, table_ops: frozenset[str]) -> None:
        self.data = data
        self.table_ops = table_ops
        self.seen: set[tuple[Any, ...]] = set()
        self.names: Dict[Any, str] = {}
        self.outside = Bucket()
        self.totals = Bucket()
        self.runs: List[dict[str, Any]] = []
        self.depth = 0
        self.current: Optional[Bucket] = None
        self.warned: Dict[Tuple[str, int], dict[str, Any]] = {}
        self.errors: List[str] = []
        self.roots = tuple(_package_root(name) for name in ("torch", "ascend_env"))

    # --- steps -------------------------------------------------------------------------------
    def enter_generate(self, site: str = "<unknown>") -> None:
        self.depth += 1
        if self.depth == 1:
            self.runs.append({"steps": [], "site": site, "mode": None})
            self.current = Bucket()

    def generation_mode(self, mode: str) -> None:
        """The decoding mode transformers chose for the ``generate()`` call running now."""
        if self.depth >= 1 and self.runs and self.runs[-1].get("mode") is None:
            self.runs[-1]["mode"] = mode

    def step_done(self) -> None:
        if self.depth >= 1 and self.current is not None:
            self.runs[-1]["steps"].append(self.current)
            self.current = Bucket()

    def exit_generate(self) -> None:
        self.depth -= 1
        if self.depth == 0 and self.current is not None:
            self.runs[-1]["after"] = self.current
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
        ``torch_npu`` (not an op-plugin op: views, copies, allocation, composites)."""
        if name not in self.table_ops and name not in INFRASTRUCTURE:
            return "torch_npu" if _composite(name) else "fallback"
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
        if path != "acl_op":
            return
        if compile_mode.jit_compile():
            key = (name, _signature(args), _signature(tuple(sorted(kwargs.items()))))
            if key not in self.seen:
                self.seen.add(key)
                site = self.site()
                for bucket in buckets:
                    bucket.compiles[name] += 1
                    bucket.compile_sites[site] += 1
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
        self.warned[key] = {"file": warning.file, "line": warning.line, "op": name, "text": warning.text,
                            "site": self.site(), "count": 1, "printed": printed}
        if printed:
            _write_fd2(f"[W {warning.file}:{warning.line}] Warning: {warning.text} (function operator())\n")

    def site(self) -> str:
        """The first Python frame outside torch and ascend-env: ``file:line``."""
        frame = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not filename.startswith(self.roots) and not filename.startswith("<"):
                return f"{_short(filename)}:{frame.f_lineno}"
            frame = frame.f_back  # type: ignore[assignment]
        return "<unknown>"

    # --- report ------------------------------------------------------------------------------
    def report(self) -> dict[str, Any]:
        runs = []
        for run in self.runs:
            steps = [bucket.to_json() for bucket in run["steps"]]
            runs.append({"steps": steps, "after": run.get("after", Bucket()).to_json(),
                         "steady": steady_state(steps), "site": run.get("site"), "mode": run.get("mode")})
        return {
            "soc": compile_mode.soc(), "soc_assumed": compile_mode.soc_assumed(),
            "jit_compile": compile_mode.jit_compile(), "jit_compile_set": compile_mode.jit_compile_set(),
            "op_paths": self.data.version, "op_paths_source": self.data.source, "steady_from": STEADY_FROM,
            "totals": self.totals.to_json(), "outside_generate": self.outside.to_json(), "generate": runs,
            "warnings_64bit": sorted(self.warned.values(), key=lambda w: (w["file"], w["line"])),
            "errors": self.errors[:5], "compile_guard": _guard_record(),
        }


def steady_state(steps: List[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """Per-step minimum and maximum of each count over the steps from :data:`STEADY_FROM` on."""
    tail = steps[STEADY_FROM:]
    if not tail:
        return None
    found: Dict[str, Any] = {"steps": len(tail), "first": STEADY_FROM}
    for key in ("would_compile", "host_syncs", "warnings_64bit"):
        values = [step[key] for step in tail]
        found[key] = {"min": min(values), "max": max(values), "total": sum(values)}
    return found


def _guard_record() -> Dict[str, Any]:
    """What the startup hook's compile-mode guard did in this process, and why: its decision
    (``ascend_env.hook.compile_guard.Decision``), or why it never decided."""
    from ascend_env.hook import files

    if files.running() is None:
        return {"ran": False, "why": "the startup hook is not installed in this Python"}
    from ascend_env import runtime

    status = runtime.status()
    if status["disabled"]:
        return {"ran": False, "why": "the startup hook is switched off ($ASCEND_ENV_DISABLE)"}
    decision = status["compile_guard"]
    if decision is None:
        return {"ran": False, "why": "torch_npu was never imported, and the guard runs when it is"}
    return dict(decision, ran=True)


def _package_root(name: str) -> str:
    module = sys.modules.get(name)
    where = getattr(module, "__file__", None) or ""
    return os.path.dirname(where) + os.sep if where else "\0"


def _short(filename: str) -> str:
    marker = os.sep + "site-packages" + os.sep
    if marker in filename:
        return filename.split(marker, 1)[1]
    return filename


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
        return isinstance(dst, torch.Tensor) and dst.device.type == "cpu" and \
            isinstance(src, torch.Tensor) and src.device.type == DEVICE
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


def _signature(value: Any) -> Any:
    """A hashable stand-in for an argument: a tensor by shape and dtype, anything else by value."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(_signature(item) for item in value)
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    return repr(value)


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
            "audit with --torch-npu and one of " + ", ".join(oppaths.releases()[-5:]) + " (or any of "
            + str(len(oppaths.releases())) + " known releases)",
        )
    compile_mode.soc()  # a bad $ASCEND_ENV_SOC fails here, before anything runs
    model = Model(data, frozenset(sim._STATE.get("ops", frozenset())))  # type: ignore[call-overload]
    _MODEL.append(model)
    _push_mode(model)
    _hook_transformers(model)
    return model


def start_from_environment(environ: Optional[Mapping[str, str]] = None) -> bool:
    """:func:`start` if ``$ASCEND_ENV_AUDIT_PATHS`` is ``1``; whether it started."""
    environ = os.environ if environ is None else environ
    if environ.get(ENV) != "1":
        return False
    start()
    return True


def report() -> Optional[dict[str, Any]]:
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


# --------------------------------------------------------------------------- transformers hooks

def _hook_transformers(model: Model) -> None:
    """Wrap ``StoppingCriteriaList.__call__`` and ``GenerationMixin.generate`` now if transformers
    is imported, else as soon as their modules are."""
    targets = {
        "transformers.generation.stopping_criteria": functools.partial(_wrap_stopping, model),
        "transformers.generation.utils": functools.partial(_wrap_generate, model),
        "transformers.generation.configuration_utils": functools.partial(_wrap_mode, model),
    }
    pending = {}
    for name, wrap in targets.items():
        module = sys.modules.get(name)
        if module is not None:
            wrap(module)
        else:
            pending[name] = wrap
    if pending:
        importhooks.ImportWatcher({name: _ignoring_specs(wrap) for name, wrap in pending.items()}).install()


def _ignoring_specs(wrap: Callable[[Any], None]) -> importhooks.Callback:
    """An import watcher's callback that wraps the module, whatever the count of specs."""
    return lambda module, _specs: wrap(module)


def _wrap_stopping(model: Model, module: Any) -> None:
    cls = getattr(module, "StoppingCriteriaList", None)
    if cls is None or getattr(cls.__call__, "_ascend_env_paths", False):
        return
    original = cls.__call__

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            model.step_done()

    call._ascend_env_paths = True  # type: ignore[attr-defined]
    cls.__call__ = call


def _wrap_generate(model: Model, module: Any) -> None:
    cls = getattr(module, "GenerationMixin", None)
    if cls is None or getattr(cls.generate, "_ascend_env_paths", False):
        return
    original = cls.generate

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        model.enter_generate(model.site())
        try:
            return original(self, *args, **kwargs)
        finally:
            model.exit_generate()

    generate._ascend_env_paths = True  # type: ignore[attr-defined]
    cls.generate = generate


def _wrap_mode(model: Model, module: Any) -> None:
    """Record the decoding mode of each ``generate()`` call from ``GenerationConfig.get_generation_mode``
    (transformers >= 4.39: ``generate`` calls it once; older releases leave the mode unknown)."""
    cls = getattr(module, "GenerationConfig", None)
    if cls is None or not hasattr(cls, "get_generation_mode"):
        return
    if getattr(cls.get_generation_mode, "_ascend_env_paths", False):
        return
    original = cls.get_generation_mode

    @functools.wraps(original)
    def get_generation_mode(self: Any, *args: Any, **kwargs: Any) -> Any:
        mode = original(self, *args, **kwargs)
        model.generation_mode(str(getattr(mode, "value", mode)))
        return mode

    get_generation_mode._ascend_env_paths = True  # type: ignore[attr-defined]
    cls.get_generation_mode = get_generation_mode


# ----------------------------------------------------------------- the audit's side (no torch)

FAIL_ON = ("fallbacks", "compiles", "syncs", "64bit")
MACHINE_SOC_ENV = compile_guard.SOC_VARIABLE  # the machine's SoC, as the guard reads it


def parse_fail_on(text: Optional[str]) -> Tuple[str, ...]:
    """``--fail-on fallbacks,compiles,...``: the findings that fail the audit (default fallbacks)."""
    from ascend_env.exceptions import UsageError

    if text is None:
        return ("fallbacks",)
    chosen = tuple(part.strip().lower() for part in text.split(",") if part.strip())
    bad = [part for part in chosen if part not in FAIL_ON]
    if bad or not chosen:
        raise UsageError(
            f"--fail-on {text!r}: unknown finding{'s' if len(bad) != 1 else ''} {', '.join(map(repr, bad))}."
            if bad else "--fail-on needs at least one finding.",
            "use a comma-separated list of " + ", ".join(FAIL_ON) + " (e.g. --fail-on fallbacks,compiles)",
        )
    return chosen


def choose_soc(soc: Optional[str], environ: Optional[Mapping[str, str]] = None,
               npu_smi: Optional[Callable[[], str]] = None) -> Dict[str, Any]:
    """The SoC to simulate: ``--soc``, else the machine's (``$ASCEND_ENV_SOC``, else ``npu-smi
    info`` as ``detect`` and the compile-mode guard read it; ``npu_smi`` stands in for running it),
    else :data:`compile_mode.DEFAULT_SOC`, assumed. An unknown name raises UsageError listing the
    known."""
    from ascend_env.detect import socs

    environ = os.environ if environ is None else environ
    if soc:
        return {"name": socs.canonical(soc), "assumed": False, "from": "--soc"}
    machine = environ.get(MACHINE_SOC_ENV)
    if machine:
        return {"name": socs.canonical(machine), "assumed": False, "from": f"${MACHINE_SOC_ENV}"}
    found, source = compile_guard.machine_soc(environ, npu_smi)
    if found is not None:
        return {"name": found, "assumed": False, "from": source}
    return {"name": compile_mode.DEFAULT_SOC, "assumed": True, "from": "assumed"}


COUNTS = ("would_compile", "host_syncs", "warnings_64bit")
STEP_KEYS = COUNTS + ("would_compile_by_op", "host_syncs_by_site")


def summarize(reports: List[dict[str, Any]], soc: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """The paths findings of every process that modelled them, for the audit's report; ``soc`` is
    the audit's :func:`choose_soc` (the processes cannot tell an assumed SoC from a chosen one)."""
    totals: Dict[str, collections.Counter[str]] = {key: collections.Counter() for key in (
        "would_compile_by_op", "would_compile_by_site", "host_syncs_by_op", "host_syncs_by_site")}
    warnings: List[dict[str, Any]] = []
    runs: List[dict[str, Any]] = []
    processes = [r for r in reports if isinstance(r.get("paths"), dict)]
    for report in processes:
        data = report["paths"]
        for key, counter in totals.items():
            counter.update(data["totals"].get(key, {}))
        warnings += [dict(w, pid=report.get("pid")) for w in data.get("warnings_64bit", [])]
        for run in data.get("generate", []):
            steps = [dict({key: step[key] for key in STEP_KEYS}, step=index)
                     for index, step in enumerate(run["steps"])]
            runs.append({"pid": report.get("pid"), "site": run.get("site"), "mode": run.get("mode"),
                         "steps": steps, "steady": run["steady"],
                         "after_last_step": {key: run["after"][key] for key in COUNTS}})
    first = processes[0]["paths"] if processes else {}
    return {
        "soc": soc["name"] if soc else first.get("soc"),
        "soc_assumed": soc["assumed"] if soc else first.get("soc_assumed"),
        "jit_compile_at_exit": first.get("jit_compile"), "op_paths": first.get("op_paths"),
        "op_paths_source": first.get("op_paths_source"), "steady_from": STEADY_FROM,
        "processes": len(processes),
        "would_compile": sum(totals["would_compile_by_op"].values()),
        "host_syncs": sum(totals["host_syncs_by_op"].values()),
        **{key: _sorted(counter) for key, counter in totals.items()},
        "warnings_64bit": warnings, "generate": runs,
        "errors": [e for r in processes for e in r["paths"].get("errors", [])],
        "compile_guard": _guards(processes),
    }


def _guards(processes: List[dict[str, Any]]) -> List[dict[str, Any]]:
    """What the compile guard did, once per distinct decision, with the pids where it was taken."""
    found: Dict[str, dict[str, Any]] = {}
    for report in processes:
        guard = report["paths"].get("compile_guard")
        if not isinstance(guard, dict):
            continue
        key = repr(sorted((k, repr(v)) for k, v in guard.items()))
        found.setdefault(key, dict(guard, pids=[]))["pids"].append(report.get("pid"))
    return list(found.values())


def failing(summary: dict[str, Any], fail_on: Tuple[str, ...]) -> List[str]:
    """The chosen paths findings present: ``compiles`` / ``syncs`` count the steady state of each
    ``generate()`` (every op when none ran); ``64bit`` any 64-bit warning."""
    found = []
    for kind, key in (("compiles", "would_compile"), ("syncs", "host_syncs")):
        if kind not in fail_on:
            continue
        steady = [run["steady"] for run in summary["generate"] if run["steady"]]
        count = sum(s[key]["total"] for s in steady) if steady else summary[key]
        if count:
            found.append(kind)
    if "64bit" in fail_on and summary["warnings_64bit"]:
        found.append("64bit")
    return found


def _steady_count(summary: dict[str, Any], key: str) -> int:
    steady = [run["steady"] for run in summary["generate"] if run["steady"]]
    return sum(s[key]["total"] for s in steady) if steady else int(summary[key])


def failing_text(summary: dict[str, Any], failing: List[str]) -> str:
    """The failing paths findings in words, for the verdict line."""
    words = []
    where = "in the steady state of generate()" if any(r["steady"] for r in summary["generate"]) else "in all"
    if "compiles" in failing:
        words.append(f"{_steady_count(summary, 'would_compile')} would-be online compiles {where} "
                     f"on {summary['soc']} (--fail-on compiles)")
    if "syncs" in failing:
        words.append(f"{_steady_count(summary, 'host_syncs')} host syncs {where} (--fail-on syncs)")
    if "64bit" in failing:
        words.append(f"{len(summary['warnings_64bit'])} 64-bit slow-path warnings (--fail-on 64bit)")
    return "; ".join(words)


def guard_text(guard: Mapping[str, Any]) -> str:
    """Why the compile guard did or did not act, from one of :func:`summarize`'s ``compile_guard``."""
    if not guard.get("ran"):
        return f"did not run: {guard.get('why')}"
    if guard.get("applied"):
        return f"acted: JIT compile turned off ({guard.get('reason')})"
    if guard.get("error"):
        return f"failed: {guard['error']}"
    reason = str(guard.get("reason") or "")
    if reason.startswith("no binary kernels"):
        return (f"did not act: this machine has {reason} (the guard reads this machine's CANN, not the "
                "simulated SoC's)")
    return f"did not act: {reason}"


def fix_line(summary: dict[str, Any], failing: List[str]) -> str:
    """What to do about the failing paths findings (as verify's compile-mode check says it)."""
    if "compiles" in failing or "64bit" in failing:
        guards = summary.get("compile_guard") or []
        guard = guards[0] if guards else {"ran": False, "why": "no process reported it"}
        soc = str(summary.get("soc") or "")
        family = socs_family(soc)
        reason = str(guard.get("reason") or "")
        if guard.get("applied"):
            return ("the guard turned JIT compile off and the code turned it back on: drop that "
                    "torch_npu.npu.set_compile_mode(jit_compile=True) call")
        if not guard.get("ran") and "not installed" in str(guard.get("why")):
            return ("run: python -m ascend_env install (its startup hook turns JIT compile off where the "
                    "binary kernels are installed)")
        if not guard.get("ran") and "never imported" in str(guard.get("why")):
            return "import torch_npu in the script (the startup hook's guard runs when torch_npu is imported)"
        if reason.startswith("no binary kernels"):
            return (f"on the {soc} machine, install the binary kernels (Ascend-cann-kernels-{family}): the "
                    "startup hook then turns JIT compile off; to model that here, point ASCEND_TOOLKIT_HOME "
                    "at a toolkit that has them")
        if reason.startswith("turned off"):
            return ("run python -m ascend_env install without --no-compile-guard, with "
                    "ASCEND_ENV_COMPILE_GUARD unset")
        return ("call torch_npu.npu.set_compile_mode(jit_compile=False) where the binary kernels are "
                "installed, or let the startup hook do it (python -m ascend_env install)")
    return ("read the host syncs by call site above: move each device-to-host read (item(), .cpu(), "
            "if tensor:) out of the decoding loop")


def socs_family(soc: str) -> str:
    """The binary-kernel package's family of ``soc`` (``910a``), or ``<soc>`` when unknown."""
    from ascend_env.detect import socs

    return socs.family(soc).lower() if soc and socs.lookup(soc) else "<soc>"


def format_text(summary: dict[str, Any], limit: int = 8) -> List[str]:
    """The report's lines about the dispatch paths."""
    soc = summary["soc"] or "?"
    assumed = f" (assumed: pass --soc, or set ${MACHINE_SOC_ENV})" if summary["soc_assumed"] else ""
    jit = "on" if summary["jit_compile_at_exit"] else "off"
    lines = [
        f"dispatch paths on SoC {soc}{assumed}, JIT compile {jit}"
        f" at exit; op paths of torch_npu {summary['op_paths']} from {summary['op_paths_source']}",
        f"  {summary['would_compile']} would compile (new acl_op keys with JIT on; a simulated count, not a "
        f"hardware measurement), {summary['host_syncs']} host syncs",
    ]
    for warning in summary["warnings_64bit"]:
        lines.append(f"  64-bit warning {warning['file']}:{warning['line']} ({warning['op']}, "
                     f"{warning['count']}x, first at {warning['site']})"
                     f"{'' if warning['printed'] else ' [silenced]'}")
    titles = collections.Counter((r["pid"], r.get("site"), r.get("mode")) for r in summary["generate"])
    seen: collections.Counter[Any] = collections.Counter()
    for run in summary["generate"]:
        same = (run["pid"], run.get("site"), run.get("mode"))
        seen[same] += 1
        lines += _format_run(run, f", call {seen[same]} of {titles[same]}" if titles[same] > 1 else "")
    tables = (("would compile by op", "would_compile_by_op"), ("host syncs by op", "host_syncs_by_op"),
              ("host syncs by call site", "host_syncs_by_site"),
              ("would compile by call site", "would_compile_by_site"))
    for title, key in tables:
        items = list(summary[key].items())
        if not items:
            continue
        lines.append(f"  {title}:")
        width = max(len(name) for name, _ in items[:limit])
        lines += [f"    {name.ljust(width)}  {count}" for name, count in items[:limit]]
        if len(items) > limit:
            lines.append(f"    ... {len(items) - limit} more (see --json)")
    for error in summary["errors"]:
        lines.append(f"  the model failed on an op: {error}")
    for guard in summary.get("compile_guard") or []:
        pids = guard.get("pids") or []
        where = "" if len(pids) <= 1 else f" (in {len(pids)} processes)"
        lines.append(f"  compile guard{where}: {guard_text(guard)}")
    if _steady_count(summary, "would_compile") or summary["warnings_64bit"]:
        lines.append(f"  fix: {fix_line(summary, ['compiles'])}")
    elif _steady_count(summary, "host_syncs"):
        lines.append(f"  fix: {fix_line(summary, ['syncs'])}")
    return lines


def _span(counts: dict[str, Any]) -> str:
    return str(counts["min"]) if counts["min"] == counts["max"] else f"{counts['min']}-{counts['max']}"


def _format_run(run: dict[str, Any], call: str = "") -> List[str]:
    steps = run["steps"]
    mode = run.get("mode") or "decoding mode unknown"
    lines = [f"  generate() at {run.get('site') or '<unknown>'} ({mode}, pid {run['pid']}{call}): "
             f"{len(steps)} steps (steady state from step {STEADY_FROM})",
             "    step     would compile  host syncs  64-bit"]
    index = 0
    while index < len(steps):
        row = (steps[index]["would_compile"], steps[index]["host_syncs"], steps[index]["warnings_64bit"])
        end = index
        while index >= STEADY_FROM and end + 1 < len(steps) and (
                steps[end + 1]["would_compile"], steps[end + 1]["host_syncs"],
                steps[end + 1]["warnings_64bit"]) == row:
            end += 1
        label = str(index) if end == index else f"{index}-{end}"
        each = "" if end == index else " each"
        lines.append(f"    {label.ljust(8)} {row[0]:>13}  {row[1]:>10}  {row[2]:>6}{each}")
        index = end + 1
    steady = run["steady"]
    if steady:
        compiles = steady["would_compile"]
        syncs = steady["host_syncs"]
        lines.append(f"    steady state (steps {STEADY_FROM}-{len(steps) - 1}): "
                     f"{_span(compiles)} would compile and {_span(syncs)} host syncs per step")
        last = steps[-1]
        if last["host_syncs_by_site"]:
            lines.append("    host syncs of step " + str(len(steps) - 1) + ": " + ", ".join(
                f"{site} ({count})" for site, count in last["host_syncs_by_site"].items()))
        if last["would_compile_by_op"]:
            lines.append("    would compile in step " + str(len(steps) - 1) + ": " + ", ".join(
                f"{op} ({count})" for op, count in last["would_compile_by_op"].items()))
    return lines
