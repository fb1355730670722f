"""Argument types and the parser class shared by every command."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from vstream import assets

EXIT_OK, EXIT_UNEXPECTED, EXIT_BAD_INPUT = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"vstream: error: {message} (see {self.prog} --help)\n")


def fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def input_file(text: str) -> Path:
    """A file to read: a path, or ``vstream://NAME``, a bundled one."""
    if not assets.is_bundled(text):
        return Path(text)
    try:
        return assets.bundled(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
