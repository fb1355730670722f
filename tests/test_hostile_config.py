"""What a careless or hostile config or URI could get past: masking, and validate against serve.

1. A password holding what looks like the start of another URL (``(x://``)
   showed its prefix: masking stopped at the inner ``scheme://``.
"""

from __future__ import annotations

import io
import logging

import pytest

from vstream.config import ConfigError, parse_source
from vstream.logs import setup_logging
from vstream.uri import redact


@pytest.mark.parametrize("password", ["pa(x://ss", "ab (x://cd", "p[y://q@r", 'p"z://q', "s,t://u"])
def test_a_password_holding_a_scheme_is_masked_whole(password: str) -> None:
    uri = f"rtsp://admin:{password}@127.0.0.1:9/cam"
    log = io.StringIO()
    setup_logging(stream=log)
    logging.getLogger("vstream.test").warning("stream s: cannot open %s", uri)
    with pytest.raises(ConfigError) as refused:
        parse_source({"id": "s", "uri": uri.replace(":9/", ":9x/")})
    shown = [log.getvalue(), str(refused.value), redact(uri)]
    assert redact(uri) == "rtsp://***@127.0.0.1:9/cam"
    for text in shown:
        assert "admin" not in text and password.split("://")[0] not in text, text
