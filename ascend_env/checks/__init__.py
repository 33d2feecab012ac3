"""The checks: ``verify`` (with its child process, :mod:`.smoke`) and ``audit``."""
