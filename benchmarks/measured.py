"""Run a benchmark command and end its output with where its figures came from.

Figures pasted into README.md or BENCHMARKS.md go stale silently when the code
changes under them. Every figure there states the command that made it and
the commit it was measured at; this prints that statement, ready to paste,
after the command's own output::

    .venv/bin/python benchmarks/measured.py .venv/bin/python benchmarks/tracking.py all
    ...the benchmark's output...
    measured: `python benchmarks/tracking.py all` at commit 1a2b3c4, 2026-11-26, 2 CPUs, no GPU

A tree with uncommitted changes to tracked files says so (``1a2b3c4 + local
changes``): such figures belong to no commit until those changes are
committed. The exit status is the command's; a command that fails gets no
statement.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The checkout's commit, ``+ local changes`` when tracked files differ from it."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
        )

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "no git checkout"
    changed = git("diff", "--quiet", "HEAD").returncode != 0
    return head.stdout.strip() + (" + local changes" if changed else "")


def machine() -> str:
    """CPUs, and the NVIDIA GPUs ``nvidia-smi`` lists (without importing torch)."""
    cpus = f"{os.cpu_count()} CPUs"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return f"{cpus}, no GPU"
    listed = subprocess.run(
        [smi, "--query-gpu=name", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    names = [line.strip() for line in listed.stdout.splitlines() if line.strip()]
    return f"{cpus}, {', '.join(names) or 'no GPU'}"


def shown(command: list[str]) -> str:
    """The command as a reader would type it: the interpreter as ``python``, paths from the
    repository root."""
    words = ["python" if Path(w).name.startswith("python") else w for w in command]
    root = f"{ROOT}{os.sep}"
    return " ".join(w.removeprefix(root) for w in words)


def statement(command: list[str]) -> str:
    today = datetime.date.today().isoformat()
    return f"measured: `{shown(command)}` at commit {commit()}, {today}, {machine()}"


def main() -> int:
    command = sys.argv[1:]
    usage = f"usage: {Path(sys.argv[0]).name} COMMAND [ARGS...]"
    if command in (["-h"], ["--help"]):
        summary = __doc__.split("\n\n")[0]
        print(f"{usage}\n\n{summary}")
        return 0
    if not command:
        print(usage, file=sys.stderr)
        return 2
    try:
        status = subprocess.run(command, check=False).returncode
    except OSError as exc:
        print(f"measured: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if status == 0:  # a failed run measured nothing
        print(statement(command), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
