"""The startup hook: its files in site-packages, the boot module, the watcher and the runtime.

Kept free of imports: the installed hook imports this package in every Python process.
"""
