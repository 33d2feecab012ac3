"""The startup hook's file names in a site-packages directory, and which of them it holds.

:mod:`ascend_env.hook.files` writes the files (their bytes, from :mod:`ascend_env.hook.boot`);
``detect`` only looks for them, so their names live here, below both. Standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

__all__ = ["FILES", "MODULE_FILE", "NAME", "PTH_FILE", "START_FILE", "installed"]

NAME = "ascend_env_hook"
MODULE_FILE = NAME + ".py"
PTH_FILE = NAME + ".pth"
START_FILE = NAME + ".start"
#: Every file of the hook, as ``install`` writes them (the module's bytecode aside).
FILES = (MODULE_FILE, PTH_FILE, START_FILE)


def installed(site_packages: Path) -> List[str]:
    """The hook's files present in ``site_packages``."""
    return sorted(name for name in FILES if (site_packages / name).is_file())
