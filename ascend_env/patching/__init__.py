"""Patching: the transaction engine (install, restore, status) and what it reads and writes."""
