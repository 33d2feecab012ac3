"""Small helpers with no knowledge of ascend-env's concerns."""

__all__: "list[str]" = []
