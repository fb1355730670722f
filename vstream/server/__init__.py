"""The daemon's HTTP API: health, readiness, metrics and streams."""

from vstream.server.app import create_app
from vstream.server.http import ApiServer

__all__ = ["ApiServer", "create_app"]
