"""``vstream validate``: check a pipelines file and report every problem with its line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vstream.cli.args import EXIT_BAD_INPUT, EXIT_OK
from vstream.config import ConfigError, load_config


def add_parser(commands: argparse._SubParsersAction) -> None:
    validate = commands.add_parser(
        "validate",
        help="check a pipelines file",
        description="Check a pipelines file: types, unknown keys, models and video files that "
        "must exist, URIs. Every problem is reported as FILE:LINE: KEY.PATH: MESSAGE; "
        "the exit status is 2 if there is any.",
    )
    validate.add_argument("config", type=Path, help="pipelines file (YAML)")
    validate.set_defaults(handler=validate_command)


def validate_command(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        for line in exc.lines():
            print(f"vstream: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sources = sum(len(p.sources) for p in config.pipelines)
    sinks = sum(len(p.sinks) for p in config.pipelines)
    print(
        f"{args.config}: OK: {len(config.pipelines)} pipeline(s), {sources} source(s), "
        f"{sinks} sink(s)"
    )
    return EXIT_OK
