"""What a check comes to and what ``vstream doctor`` prints: the table or the JSON, and the exit.

A check ends one of three ways, and only these: it returns its line and its
numbers (``pass``), raises :class:`Failed` (it ran and found a problem) or
raises :class:`Skipped` (it could not gather its evidence here). Keeping the
outcome apart from the checks lets every area module raise the same two
exceptions and lets one :class:`Report` decide the exit status.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from vstream import __version__

PASS, FAIL, SKIP = "pass", "fail", "skip"


class Skipped(Exception):
    """The check cannot run here; the message says why."""


class Failed(Exception):
    """The check ran and found a problem; the message says which."""


@dataclass
class Check:
    """One check's outcome: ``pass``, ``fail`` or ``skip``, with one line and its numbers."""

    name: str
    title: str
    status: str = SKIP
    detail: str = ""
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    """The environment and every check."""

    environment: dict[str, Any]
    checks: list[Check]

    def counts(self) -> dict[str, int]:
        return {s: sum(c.status == s for c in self.checks) for s in (PASS, FAIL, SKIP)}

    @property
    def exit_code(self) -> int:
        """0 when every check that ran passed, 1 when one failed."""
        return 1 if any(c.status == FAIL for c in self.checks) else 0

    def to_dict(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "vstream": __version__,
            "environment": self.environment,
            "checks": [
                {
                    "name": c.name,
                    "title": c.title,
                    "status": c.status,
                    "detail": c.detail,
                    "seconds": round(c.seconds, 3),
                    "data": c.data,
                }
                for c in self.checks
            ],
            "summary": {"passed": counts[PASS], "failed": counts[FAIL], "skipped": counts[SKIP]},
            "exit_code": self.exit_code,
        }

    def table(self) -> str:
        """The report as a person reads it."""
        lines = [f"vstream doctor {__version__}", "", "environment"]
        for key, value in _flatten(self.environment):
            lines.append(f"  {key:<28} {value}")
        lines += ["", "checks"]
        width = max(len(c.name) for c in self.checks) if self.checks else 10
        for check in self.checks:
            lines.append(f"  {check.status.upper():<5} {check.name:<{width}}  {check.detail}")
        counts = self.counts()
        lines += [
            "",
            f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
            + (" (every check that ran passed)" if not counts[FAIL] else ""),
        ]
        return "\n".join(lines)


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        yield prefix, ", ".join(str(v) for v in value) or "(none)"
    else:
        yield prefix, str(value)
