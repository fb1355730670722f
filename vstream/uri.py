"""Source addresses as users write them, and as vstream may show them.

Camera URLs often carry credentials (``rtsp://user:password@host/...``).
Anything that ends up in a log line, an error, a metric label or an API
response goes through :func:`redact_uri` first.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from urllib.parse import urlsplit

# Scheme, then user info up to the last "@" before the path.
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s]*@")


def redact_uri(text: str) -> str:
    """``text`` (a URL, or a message quoting one) with user names and passwords as ``***``."""
    return _USERINFO.sub(r"\g<scheme>***@", text)


def is_live(uri: str) -> bool:
    """Whether ``uri`` names a live stream (network or capture device) rather than a file."""
    scheme = urlsplit(uri).scheme.lower() if "://" in uri else ""
    return scheme in {"rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt"} or (
        uri.startswith("/dev/video")
    )


def stream_name(uri: str) -> str:
    """A short stream id for ``uri``: the file or path stem, else the host; never credentials.

    ``rtsp://user:pw@cam7.local:554/live/main`` gives ``main``, ``/dev/video0``
    gives ``video0``, ``rtsp://10.0.0.5/`` gives ``10.0.0.5``.
    """
    if "://" not in uri:
        return PurePosixPath(uri).stem or uri
    parts = urlsplit(uri)
    stem = PurePosixPath(parts.path).stem
    return stem or parts.hostname or redact_uri(uri)
