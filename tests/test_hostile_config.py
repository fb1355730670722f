"""What a careless or hostile config or URI could get past: masking, and validate against serve.

1. A password holding what looks like the start of another URL (``(x://``)
   showed its prefix: masking stopped at the inner ``scheme://``.
2. ``validate`` passed ``host: 0.0.0.0`` with an empty token, which ``serve``
   refuses: it now refuses it with the same line.
"""

from __future__ import annotations

import io
import json
import logging
import shutil
from pathlib import Path

import pytest
from helpers import run_cli, write_video

from vstream import assets
from vstream.cli import main
from vstream.config import ConfigError, parse_config, parse_source
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


def test_validate_refuses_what_serve_refuses_with_the_same_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(
        "server: {host: 0.0.0.0, token: ''}\n"
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        "    sinks: [{type: stdout}]\n"
    )
    line = (
        "server.host 0.0.0.0 listens beyond loopback, and no server.token is set: set one "
        '(at least 8 characters, e.g. token: "${VSTREAM_API_TOKEN}") or listen on 127.0.0.1'
    )
    assert main(["validate", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"vstream: {config}: {line}"]
    assert main(["serve", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"vstream: error: {line}"]


def test_any_host_allowed_without_a_token_is_refused_by_validate_and_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The field says '*' is only behind a token, and took it without one: any web page
    (DNS rebinding to 127.0.0.1) could then add and remove streams."""
    config = tmp_path / "p.yaml"
    config.write_text(
        "server: {allowed_hosts: ['*']}\n"
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        "    sinks: [{type: stdout}]\n"
    )
    line = "server.allowed_hosts '*' lets any web page's requests in (DNS rebinding)"
    assert main(["validate", str(config)]) == 2
    assert line in capsys.readouterr().err
    assert main(["serve", str(config)]) == 2
    assert line in capsys.readouterr().err


@pytest.mark.parametrize(
    "token",
    ["abcdefgh\n", " abcdefgh", "pässwörd-123", "two words"],
    ids=["newline", "space", "past-ascii", "inner-space"],
)
def test_a_token_no_client_can_send_is_refused_without_showing_it(token: str) -> None:
    """Accepted, each locked every client out: a header's ends are trimmed, and a letter past
    ASCII is sent as UTF-8 and read as Latin-1."""
    with pytest.raises(ConfigError) as refused:
        pipeline = (
            f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
            f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n    sinks: [{{type: stdout}}]\n"
        )
        parse_config(f"server: {{token: {json.dumps(token)}}}\n{pipeline}")
    message = str(refused.value)
    assert "server.token: must be visible ASCII characters only" in message
    assert token.strip() not in message


def test_a_webhook_header_ending_in_a_newline_is_refused_without_showing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A YAML block (``|``) or a secret file read whole ends a token with a newline, which
    HTTP cannot send: httpx refused each request with a message quoting the header, which
    was logged and shown by ``/ready`` at each retry, forever. ``validate`` refuses it now,
    naming the header, not its value."""
    config = tmp_path / "p.yaml"
    config.write_text(
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        "    sinks:\n      - type: webhook\n        url: http://127.0.0.1:9/hook\n"
        "        headers:\n          Authorization: |\n            Bearer s3cr3t-T0KEN\n"
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "header Authorization holds a line break" in err
    assert "s3cr3t" not in err


def test_two_pipelines_writing_one_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two JSON Lines sinks on one file truncated each other's lines (30 of 60 left), and
    would cut back and rotate each other's; a file per pipeline through {pipeline} is fine."""

    def pipeline(name: str, path: str) -> str:
        return (
            f"  - name: {name}\n    model: {{path: {assets.DEMO_MODEL}}}\n"
            f"    sources: [{{id: {name}, uri: {assets.SAMPLE_VIDEO}}}]\n"
            f"    sinks: [{{type: jsonl, path: '{path}'}}]\n"
        )

    config = tmp_path / "p.yaml"
    config.write_text("pipelines:\n" + pipeline("a", "out.jsonl") + pipeline("b", "out.jsonl"))
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "pipelines[0].sinks[0] and pipelines[1].sinks[0] both write" in err
    assert f"{tmp_path / 'out.jsonl'}; give each its own file" in err
    each = pipeline("a", "{pipeline}.jsonl") + pipeline("b", "{pipeline}.jsonl")
    config.write_text("pipelines:\n" + each)
    assert main(["validate", str(config)]) == 0


def test_an_output_on_an_input_is_refused_and_the_input_kept(tmp_path: Path) -> None:
    """``-o`` mistyped as the video read (through a link too), or the model, or the records
    and the annotated video on one file: each output destroyed what it replaced, the
    input left empty, the model overwritten with records, exit 0 for some."""
    video = write_video(tmp_path / "clip.mp4", frames=5, width=64, height=48)
    (tmp_path / "link.mp4").symlink_to(video)
    model = tmp_path / "model.onnx"
    shutil.copy(assets.DEMO_MODEL, model)
    size = video.stat().st_size
    for flags, said in [
        (["-o", "link.mp4"], "sinks[0] would write over pipelines[0].sources[0]"),
        (["--model", "model.onnx", "-o", "model.onnx"], "would write over pipelines[0].model"),
        (["-o", "same.mp4", "--save-video", "same.mp4"], "sinks[1] both write"),
    ]:
        done = run_cli("run", "--source", "clip.mp4", *flags, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (2, ""), done
        assert said in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert video.stat().st_size == size
    assert model.read_bytes() == assets.DEMO_MODEL.read_bytes()


@pytest.mark.parametrize("command", [["bench", "--source"], ["doctor", "--quick", "--video"]])
def test_a_url_given_for_a_file_is_refused_without_its_password(command: list[str]) -> None:
    done = run_cli(*command, "rtsp://admin:hunter2@127.0.0.1:1/x")
    assert done.returncode == 2 and "takes a" in done.stderr and "not a URL" in done.stderr
    assert "hunter2" not in done.stderr


def test_a_malformed_camera_url_is_one_line_not_an_internal_error(tmp_path: Path) -> None:
    done = run_cli("run", "--source", "rtsp://admin:hunter2@[bad/x", "-o", tmp_path / "o.jsonl")
    assert done.returncode == 2, done
    assert "Invalid IPv6 URL" in done.stderr and "unexpected error" not in done.stderr
    assert "hunter2" not in done.stderr


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("redis://:s3cret@host:port/0", "Port could not be cast to integer value as 'port'"),
        ("redis://:s3cret@host:6379/zero", "its database must be a number, got 'zero'"),
        ("redis://:s3cret@host:6379/0?socket_timeout=abc", "Invalid value for 'socket_timeout'"),
    ],
    ids=["port", "database", "option"],
)
def test_a_redis_url_redis_py_cannot_use_is_refused_by_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, said: str
) -> None:
    """validate passed these, then the run failed as it built the sink with a traceback's
    "unexpected error" (or, for the database, wrote to database 0 without a word)."""
    config = tmp_path / "p.yaml"
    config.write_text(
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        f"    sinks: [{{type: redis, url: '{url}'}}]\n"
    )
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert said in err and "redis://***@host:" in err
    assert "s3cret" not in err


@pytest.mark.parametrize(
    ("server", "uri", "said"),
    [
        (
            f"{{port: {'9' * 5000}}}",
            assets.SAMPLE_VIDEO,
            "1: server.port: cannot read '9999999999999999999999999999999999999...' as !!int: "
            "Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits",
        ),
        (
            "{allowed_paths: ['~nosuchuser_zz/x']}",
            assets.SAMPLE_VIDEO,
            "1: server.allowed_paths: ~nosuchuser_zz/x: no home directory for ~nosuchuser_zz "
            "(no such user)",
        ),
        (
            "{}",
            "~nosuchuser_zz/clip.mp4",
            "5: pipelines[0].sources[0].uri: ~nosuchuser_zz/clip.mp4: no home directory for "
            "~nosuchuser_zz (no such user)",
        ),
        (
            "{host: 2024-13-45}",
            assets.SAMPLE_VIDEO,
            "1: server.host: cannot read '2024-13-45' as !!timestamp: month must be in 1..12",
        ),
        (
            "{host: !!foo x}",
            assets.SAMPLE_VIDEO,
            "1: server.host: cannot read 'x' as !!foo: unknown tag",
        ),
    ],
    ids=["long-integer", "allowed-path-of-no-user", "source-of-no-user", "no-date", "unknown-tag"],
)
def test_a_value_python_cannot_build_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: str, uri: str, said: str
) -> None:
    """Python refuses these as PyYAML or a path check builds them: an integer past its
    4300 digits, a date that is none, a tag it has no type for (ValueError, ConstructorError,
    AttributeError), ``~name`` of no user (RuntimeError, which pydantic lets through). Each was
    "unexpected error" with Python's words, and exit 1."""
    config = tmp_path / "p.yaml"
    config.write_text(
        f"server: {server}\n"
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: '{uri}'}}]\n"
        "    sinks: [{type: stdout}]\n"
    )
    assert main(["validate", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"vstream: {config}:{said}"]


def test_through_the_api_a_dev_path_says_nothing_of_files_outside_allowed_paths(
    tmp_path: Path,
) -> None:
    """``/dev/../etc/passwd`` was taken for a device before allowed_paths was checked: "is
    not a V4L2 capture device" where the file existed, "no capture device" where not. A path
    is a device's only where it lies in ``/dev`` once its ``..`` and links are resolved (a
    link such as ``/dev/fd/3`` names a file), and a device refused through the API is refused
    in the same words whether it exists or not."""
    inside = tmp_path / "inside"
    inside.mkdir()
    outside = tmp_path / "outside.mp4"
    outside.write_bytes(b"\0" * 64)

    def refusal(uri: str) -> str:
        with pytest.raises(ConfigError) as refused:
            parse_source({"id": "s", "uri": uri}, base_dir=inside, allowed_paths=[str(inside)])
        return str(refused.value)

    with outside.open("rb") as held:
        uris = [
            f"/dev/..{outside}",
            f"/dev/..{tmp_path}/no-such-file.mp4",
            "/dev/video/../../etc/passwd",
            "/dev/../etc/no-such-file",
            f"/dev/fd/{held.fileno()}",
            "/dev/fd/999999",
            "~nosuchuser_zz/clip.mp4",
        ]
        said = {uri: refusal(uri) for uri in uris}
    outside_message = (
        f"uri: file sources through the API must lie under server.allowed_paths ({inside})"
    )
    assert said == dict.fromkeys(uris, outside_message)
    for device in ("/dev/null", "/dev/no-such-device-zz"):
        assert refusal(device) == f"uri: {device} is not a V4L2 capture device"


@pytest.mark.parametrize(
    ("section", "flags"),
    [
        ("server:\n", ["--port", "0"]),
        ("server: 8080\n", ["--host", "127.0.0.1"]),
        ("server: [a]\n", ["--port", "0"]),
        ("logging:\n", ["--log-level", "debug"]),
    ],
    ids=["empty-server", "number-server", "list-server", "empty-logging"],
)
def test_a_flag_into_a_section_that_is_no_mapping_gets_validates_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], section: str, flags: list[str]
) -> None:
    """``server:`` with its lines commented out, and ``vstream serve --port 0``: the flag was
    set into None, a TypeError (exit 1) where ``validate`` refuses the section (exit 2)."""
    config = tmp_path / "p.yaml"
    config.write_text(
        f"{section}pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        "    sinks: [{type: stdout}]\n"
    )
    assert main(["validate", str(config)]) == 2
    (refused,) = capsys.readouterr().err.splitlines()
    assert (
        refused.startswith(f"vstream: {config}:1: ") and "should be a valid dictionary" in refused
    )
    assert main(["serve", str(config), *flags]) == 2
    assert capsys.readouterr().err.splitlines() == [refused.replace(": ", ": error: ", 1)]


def test_a_refused_interpolation_shows_no_value_and_no_text_around_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A default written in the file (``${PW-hunter2}``) or a variable's value may be a
    password: the message refusing a form names the variable and the key alone."""
    monkeypatch.setenv("MQTT_USER", "s3cr3t-user")
    config = tmp_path / "p.yaml"
    config.write_text(
        f"pipelines:\n  - name: p\n    model: {{path: {assets.DEMO_MODEL}}}\n"
        f"    sources: [{{id: s, uri: {assets.SAMPLE_VIDEO}}}]\n"
        "    sinks:\n      - type: mqtt\n        host: h\n"
        "        username: ${MQTT_USER}\n        password: xx${PW-hunter2}yy\n"
    )
    assert main(["validate", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"vstream: {config}:9: pipelines[0].sinks[0].password: unsupported interpolation "
        "${PW...}: write ${PW} or ${PW:-default}, or $${ for a literal ${"
    ]
