"""Tests of ascend_env.commands, one file per command module."""
