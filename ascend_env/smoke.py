"""``python -m ascend_env.smoke``, kept at its first path: see :mod:`ascend_env.checks.smoke`."""

from __future__ import annotations

__all__: list[str] = []

if __name__ == "__main__":
    import sys

    from ascend_env.checks.smoke import main

    sys.exit(main())
