"""The ``vstream`` command line; one module per command.

Exit status: 0 on success, 2 for bad input (a missing or corrupt video, a model
that does not fit, bad arguments) with one line on stderr, 1 for anything else.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from vstream.cli import bench, doctor, evaluate, info, run, schema, serve, validate
from vstream.cli.args import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNEXPECTED, Parser
from vstream.errors import VstreamError
from vstream.logs import setup_logging
from vstream.uri import redact

log = logging.getLogger("vstream")

COMMANDS = (run, info, evaluate, bench, serve, validate, schema, doctor)


def build_parser() -> argparse.ArgumentParser:
    from vstream import __version__

    parser = Parser(prog="vstream", description="Object detection on video streams.")
    parser.add_argument("--version", action="version", version=f"vstream {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vstream`` command; returns the exit status."""
    setup_logging("text", "info")
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except VstreamError as exc:
        log.error("error: %s", redact(str(exc)))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        log.error("interrupted")
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("VSTREAM_DEBUG"):
            raise
        log.error(
            "unexpected error: %s: %s (set VSTREAM_DEBUG=1 for a traceback)",
            type(exc).__name__,
            exc,
        )
        return EXIT_UNEXPECTED
