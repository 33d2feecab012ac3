"""The checks: ``verify`` (with its child process, :mod:`.smoke`) and ``audit``."""

__all__: "list[str]" = []
