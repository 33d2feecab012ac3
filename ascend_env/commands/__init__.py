"""Thin command-line front ends, one module per subcommand, and the options they share."""

from __future__ import annotations

import argparse

__all__ = ["add_patches_dir", "add_target"]


def add_target(parser: argparse.ArgumentParser) -> None:
    """``--target DIR``: the site-packages directory to work on."""
    parser.add_argument(
        "--target", metavar="DIR", help="the site-packages directory (default: transformers')"
    )


def add_patches_dir(parser: argparse.ArgumentParser) -> None:
    """``--patches-dir DIR``: another patches directory (tests and tools use it)."""
    parser.add_argument(
        "--patches-dir",
        metavar="DIR",
        help="a patches directory with manifest.json (default: the shipped one)",
    )
