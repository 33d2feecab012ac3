"""Tests of ascend_env.patching, one file per module (``test_<module>[_<aspect>].py``)."""
