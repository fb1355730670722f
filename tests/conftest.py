"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_video


@pytest.fixture
def small_video(tmp_path: Path) -> Path:
    """A 30-frame 320x240 H.264 MP4 made for the test."""
    return write_video(tmp_path / "small.mp4")
