"""Plan ``restore``: every recorded original put back, the startup hook's files removed, RECORD
given the restored hashes; refused as a whole where a file was changed by someone else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Literal, Optional, Set

from ascend_env.detect import hook_site
from ascend_env.exceptions import EnvironmentProblem, reinstall
from ascend_env.patching.plan import Plan, sha256_or_none
from ascend_env.patching.records import find_distribution, is_record, remove_rows, rewrite_record, sha256_hex
from ascend_env.patching.state import Entry, read_state
from ascend_env.patching.store import read_blob, read_file

__all__ = ["RestoreAction", "RestoreReport", "RestoreResult", "RestoredFile", "plan_restore"]

RestoreResult = Literal["restored", "would restore", "nothing to restore"]
RestoreAction = Literal[
    "original",
    "restore",
    "rewritten",
    "removed (edited since install)",
    "skipped",
    "skipped: belongs to a transformers release that was replaced",
    "left alone: replaced by another installer since install",
    "left alone: removed by another installer since install",
    "removed (left without a record: the startup hook's)",
    "rewritten (rows of the startup hook's files taken out)",
    "conflict",
]

# How each of the hook's files begins, whatever ascend-env release wrote it: restore removes such a
# file where no state records it (the recovery that restore advises deletes .ascend-env).
_HOOK_STARTS = {
    hook_site.MODULE_FILE: b'"""The startup hook: wait, cheaply, for torch_npu',
    hook_site.PTH_FILE: b"# ascend-env startup hook",
    hook_site.START_FILE: b"# ascend-env startup hook",
}


@dataclass(frozen=True)
class RestoredFile:
    """What restore does with one recorded file."""

    path: str
    kind: str
    action: RestoreAction

    def to_dict(self) -> Dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "action": self.action}


@dataclass
class RestoreReport:
    """What ``restore`` did or would do; :meth:`to_dict` is its ``--json`` form."""

    site_packages: str
    files: List[RestoredFile] = field(default_factory=list)
    result: RestoreResult = "restored"
    dry_run: bool = False
    recovered: Optional[str] = None

    def to_dict(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {
            "site_packages": self.site_packages,
            "files": [f.to_dict() for f in self.files],
            "result": self.result,
        }
        if self.dry_run:
            data["dry_run"] = True
        if self.recovered:
            data["recovered"] = self.recovered
        return data


class _RestorePlanner:
    """Builds a restore plan, one recorded file at a time."""

    def __init__(self, plan: Plan[RestoreReport], same_release: bool, extras: Set[str]) -> None:
        self.plan = plan
        self.same_release = same_release  # the recorded transformers release is still installed
        self.extras = extras  # the paths of the extra files install wrote (the hook's)
        self.originals: Dict[str, bytes] = {}  # the patched files' restored bytes, for RECORD
        self.conflicts: List[str] = []

    def file(self, entry: Entry, current: Optional[bytes]) -> None:
        action = self._file_action(entry, current)
        self.plan.report.files.append(RestoredFile(entry.path, entry.kind, action))

    def record(self, entry: Entry, current: Optional[bytes]) -> None:
        action = self._record_action(entry, current)
        self.plan.report.files.append(RestoredFile(entry.path, entry.kind, action))

    def _file_action(self, entry: Entry, current: Optional[bytes]) -> RestoreAction:
        digest = sha256_or_none(current)
        if entry.kind == "extra" and entry.before is None and is_record(entry.path):
            return self._unrecorded_record(entry, current)
        if digest == entry.before:
            return "original"
        if digest == entry.after:
            self._put_back(entry, current)
            return "restore"
        if entry.kind == "patch" and not self.same_release:
            return "skipped: belongs to a transformers release that was replaced"
        if entry.kind == "extra" and entry.before is None:
            # A file install created (a hook file) that was edited since: it is ascend-env's own
            # name, so restore removes it all the same, edits included.
            self.plan.write(entry.path, current, None)
            return "removed (edited since install)"
        if entry.kind == "extra" and current is None:
            # A file install amended (ascend-env's own RECORD) that another installer has removed
            # since (pip uninstall ascend-env): there is nothing to put back.
            return "left alone: removed by another installer since install"
        if entry.kind == "extra":
            # A file install amended (ascend-env's own RECORD) that another installer has
            # replaced since (pip install of another ascend-env build): it is theirs now.
            return "left alone: replaced by another installer since install"
        self.conflicts.append(entry.path)
        return "conflict"

    def _unrecorded_record(self, entry: Entry, current: Optional[bytes]) -> RestoreAction:
        """A RECORD that an older ascend-env recorded with no original (it adopted one that a lost
        state had amended): never removed, only the rows of the extra files taken out."""
        if current is None:
            return "left alone: removed by another installer since install"
        original = remove_rows(current, self.extras - {entry.path})
        if original == current:
            return "original"
        self.plan.write(entry.path, current, original)
        return "rewritten"

    def _put_back(self, entry: Entry, current: Optional[bytes]) -> None:
        original = None if entry.before is None else read_blob(self.plan.site_packages, entry.before)
        self.plan.write(entry.path, current, original)
        if original is not None and entry.kind == "patch":
            self.originals[entry.path] = original

    def _record_action(self, entry: Entry, current: Optional[bytes]) -> RestoreAction:
        if current is None or not self.same_release:
            return "skipped"
        digest = sha256_hex(current)
        if digest == entry.before:
            return "original"
        if digest == entry.after and entry.before is not None:
            self.plan.write(entry.path, current, read_blob(self.plan.site_packages, entry.before))
            return "restore"
        # pip rewrote RECORD (e.g. a reinstall): give the restored files their hashes there.
        try:
            desired = rewrite_record(current, self.originals)
        except EnvironmentProblem:
            return "original"
        if desired == current:
            return "original"
        self.plan.write(entry.path, current, desired)
        return "rewritten"

    def refuse_conflicts(self, version: str) -> None:
        if not self.conflicts:
            return
        raise EnvironmentProblem(
            f"{', '.join(self.conflicts)} changed since install (neither the original nor the patched "
            "bytes); restore would overwrite them, so nothing was changed.",
            f"reinstall transformers ({reinstall('transformers', version)}), then run restore again.",
        )


def plan_restore(site_packages: Path) -> Plan[RestoreReport]:
    """The writes that put back every recorded original; raises on files changed by others."""
    plan = Plan(site_packages, RestoreReport(str(site_packages)))
    state = read_state(site_packages)
    if state is None:
        if not _unrecorded_hook(plan):
            plan.report.result = "nothing to restore"
        return plan
    dist = find_distribution(site_packages, state.distribution)
    extras = {entry.path for entry in state.entries if entry.kind == "extra"}
    planner = _RestorePlanner(plan, dist is not None and dist.version == state.version, extras)
    records = []
    for entry in state.entries:
        current = read_file(site_packages / entry.path)
        if entry.kind == "record":
            records.append((entry, current))  # after the files: it takes their restored hashes
        else:
            planner.file(entry, current)
    planner.refuse_conflicts(state.version)
    for entry, current in records:
        planner.record(entry, current)
    return plan


def _unrecorded_hook(plan: Plan[RestoreReport]) -> bool:
    """Plan the removal of the startup hook's files that no state records (``.ascend-env``
    deleted, as the advised recovery does) but that are recognisably ascend-env's, their bytecode,
    and their rows in ascend-env's own RECORD (never the RECORD itself). Whether there are any."""
    site_packages = plan.site_packages
    found = []
    for name, start in sorted(_HOOK_STARTS.items()):
        current = read_file(site_packages / name)
        if current is not None and current.startswith(start):
            found.append(name)
            plan.write(name, current, None)
            plan.report.files.append(
                RestoredFile(name, "extra", "removed (left without a record: the startup hook's)")
            )
    if hook_site.MODULE_FILE in found:
        try:
            cached = sorted((site_packages / "__pycache__").glob(f"{hook_site.NAME}.*.pyc"))
        except OSError:
            cached = []
        for path in cached:
            current = read_file(path)
            if current is not None:
                name = f"__pycache__/{path.name}"
                found.append(name)
                plan.write(name, current, None)
                plan.report.files.append(
                    RestoredFile(name, "extra", "removed (left without a record: the startup hook's)")
                )
    own = find_distribution(site_packages, "ascend-env") if found else None
    record = read_file(site_packages / own.record_path) if own is not None else None
    if own is not None and record is not None:
        try:
            kept = remove_rows(record, [*found, *hook_site.FILES])
        except ValueError:  # not UTF-8: left as it is (pip reads it, or says why)
            kept = record
        if kept != record:
            plan.write(own.record_path, record, kept)
            plan.report.files.append(
                RestoredFile(
                    own.record_path, "extra", "rewritten (rows of the startup hook's files taken out)"
                )
            )
    return bool(found)
