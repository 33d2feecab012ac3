"""The kernels that replace CPU fallbacks (:mod:`.isin`) and the registry of fixes (:mod:`.registry`)."""

__all__: "list[str]" = []
