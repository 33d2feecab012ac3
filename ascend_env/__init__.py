"""Run Hugging Face transformers generation fully on Huawei Ascend NPUs."""

__all__ = ["__version__"]

__version__ = "0.1.0"
