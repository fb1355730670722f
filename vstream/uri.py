"""Source addresses as users write them, and as vstream may show them.

Camera URLs often carry credentials (``rtsp://user:password@host/...``), and
passwords hold anything: spaces, ``/``, ``@``, ``#``, ``%``, unicode. Masking
works by reading each URL where it is shown, never from a list of secrets
remembered earlier (a list is either bounded, and then fails open once full,
or grows with every request; and a remembered user name such as ``admin``
would be masked in unrelated words). :func:`redact` finds every
``scheme://`` in a text and masks, as ``***``:

- the user information: everything from the first ``://`` to the *last*
  ``@`` on the line, so a password holding a raw ``/``, ``@``, ``#``,
  space, or what looks like the start of another URL (``(x://``) is masked
  whole, and ``admin`` with it (two URLs on a line lose what lies between);
- the value of every query or fragment parameter whose name holds ``pass``,
  ``pwd``, ``token``, ``key``, ``secret``, ``auth``, ``sig``, ``credential``,
  ``session`` or ``cookie`` (``?password=``, ``&access_token=``, ``#key=``);
- the stream key of an RTMP URL (its last path element): whoever has it can
  publish on the channel.

A text that is not a URL but holds an ``@`` after one may lose a little more
than the credentials: masking errs on the side of hiding. Anything that ends
up in a log line, an error, a metric label or an API response goes through
:func:`redact` (the log handlers apply it to every record, whichever library
logged it).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

NETWORK_SCHEMES = ("rtsp", "rtsps", "rtmp", "http", "https", "udp", "tcp", "srt")
MASK = "***"

_SCHEME = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://")
_PARAMETER = re.compile(r"(?P<lead>[?&;#])(?P<name>[^=&;#?\s\"'<>/]+)=(?P<value>[^&;#\s\"'<>]*)")
_SENSITIVE = re.compile(r"pass|pwd|token|key|secret|auth|sig|credential|session|cookie", re.I)
_RTMP_KEY = re.compile(
    r"(?i)(?<![A-Za-z0-9+.-])(?P<head>rtmps?://[^\s\"'<>/]+/[^\s\"'<>?#]*/)[^\s\"'<>/?#]+"
)


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


def webhook_display(url: str) -> str:
    """``url`` as it may be shown: ``scheme://host[:port]``, with ``/***`` for anything after.

    A webhook's path is often its only credential (Slack's ``/services/T…/B…/SECRET``,
    Discord's ``/api/webhooks/ID/TOKEN``), and nothing tells such a path from a plain
    one; user information and query go with it.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:  # no scheme: hooks.example.com/services/...
        scheme, rest = "", url
    rest = rest.rpartition("@")[2]  # user information read as :func:`userinfo` reads it
    host = re.split(r"[/?#]", rest, maxsplit=1)[0]
    after = rest[len(host) :]
    return f"{scheme}{sep}{host}" + (f"/{MASK}" if after.strip("/") else after)


def _mask_userinfo(line: str) -> str:
    """``line`` with everything from its first ``scheme://`` to its last ``@`` masked.

    Found with one search each way, not a pattern that could backtrack: a line
    of many ``x://`` and no ``@`` costs one pass.
    """
    at = line.rfind("@")
    scheme = _SCHEME.search(line, 0, at) if at > 0 else None
    return line if scheme is None else f"{line[: scheme.end()]}{MASK}{line[at:]}"


def _parameter(match: re.Match[str]) -> str:
    if not _SENSITIVE.search(unquote(match["name"])):
        return match[0]
    return f"{match['lead']}{match['name']}={MASK}"


def redact(text: str) -> str:
    """``text`` (a URL, or a message quoting URLs) with every credential in it as ``***``."""
    if not isinstance(text, str):
        text = str(text)
    if "://" in text:
        text = "\n".join(_mask_userinfo(line) for line in text.split("\n"))
        text = _RTMP_KEY.sub(rf"\g<head>{MASK}", text)
    if "=" in text:
        text = _PARAMETER.sub(_parameter, text)
    return text


redact_uri = redact
"""The same as :func:`redact`, by the name used where a URI is shown."""


def is_live(uri: str) -> bool:
    """Whether ``uri`` names a live stream (network or capture device) rather than a file."""
    scheme = uri.split("://", 1)[0].lower() if "://" in uri else ""
    return scheme in NETWORK_SCHEMES or uri.startswith("/dev/video")


def stream_name(uri: str) -> str:
    """A short stream id for ``uri``: the file or path stem, else the host; never credentials.

    ``rtsp://user:pw@cam7.local:554/live/main`` gives ``main``, ``/dev/video0``
    gives ``video0``, ``rtsp://10.0.0.5/`` gives ``10.0.0.5``, ``vstream://sample.mp4``
    (a bundled file) ``sample``.
    """
    if "://" not in uri or uri.lower().startswith("vstream://"):  # a path, or a bundled file's
        return PurePosixPath(uri.split("://", 1)[-1]).stem or uri
    info = userinfo(uri)
    scheme, _, rest = uri.partition("://")
    if info is not None:
        rest = rest[len(info) + 1 :]
    try:
        parts = urlsplit(f"{scheme}://{rest}")
    except ValueError:  # rtsp://[bad/x: refused, with its reasons, where the source is checked
        return MASK
    stem = PurePosixPath(parts.path).stem
    return stem or parts.hostname or MASK


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def stream_id_for(uri: str) -> str:
    """A valid stream id for ``uri``: its :func:`stream_name`, with other characters as ``_``."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", stream_name(uri))[:64].lstrip("_.-")
    return name if _NAME.match(name) else "stream"


def is_loopback(host: str) -> bool:
    """Whether a listening address is reachable from this host only."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
