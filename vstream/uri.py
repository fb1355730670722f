"""Source addresses as users write them, and as vstream may show them.

Camera URLs often carry credentials (``rtsp://user:password@host/...``), and
passwords hold anything: spaces, ``/``, ``@``, ``#``, ``%``, unicode. A
pattern that guesses where a password ends leaks the rest of it, so masking
works from what is known instead:

- every URI vstream is given (config file, CLI, HTTP API, Python) is passed to
  :func:`register_credentials` when it is validated, which takes its user
  information apart (everything between ``://`` and the last ``@`` before the
  host) and remembers it, raw and percent-decoded;
- :func:`redact` replaces every remembered secret in a text by ``***``, then
  masks any other ``scheme://user:pass@host`` it can still recognise.

Anything that ends up in a log line, an error, a metric label or an API
response goes through :func:`redact` (the log handlers apply it to every
record, whichever library logged it).
"""

from __future__ import annotations

import re
import threading
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

NETWORK_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt")
MASK = "***"
_MIN_SECRET = 3
"""Shorter fragments are not masked on their own (they would blank out ordinary words);
the whole ``user:password`` is always masked."""
_MAX_SECRETS = 10_000

# A scheme, "://", then an authority: no "/", "?", "#", or line break, up to an "@".
_AUTHORITY_AT = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\n]*@")

_secrets: set[str] = set()
_ordered: list[str] = []
_lock = threading.Lock()


def userinfo(uri: str) -> str | None:
    """The user information of ``uri`` (``user:password``), read leniently; None if none.

    Lenient means: from ``://`` to the *last* ``@`` of the URI, since a
    password may hold a raw ``/``, ``@``, ``#`` or space that a strict parser
    would take for the start of the path, the host or the fragment.
    """
    _scheme, sep, rest = uri.partition("://")
    if not sep or "@" not in rest:
        return None
    info = rest.rsplit("@", 1)[0]
    return info or None


def register_credentials(uri: str) -> None:
    """Remember the credentials in ``uri`` so that :func:`redact` masks them everywhere."""
    info = userinfo(uri)
    if info is None:
        return
    user, _, password = info.partition(":")
    candidates = {info, unquote(info)}
    for part in (user, password):
        if len(part) >= _MIN_SECRET:
            candidates |= {part, unquote(part)}
    strict = urlsplit(uri).netloc.rpartition("@")[0] if "://" in uri else ""
    if strict:
        candidates.add(strict)
    with _lock:
        new = candidates - _secrets
        if not new or len(_secrets) + len(new) > _MAX_SECRETS:
            return
        _secrets.update(new)
        _ordered[:] = sorted(_secrets, key=len, reverse=True)


PUBLISH_SCHEMES = ("rtmp", "rtmps")
"""Where an annotated video can be pushed live (to nginx-rtmp, MediaMTX, a streaming service)."""


def is_publish_url(target: str) -> bool:
    """Whether ``target`` is a live output URL (``rtmp://host/app/key``) rather than a file."""
    return target.split("://", 1)[0].lower() in PUBLISH_SCHEMES if "://" in target else False


def publish_display(url: str) -> str:
    """``url`` as it may be shown: credentials and the stream key masked.

    An RTMP stream key (the last path element, ``rtmp://host/app/KEY``) is a
    password by another name: whoever has it can publish on the channel.
    """
    parts = urlsplit(url)
    address = parts.netloc.rpartition("@")[2]  # host[:port], without user information
    app = parts.path.rstrip("/").rpartition("/")[0]
    return f"{parts.scheme}://{address}{app}/{MASK}"


def redact(text: str) -> str:
    """``text`` (a URL, or a message quoting one) with every known credential as ``***``."""
    if not isinstance(text, str):
        text = str(text)
    with _lock:
        secrets = list(_ordered)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return _AUTHORITY_AT.sub(rf"\g<scheme>{MASK}@", text)


redact_uri = redact
"""The same as :func:`redact`, by the name used where a URI is shown."""


def is_live(uri: str) -> bool:
    """Whether ``uri`` names a live stream (network or capture device) rather than a file."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return scheme in NETWORK_SCHEMES or uri.startswith("/dev/video")


def stream_name(uri: str) -> str:
    """A short stream id for ``uri``: the file or path stem, else the host; never credentials.

    ``rtsp://user:pw@cam7.local:554/live/main`` gives ``main``, ``/dev/video0``
    gives ``video0``, ``rtsp://10.0.0.5/`` gives ``10.0.0.5``.
    """
    if "://" not in uri:
        return PurePosixPath(uri).stem or uri
    info = userinfo(uri)
    scheme, _, rest = uri.partition("://")
    if info is not None:
        rest = rest[len(info) + 1 :]
    parts = urlsplit(f"{scheme}://{rest}")
    stem = PurePosixPath(parts.path).stem
    return stem or parts.hostname or MASK


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def stream_id_for(uri: str) -> str:
    """A valid stream id for ``uri``: its :func:`stream_name`, with other characters as ``_``."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", stream_name(uri))[:64].lstrip("_.-")
    return name if _NAME.match(name) else "stream"
