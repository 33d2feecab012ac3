"""The startup hook: its files in site-packages, the boot module, the watcher and the runtime.

Kept free of imports: the installed hook (``ascend_env_hook``) imports this package, through
:mod:`ascend_env._watch`, in every Python process that looks for torch_npu.
"""

__all__: "list[str]" = []
