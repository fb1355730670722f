"""``vstream serve``: run every pipeline of a config until stopped, with the HTTP API.

Also home of ``vstream run CONFIG``, which runs the same pipelines without the
API and stops when every file source is done.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from vstream.cli.args import EXIT_BAD_INPUT, EXIT_OK
from vstream.config import VstreamConfig, load_config
from vstream.errors import VstreamError
from vstream.logs import LEVELS, setup_logging
from vstream.runtime import Runtime
from vstream.runtime.signals import ShutdownSignals

log = logging.getLogger("vstream")

_POLL_SECONDS = 0.2


def add_parser(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the pipelines of a config with an HTTP API until stopped",
        description="Run every pipeline of a config until SIGTERM or SIGINT, serving "
        "/health, /ready, /metrics and /streams. The first signal stops taking frames, "
        "finishes those in flight and flushes every sink; a second one exits at once.",
    )
    serve.add_argument("config", type=Path, help="pipelines file (YAML)")
    serve.add_argument("--host", help="listen address (default: the config's, else 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port, 0 for any free one (default: the config's)")
    serve.add_argument("--log-format", choices=["text", "json"], help="default: the config's")
    serve.add_argument("--log-level", choices=LEVELS, help="default: the config's")
    serve.set_defaults(handler=serve_command)


def _load(
    path: Path, log_format: str | None, log_level: str | None, *, timestamps: bool
) -> VstreamConfig:
    config = load_config(path)
    setup_logging(
        log_format or config.logging.format,
        log_level or config.logging.level,
        timestamps=timestamps,
    )
    return config


def serve_command(args: argparse.Namespace) -> int:
    from vstream.server import ApiServer, create_app

    config = _load(args.config, args.log_format, args.log_level, timestamps=True)
    if args.port is not None and not 0 <= args.port <= 65535:
        raise VstreamError(f"--port must be between 0 and 65535, got {args.port}")
    signals = ShutdownSignals().install()
    runtime = Runtime(config, base_dir=args.config.resolve().parent)
    token = config.server.token.get_secret_value() if config.server.token else None
    try:
        server = ApiServer(
            create_app(runtime, token),
            host=args.host or config.server.host,
            port=args.port if args.port is not None else config.server.port,
        )
        server.start()
    except BaseException:
        runtime.shutdown(timeout=5.0)
        raise
    log.info("serving on %s (token %s)", server.url, "required" if token else "not required")
    if token is None and server.host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("the API listens on %s without a token: set server.token", server.host)
    runtime.start()
    # Wait in short steps: the kernel may deliver the signal to any thread, and Python runs
    # its handler only when the main thread is back in the interpreter, which an untimed
    # wait on a lock never does.
    while not signals.requested.wait(_POLL_SECONDS):
        pass
    runtime.shutdown()
    server.stop()
    log.info("stopped")
    return EXIT_OK


def run_config_command(args: argparse.Namespace) -> int:
    """``vstream run CONFIG``: every pipeline until its file sources are done (or a signal)."""
    from vstream.cli import build_parser

    defaults = vars(build_parser().parse_args(["run", str(args.config)]))
    given = sorted(
        f"--{key.replace('_', '-')}"
        for key, value in vars(args).items()
        if key not in ("config", "quiet", "handler") and value != defaults.get(key)
    )
    if given:
        raise VstreamError(
            f"{', '.join(given)} cannot be combined with a config file: set them in the config"
        )
    config = _load(args.config, None, "warning" if args.quiet else None, timestamps=False)
    signals = ShutdownSignals().install()
    runtime = Runtime(config, base_dir=args.config.resolve().parent)
    runtime.start()
    while not signals.requested.wait(_POLL_SECONDS):
        if runtime.files_done():
            break
    runtime.shutdown()
    failed = [s for s in runtime.streams() if s["state"] == "failed"]
    for stream in runtime.streams():
        log.info(
            "stream %s: %d frames processed, %d dropped",
            stream["id"],
            stream["frames_processed"],
            stream["frames_dropped"],
        )
    return EXIT_BAD_INPUT if failed else EXIT_OK
