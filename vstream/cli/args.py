"""Argument types and the parser class shared by every command."""

from __future__ import annotations

import argparse
from typing import NoReturn

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


def class_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"class ids must be integers, got {text!r}") from None
    if any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"class ids must be non-negative, got {text!r}")
    return ids


def non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def add_thread_options(parser: argparse.ArgumentParser) -> None:
    """How the model and the decoders share the CPU: ONNX Runtime's and FFmpeg's threads."""
    group = parser.add_argument_group("threads")
    group.add_argument(
        "--threads",
        type=non_negative,
        default=0,
        help="ONNX Runtime intra-op threads (default 0: one per core)",
    )
    group.add_argument(
        "--decoder-threads",
        type=non_negative,
        default=0,
        help="cpu decoder threads per stream (default 0: FFmpeg's choice, about one per core)",
    )
    group.add_argument(
        "--spin-wait",
        action="store_true",
        help="let ONNX Runtime's threads spin between operators: faster for the model alone, "
        "slower when decoding shares its cores",
    )
