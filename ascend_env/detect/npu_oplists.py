"""torch_npu's op lists: which aten ops a release runs natively on the NPU.

Each torch_npu wheel ships ``torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml`` and
``npu_native_functions.yaml``. The entries of their ``supported:`` lists are the ops that have an NPU
kernel under ``PrivateUse1``; any other aten op reaches the CPU fallback. An entry is a bare string
(``abs.out``) or a mapping whose ``func`` holds the name and schema
(``isin.Tensor_Scalar(Tensor element, ...) -> Tensor``).

Op names here are ``name.overload`` as in ``aten::name.overload``, or ``name`` for the default
overload.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, FrozenSet, Iterable, Tuple

import yaml

from ascend_env.exceptions import EnvironmentProblem, reinstall

__all__ = ["ISIN_OVERLOADS", "YAML_DIR", "YAML_FILES", "entry_name", "parse_supported", "read_torch_npu"]

YAML_DIR = Path("csrc", "aten")
YAML_FILES: Tuple[str, ...] = ("npu_native_functions_by_codegen.yaml", "npu_native_functions.yaml")

ISIN_OVERLOADS: Tuple[str, ...] = (
    "isin.Tensor_Tensor",
    "isin.Tensor_Tensor_out",
    "isin.Tensor_Scalar",
    "isin.Tensor_Scalar_out",
    "isin.Scalar_Tensor",
    "isin.Scalar_Tensor_out",
)

_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?")

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def entry_name(entry: Any) -> str:
    """The op name of one ``supported:`` entry, or ``""`` when the entry names no op."""
    if isinstance(entry, dict):
        entry = entry.get("func")
    if not isinstance(entry, str):
        return ""
    name = entry.split("(", 1)[0].strip()
    return name if _OP_NAME.fullmatch(name) else ""


def parse_supported(text: str, source: str = "<yaml>") -> FrozenSet[str]:
    """The op names in the ``supported:`` list of one torch_npu YAML document."""
    try:
        document = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise EnvironmentProblem(
            f"{source} is not valid YAML ({str(exc).splitlines()[0]}).",
            f"reinstall torch_npu: {reinstall('torch_npu', '<its version>')}",
        ) from None
    if document is None:
        return frozenset()
    if not isinstance(document, dict):
        raise EnvironmentProblem(
            f"{source} is not a torch_npu op list (its top level is not a mapping).",
            f"reinstall torch_npu: {reinstall('torch_npu', '<its version>')}",
        )
    entries = document.get("supported") or []
    if not isinstance(entries, list):
        raise EnvironmentProblem(
            f"{source}: 'supported:' is not a list.",
            f"reinstall torch_npu: {reinstall('torch_npu', '<its version>')}",
        )
    return frozenset(name for name in map(entry_name, entries) if name)


def _read_files(paths: Iterable[Path]) -> FrozenSet[str]:
    """The union of the ``supported:`` lists of the given YAML files (missing files are skipped)."""
    ops: set[str] = set()
    found = False
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot read {path}: {exc.strerror}.", "check the file's permissions"
            ) from None
        found = True
        ops |= parse_supported(text, str(path))
    if not found:
        names = " and ".join(str(p) for p in paths)
        raise EnvironmentProblem(
            f"torch_npu's op lists are missing ({names}).",
            f"reinstall torch_npu: {reinstall('torch_npu', '<its version>')}",
        )
    return frozenset(ops)


def _yaml_paths(package_dir: Path) -> Tuple[Path, ...]:
    """Where a torch_npu package directory keeps its op lists."""
    return tuple(package_dir / YAML_DIR / name for name in YAML_FILES)


def read_torch_npu(package_dir: Path) -> FrozenSet[str]:
    """The ops with a native NPU kernel in the torch_npu package at ``package_dir``."""
    return _read_files(_yaml_paths(package_dir))
