"""Run Hugging Face transformers generation fully on Huawei Ascend NPUs."""

__version__ = "0.1.0"
