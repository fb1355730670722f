"""The ``vstream`` command line; one module per command.

Exit status: 0 on success, 2 for bad input (a missing or corrupt video, a model
that does not fit, bad arguments) with one line on stderr, 1 for anything else.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
from collections.abc import Sequence

from vstream.cli.args import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNEXPECTED, Parser
from vstream.errors import VstreamError
from vstream.logs import setup_logging
from vstream.uri import redact

log = logging.getLogger("vstream")


def build_parser() -> argparse.ArgumentParser:
    # The commands' modules (the config's models among them: half a second) are imported
    # here, inside main's handling of Ctrl-C, not as the entry point imports this module.
    from vstream import __version__
    from vstream.cli import bench, doctor, evaluate, info, run, schema, serve, validate

    parser = Parser(prog="vstream", description="Object detection on video streams.")
    parser.add_argument("--version", action="version", version=f"vstream {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in (run, info, evaluate, bench, serve, validate, schema, doctor):
        command.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vstream`` command; returns the exit status."""
    try:
        setup_logging("text", "info")
        args = build_parser().parse_args(argv)
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
    finally:
        spare_the_last_collection()


def spare_the_last_collection() -> None:
    """After a command that used CUDA, keep the interpreter's last collections off what is left.

    After the doctor's GPU checks, CPython 3.12 (the GPU machines' interpreter) has ended
    the process with a segmentation fault in its final garbage collection at exit, clearing
    a weak reference (``Py_FinalizeEx`` -> ``_PyWeakref_ClearRef``): every line printed,
    then exit status 139. A collection before returning does not avoid it; moving every
    object still alive out of the collector's reach (``gc.freeze()``) does: 3 clean exits
    of 3 against 2 crashes of 2 on an H100 (``benchmarks/exit_probe.py check:copies-gpu
    --freeze``, BENCHMARKS.md). What is garbage now is collected first, so its finalizers
    run as usual; the interpreter then frees the rest as it tears down the modules, less
    whatever stays in cycles, which the process's exit reclaims. Only after CUDA was used:
    nothing else has crashed.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    gc.collect()
    gc.freeze()
