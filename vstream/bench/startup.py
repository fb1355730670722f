"""Start-up: how long ``vstream --help``, ``schema`` and ``validate`` take, against importing torch.

Each command runs as a fresh process, as a user types it, a few times; the
median counts. The yardstick is ``python -c "import torch"`` on the same
machine in the same sitting, so the figure is a ratio that holds on any
machine: commands that load no model should cost a fraction of it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from vstream.errors import VstreamError

REPEATS = 3
TIMEOUT_SECONDS = 120


def _seconds(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise VstreamError(f"{' '.join(command[1:4])} failed: {lines[-1]}")
    return seconds


def validate_config(folder: Path, model: Path, video: Path) -> Path:
    """The pipelines file ``vstream validate`` is timed on, written in ``folder``: by the
    YAML library, so that a path holding ``#``, ``,`` or braces is read back as given."""
    config = folder / "pipelines.yaml"
    pipeline = {
        "name": "bench",
        "model": {"path": str(model)},
        "sources": [{"id": "video", "uri": str(video)}],
        "sinks": [{"type": "jsonl", "path": str(folder / "out.jsonl")}],
    }
    config.write_text(yaml.safe_dump({"pipelines": [pipeline]}, sort_keys=False))
    return config


def startup_times(model: Path, video: Path, repeats: int = REPEATS) -> dict[str, Any]:
    """Median seconds of each command and of ``import torch``, and their ratios."""
    python = sys.executable
    model, video = model.resolve(), video.resolve()  # the config file's folder is elsewhere
    with tempfile.TemporaryDirectory(prefix="vstream-bench-") as tmp:
        config = validate_config(Path(tmp), model, video)
        commands = {
            "import torch": [python, "-c", "import torch"],
            "vstream --help": [python, "-m", "vstream", "--help"],
            "vstream schema": [python, "-m", "vstream", "schema"],
            "vstream validate": [python, "-m", "vstream", "validate", str(config)],
        }
        medians = {
            name: statistics.median(_seconds(command) for _ in range(repeats))
            for name, command in commands.items()
        }
    torch_seconds = medians["import torch"]
    return {
        "repeats": repeats,
        "seconds": {name: round(s, 3) for name, s in medians.items()},
        "over_import_torch": {
            name: round(s / torch_seconds, 3)
            for name, s in medians.items()
            if name != "import torch" and torch_seconds > 0
        },
    }
