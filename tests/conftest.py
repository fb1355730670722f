"""Shared fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import write_video


@pytest.fixture
def small_video(tmp_path: Path) -> Path:
    """A 30-frame 320x240 H.264 MP4 made for the test."""
    return write_video(tmp_path / "small.mp4")


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    """Undo ``setup_logging`` after each test that ran the CLI.

    The CLI binds its handler to the ``sys.stderr`` of the moment, which is
    pytest's capture file; once that file closes, later tests' background
    threads would log into it and print "Logging error" tracebacks.
    """
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def pytest_unconfigure(config: pytest.Config) -> None:
    """After GPU tests, keep the interpreter's last collections off what is left, as the
    command line does (:func:`vstream.cli.spare_the_last_collection`: ``pytest -m gpu``
    ended in a segmentation fault at exit on the GPU machines); without CUDA, nothing."""
    from vstream.cli import spare_the_last_collection

    spare_the_last_collection()
