"""``vstream serve``: run every pipeline of a config until stopped, with the HTTP API.

The same engine as ``vstream run CONFIG``; it runs until SIGTERM or SIGINT
rather than until the files end, and serves the API beside it. Listening
beyond loopback without ``server.token`` is refused before anything starts
(one line, exit 2): anyone on the network could add streams (and read files
under ``server.allowed_paths``). A token is not generated instead, since it
would have to be printed, and logs never hold credentials.
"""

from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path
from typing import Any

from vstream.cli.args import EXIT_OK
from vstream.cli.options import SERVE_SECTIONS, add_flags, given
from vstream.engine.signals import FORCED_FLUSH_SECONDS
from vstream.errors import VstreamError

log = logging.getLogger("vstream")

_FLAGS: dict[str, Any] = {}


def add_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the pipelines of a config with an HTTP API until stopped",
        description="Run every pipeline of a config until SIGTERM or SIGINT, serving "
        "/health, /ready, /metrics and /streams. The first signal stops taking frames, "
        "finishes those in flight and flushes every sink; a second one cuts that short (the "
        f"sinks get {FORCED_FLUSH_SECONDS:g} s more for what they hold, then exit 128 + signal). "
        "The flags below override the file's settings.",
    )
    serve.add_argument("config", type=Path, help="pipelines file (YAML)")
    _FLAGS.update(add_flags(serve, SERVE_SECTIONS))
    serve.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    from vstream.cluster import open_engine
    from vstream.config import load_config
    from vstream.engine.signals import ShutdownSignals
    from vstream.logs import setup_logging
    from vstream.server import ApiServer, create_app
    from vstream.server.connections import raise_open_files

    config = load_config(args.config, overrides=given(args))
    if (problem := config.server.exposure_problem()) is not None:
        raise VstreamError(problem)
    setup_logging(config.logging.format, config.logging.level, timestamps=True)
    signals = ShutdownSignals().install()
    open_files = raise_open_files()  # before anything is opened: the pipelines draw on it too
    engine = open_engine(config, base_dir=args.config.resolve().parent)
    signals.on_force = engine.hurry
    token = config.server.token.get_secret_value() if config.server.token else None
    try:
        server = ApiServer(
            create_app(engine, token),
            host=config.server.host,
            port=config.server.port,
            connections=config.server.connections,
        )
        server.start()
    except BaseException:
        engine.stop(timeout=5.0)
        raise
    log.info("serving on %s (token %s)", server.url, "required" if token else "not required")
    wanted = config.server.connections.max_open
    lowered = (
        f", not {wanted}: half the open files free at start, the rest kept for the pipelines"
        if server.max_connections < wanted
        else ""
    )
    log.info("%s; API connections: at most %d%s", open_files, server.max_connections, lowered)
    try:
        engine.start()
        engine.wait(signals.requested, until_files_done=False)
    finally:
        engine.stop()
        server.app.state.preview.close()  # open previews end now, not at uvicorn's timeout
        server.stop()
        signals.restore()
    for stream in engine.summary():
        log.info(
            "stream %s: %d frames processed, %d dropped%s",
            stream.id,
            stream.frames,
            stream.dropped,
            f", failed: {stream.error}" if stream.error else "",
        )
    log.info("stopped")
    if signals.exit_status is not None:
        return signals.exit_status
    return 130 if signals.received == signal.SIGINT else EXIT_OK
