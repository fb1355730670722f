"""Pipelines files: the examples, precise errors, interpolation, and the CLI around them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from helpers import run_cli, tiny_detector, write_video

from vstream.config import ConfigError, load_config, parse_config, parse_source
from vstream.sources import FreshnessPolicy, SourceOptions

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
EXAMPLE_ENV = {"CAM_USER": "viewer", "CAM_PASSWORD": "pa55word"}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory with a model and a video, as relative paths in a config refer to them."""
    tiny_detector(tmp_path / "model.onnx")
    write_video(tmp_path / "clip.mp4", frames=12)
    return tmp_path


def write_config(directory: Path, text: str, name: str = "pipelines.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


GOOD = """
pipelines:
  - name: main
    model: {path: model.onnx}
    sources:
      - id: cam
        uri: clip.mp4
    sinks:
      - {type: jsonl, path: out.jsonl}
"""


def errors_of(directory: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(directory, text))
    return caught.value.lines()


@pytest.mark.parametrize("example", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_validates(example: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in EXAMPLE_ENV.items():
        monkeypatch.setenv(name, value)
    config = load_config(example)
    assert config.pipelines and all(p.sinks for p in config.pipelines)


def test_examples_cover_the_documented_setups() -> None:
    names = {p.name for p in CONFIGS.glob("*.yaml")}
    assert {"file.yaml", "rtsp-cameras.yaml", "mqtt.yaml", "cpu.yaml"} <= names


def test_a_good_config_maps_to_source_options_and_detector_arguments(workdir: Path) -> None:
    config = load_config(write_config(workdir, GOOD))
    (pipeline,) = config.pipelines
    assert pipeline.sources[0].uri == str(workdir / "clip.mp4")
    assert pipeline.sources[0].options() == SourceOptions()
    assert pipeline.model.path == str(workdir / "model.onnx")
    post, runtime = pipeline.postprocess, pipeline.runtime
    assert (post.conf, post.iou, post.max_det, runtime.device) == (0.25, 0.45, 300, "auto")
    assert config.server.host == "127.0.0.1"


def test_every_option_reaches_source_options(workdir: Path) -> None:
    source = parse_source(
        {
            "id": "cam",
            "uri": "rtsp://user:pw@10.0.0.1:554/s",
            "policy": "latest",
            "queue_size": 4,
            "reconnect": {"initial_delay_seconds": 1, "max_delay_seconds": 5, "max_attempts": 3},
            "rtsp_transport": "udp",
            "stride": 2,
        },
        base_dir=workdir,
    )
    options = source.options()
    assert options.policy is FreshnessPolicy.LATEST and options.queue_size == 4
    assert options.reconnect.max_delay_seconds == 5 and options.reconnect.max_attempts == 3
    assert (options.rtsp_transport, options.stride) == ("udp", 2)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace("clip.mp4", "clip.mp4\n        queue_size: many"),
            "pipelines.yaml:7: pipelines[0].sources[0].queue_size: must be an integer, got 'many'",
        ),
        (
            GOOD.replace("{type: jsonl, path: out.jsonl}", "{type: mqtt, host: h, qos: 3}"),
            "pipelines.yaml:8: pipelines[0].sinks[0].qos: Input should be 0, 1 or 2 (got 3)",
        ),
        (
            GOOD.replace("id: cam", "id: cam\n        lop: true"),
            "pipelines.yaml:6: pipelines[0].sources[0].lop: unknown key 'lop'; expected one of: "
            "id, uri,",
        ),
        (
            GOOD.replace("    model: {path: model.onnx}\n", ""),
            "pipelines.yaml:2: pipelines[0].model: missing required key 'model'",
        ),
        (
            GOOD.replace("model.onnx", "missing.onnx"),
            "pipelines.yaml:3: pipelines[0].model.path: model file not found: ",
        ),
        (
            GOOD.replace("clip.mp4", "ftp://user:secret@host/clip.mp4"),
            "pipelines.yaml:6: pipelines[0].sources[0].uri: unsupported scheme 'ftp' in "
            "ftp://***@host/clip.mp4",
        ),
        (
            GOOD.replace("clip.mp4", "rtsp://:554/stream"),
            "pipelines.yaml:6: pipelines[0].sources[0].uri: no host in rtsp://:554/stream",
        ),
        (
            GOOD.replace("clip.mp4", "rtsp://cam:99999/stream"),
            "pipelines.yaml:6: pipelines[0].sources[0].uri: bad port in rtsp://cam:99999/stream",
        ),
        (
            GOOD.replace("jsonl, path: out.jsonl", "kafka"),
            "pipelines.yaml:8: pipelines[0].sinks[0].type: unknown sink type 'kafka'; "
            "choose from jsonl, stdout, mqtt, redis, webhook",
        ),
        (
            GOOD.replace("id: cam", "id: my cam"),
            "pipelines.yaml:5: pipelines[0].sources[0].id: String should match pattern",
        ),
        (
            GOOD + "  - name: main\n    model: {path: model.onnx}\n    sinks: [{type: stdout}]\n",
            "pipelines.yaml:1: pipelines: pipelines[0] and pipelines[1] are both named 'main'",
        ),
        (
            GOOD
            + "  - name: other\n    model: {path: model.onnx}\n    runtime: {torch_threads: 2}\n"
            "    sinks: [{type: stdout}]\n",
            "pipelines.yaml:1: pipelines: runtime.torch_threads is process-wide (torch has one "
            "setting), so every pipeline must give the same; they give 'main' 1, 'other' 2",
        ),
        (
            GOOD.replace("    sinks:", "      - {id: cam, uri: clip.mp4}\n    sinks:"),
            "pipelines[0].sources[0] and pipelines[0].sources[1] both have id 'cam'",
        ),
        ("pipelines: []\n", "pipelines.yaml:1: pipelines: List should have at least 1 item"),
        ("pipelines:\n  - name: [unclosed\n", "pipelines.yaml:3: invalid YAML"),
        ("", "pipelines.yaml:1: the file is empty"),
        (
            GOOD.replace("id: cam", "id: cam\n        id: cam2"),
            "pipelines.yaml:6: pipelines[0].sources[0].id: duplicate key",
        ),
    ],
    ids=[
        "wrong-type",
        "bad-choice",
        "unknown-key",
        "missing-model",
        "model-not-found",
        "bad-scheme",
        "no-host",
        "bad-port",
        "unknown-sink",
        "bad-id",
        "duplicate-pipeline",
        "torch-threads-differ",
        "duplicate-stream",
        "no-pipelines",
        "bad-yaml",
        "empty",
        "duplicate-key",
    ],
)
def test_broken_configs_name_the_key_and_line(workdir: Path, text: str, expected: str) -> None:
    assert any(expected in line for line in errors_of(workdir, text)), errors_of(workdir, text)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "postprocess: {conf: 1e308}",
            "pipelines.yaml:4: pipelines[0].postprocess.conf: must be a number, got '1e308', "
            "which YAML reads as text (write 1.0e+308) (allowed: [0, 1])",
        ),
        (
            "postprocess: {conf: 1.0e+308}",
            "pipelines.yaml:4: pipelines[0].postprocess.conf: must be in [0, 1], got 1e+308",
        ),
        (
            "postprocess: {iou: .inf}",
            "pipelines.yaml:4: pipelines[0].postprocess.iou: must be a finite number, got inf "
            "(allowed: [0, 1])",
        ),
        (
            "runtime: {batch_size: 1e3}",
            "pipelines.yaml:4: pipelines[0].runtime.batch_size: must be an integer, got '1e3', "
            "which YAML reads as text (write digits) (allowed: [1, 64])",
        ),
        (
            "runtime: {batch_size: '4'}",
            "pipelines.yaml:4: pipelines[0].runtime.batch_size: must be an integer, got '4' "
            "(allowed: [1, 64])",
        ),
        (
            "runtime: {batch_timeout_seconds: 1.0e+308}",
            "pipelines.yaml:4: pipelines[0].runtime.batch_timeout_seconds: must be in [0, 10], "
            "got 1e+308",
        ),
    ],
    ids=["1e308-text", "1e308", "infinity", "int-text", "int-quoted", "seconds"],
)
def test_numbers_out_of_type_or_range_name_the_allowed_range(
    workdir: Path, setting: str, expected: str
) -> None:
    text = GOOD.replace("    sources:", f"    {setting}\n    sources:")
    [line] = errors_of(workdir, text)
    assert line.endswith(f"/{expected}"), line


@pytest.mark.parametrize(
    ("imgsz", "shown"),
    [
        ("[0, 640]", "[0, 640]"),
        ("99999", "99999"),
        ("[640]", "[640]"),
        ("x", "'x'"),
        ("true", "True"),
        ("[32, 40000]", "[32, 40000]"),
    ],
)
def test_a_bad_imgsz_is_one_line_with_the_value_and_the_rule(
    workdir: Path, imgsz: str, shown: str
) -> None:
    text = GOOD.replace("{path: model.onnx}", f"{{path: model.onnx, imgsz: {imgsz}}}")
    [line] = errors_of(workdir, text)
    assert line.endswith(
        "/pipelines.yaml:3: pipelines[0].model.imgsz: must be an integer in [32, 4096] or "
        f"[height, width] of two such integers, got {shown}"
    ), line


@pytest.mark.parametrize(
    "sink",
    [
        "{type: jsonl, path: /proc/out.jsonl}",
        "{type: video, path: /proc/out.mp4}",
        "{type: clips, directory: /proc/vstream-clips}",
    ],
)
def test_validate_refuses_an_output_that_serve_could_not_open(workdir: Path, sink: str) -> None:
    """``/proc`` is no place for output, though ``os.access`` tells root it is writable."""
    config = write_config(workdir, GOOD.replace("{type: jsonl, path: out.jsonl}", sink))
    done = run_cli("validate", config, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pipelines[0].sinks[0]" in done.stderr
    assert "is under /proc: no place for output" in done.stderr, done.stderr


def test_every_problem_is_reported(workdir: Path) -> None:
    text = GOOD.replace("clip.mp4", "nothere.mp4").replace("out.jsonl", "out.jsonl, qos: 1")
    lines = errors_of(workdir, text)
    assert len(lines) == 2
    assert "sources[0].uri: video file not found" in lines[0] and ":6:" in lines[0]
    assert "sinks[0].qos: unknown key 'qos'" in lines[1] and ":8:" in lines[1]


def test_environment_variables_are_interpolated(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAM_PASSWORD", "p:w{x}$'")
    monkeypatch.delenv("CAM_HOST", raising=False)
    text = GOOD.replace("clip.mp4", "rtsp://admin:${CAM_PASSWORD}@${CAM_HOST:-10.0.0.9}/live")
    config = load_config(write_config(workdir, text))
    assert config.pipelines[0].sources[0].uri == "rtsp://admin:p:w{x}$'@10.0.0.9/live"

    monkeypatch.delenv("CAM_PASSWORD")
    (line,) = errors_of(workdir, text)
    assert line == (
        f"{workdir / 'pipelines.yaml'}:6: pipelines[0].sources[0].uri: environment variable "
        "CAM_PASSWORD is not set (write ${CAM_PASSWORD:-default} for a default)"
    )


@pytest.mark.parametrize("secret", ["hunter2hunter2", "hunter2 with/space#"])
def test_secrets_are_not_shown_in_errors(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.setenv("SECRET", secret)
    text = GOOD.replace("clip.mp4", "rtsp://admin:${SECRET}@cam:bad/live")
    (line,) = errors_of(workdir, text)
    assert "hunter2" not in line and "rtsp://***@cam:bad/live" in line


def test_secret_settings_are_never_quoted(workdir: Path) -> None:
    text = GOOD.replace("pipelines:", "server:\n  token: [s3cr3t-token]\npipelines:").replace(
        "{type: jsonl, path: out.jsonl}", "{type: mqtt, host: h, password: {p: s3cr3t}}"
    )
    lines = errors_of(workdir, text)
    assert len(lines) == 2 and not any("s3cr3t" in line for line in lines)
    assert "server.token: Input should be a valid string" in lines[0]


def test_a_source_from_the_api_gets_the_same_checks(workdir: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_source({"id": "x", "uri": "nope.mp4", "fps": 3}, base_dir=workdir)
    assert caught.value.lines() == [
        f"uri: video file not found: {workdir / 'nope.mp4'}",
        "fps: unknown key 'fps'; expected one of: id, uri, detect_every, detect_fps, "
        "adapt_detect_every, motion, decoder, decoder_threads, "
        "pixel_format, policy, queue_size, max_behind_seconds, reconnect, rtsp_transport, "
        "input_format, "
        "open_timeout_seconds, read_timeout_seconds, realtime, loop, start_seconds, end_seconds, "
        "stride",
    ]


def test_empty_optional_settings_mean_unset(workdir: Path) -> None:
    text = GOOD.replace("pipelines:", "server:\n  token: ''\npipelines:").replace(
        "{type: jsonl, path: out.jsonl}", "{type: mqtt, host: h, username: '', password: ''}"
    )
    config = parse_config(text, base_dir=workdir)
    assert config.server.token is None and config.pipelines[0].sinks[0].username is None


def test_validate_command_lists_every_error_and_exits_2(workdir: Path) -> None:
    bad = write_config(workdir, GOOD.replace("model.onnx", "gone.onnx").replace("cam", "c d"))
    result = run_cli("validate", bad, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr_lines == [
        f"vstream: {bad}:3: pipelines[0].model.path: model file not found: {workdir / 'gone.onnx'}",
        f"vstream: {bad}:5: pipelines[0].sources[0].id: String should match pattern "
        "'^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$' (got 'c d')",
    ]
    good = run_cli("validate", write_config(workdir, GOOD, "good.yaml"), timeout=120)
    assert good.returncode == 0 and "OK: 1 pipeline(s), 1 source(s), 1 sink(s)" in good.stdout


def test_schema_command_prints_the_json_schema() -> None:
    result = run_cli("schema", timeout=120)
    assert result.returncode == 0, result.stderr
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert schema["required"] == ["pipelines"] and schema["additionalProperties"] is False
    sink_types = {
        definition["properties"]["type"]["const"]
        for definition in schema["$defs"].values()
        if "type" in definition.get("properties", {})
    }
    assert sink_types == {"jsonl", "stdout", "mqtt", "redis", "webhook", "video", "clips"}


def test_run_command_runs_every_pipeline_until_files_are_done(workdir: Path) -> None:
    write_video(workdir / "other.mp4", frames=8, width=160, height=120)
    config = write_config(
        workdir,
        GOOD.replace("    sinks:", "      - {id: second, uri: other.mp4}\n    sinks:")
        + "  - name: copy\n    model: {path: model.onnx}\n"
        "    sources: [{id: third, uri: clip.mp4, stride: 3}]\n"
        "    sinks: [{type: stdout}]\n",
    )
    result = run_cli("run", config, timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (workdir / "out.jsonl").read_text().splitlines()]
    for stream, count in (("cam", 12), ("second", 8)):
        frames = [r["frame"] for r in records if r["stream"] == stream]
        assert frames == list(range(count))
    stdout = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["frame"] for r in stdout] == [0, 3, 6, 9]
    assert all(r["detections"][0]["label"] == "a" for r in records + stdout)
    assert "cam: 12 frames, 12 detections" in result.stderr


def test_run_command_refuses_options_that_belong_in_the_config(workdir: Path) -> None:
    config = write_config(workdir, GOOD)
    result = run_cli("run", config, "--conf", "0.5", "--batch", "2", timeout=120)
    assert result.returncode == 2
    assert result.stderr_lines == [
        "vstream: error: --batch, --conf cannot be combined with a config file: "
        "set them in the config"
    ]


def test_run_command_refuses_its_own_flags_with_a_config(workdir: Path) -> None:
    config = write_config(workdir, GOOD)
    result = run_cli("run", config, "--track", "-o", "x.jsonl", "--conf", "0.5", timeout=120)
    assert result.returncode == 2
    assert result.stderr_lines == [
        "vstream: error: --output, --track, --conf cannot be combined with a config file: "
        "set them in the config"
    ]


COUNTING = GOOD.replace(
    "    sinks:",
    """    runtime: {device: cpu}
    analytics:
      lines:
        - {name: gate, start: [0, 100], end: [320, 100], classes: [1, 7]}
        - {name: all, start: [0, 200], end: [320, 200]}
      zones:
        - {name: pen, points: [[0, 0], [100, 0], [100, 100]], classes: [0]}
        - {name: yard, points: [[0, 0], [300, 0], [300, 300]], classes: [2, 3]}
    sinks:""",
)


def test_line_and_zone_classes_the_model_lacks_are_refused_naming_them(workdir: Path) -> None:
    """A class id the model does not have was accepted, and its line or zone counted
    nothing, silently; as secondary models' ``on.classes`` are, they are checked against
    the model's classes by ``validate`` and when the pipeline is built."""
    from vstream.engine.pipeline import Pipeline
    from vstream.errors import ModelError

    config = write_config(workdir, COUNTING)
    refused = [
        ("lines[0]", "line 'gate': classes [7]"),
        ("zones[1]", "zone 'yard': classes [2, 3]"),
    ]
    which = "are not classes of the model, which has 0 a, 1 b"
    done = run_cli("validate", config, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr_lines == [
        f"vstream: {config}: pipelines[0].analytics.{where}: {what} {which}"
        for where, what in refused
    ]
    with pytest.raises(ModelError) as error:
        Pipeline.from_config(load_config(config).pipelines[0])
    assert str(error.value) == "pipeline main: " + "; ".join(
        f"analytics.{where}: {what} {which}" for where, what in refused
    )
    fixed = write_config(workdir, COUNTING.replace("1, 7", "1").replace("2, 3", "1"), "ok.yaml")
    assert run_cli("validate", fixed, timeout=120).returncode == 0


def test_classes_to_keep_the_model_lacks_are_refused_naming_them(workdir: Path) -> None:
    """``postprocess.classes: [0, 5]`` on a two-class model kept class 0 and nothing of 5,
    silently (a typo, or ids of another model's numbering)."""
    from vstream.engine.pipeline import Pipeline
    from vstream.errors import ModelError

    text = GOOD.replace(
        "    sinks:", "    runtime: {device: cpu}\n    postprocess: {classes: [0, 5]}\n    sinks:"
    )
    config = write_config(workdir, text)
    done = run_cli("validate", config, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr_lines == [
        f"vstream: {config}: pipelines[0].postprocess.classes: [5] are not classes of the model, "
        "which has 0 a, 1 b"
    ]
    with pytest.raises(ModelError, match=r"classes to keep \[5\] .* which has 0 a, 1 b$"):
        Pipeline.from_config(load_config(config).pipelines[0])
    fixed = write_config(workdir, text.replace("[0, 5]", "[1]"), "ok.yaml")
    assert run_cli("validate", fixed, timeout=120).returncode == 0


@pytest.mark.parametrize(
    ("section", "where"),
    [
        (
            "analytics: {lines: [{name: gate, start: [0, 50], end: [300, 50], classes: [1, 2]}]}",
            "analytics.lines[0]: line 'gate': classes",
        ),
        (
            "analytics: {zones: [{name: pen, points: [[0, 0], [200, 0], [200, 200]], "
            "classes: [2]}]}",
            "analytics.zones[0]: zone 'pen': classes",
        ),
        (
            "secondary: [{name: colour, path: vstream://colour.onnx, on: {classes: [2]}}]",
            "secondary[0]: secondary 'colour': on.classes",
        ),
    ],
    ids=["line", "zone", "secondary"],
)
def test_classes_postprocess_drops_are_refused_where_a_filter_names_them(
    section: str, where: str
) -> None:
    """``postprocess.classes: [0, 1]`` with a line counting class 2: the line never saw one,
    and counted nothing of it, silently."""
    text = f"""
pipelines:
  - name: main
    model: {{path: vstream://demo.onnx}}
    postprocess: {{classes: [0, 1]}}
    {section}
    sinks: [{{type: stdout}}]
"""
    with pytest.raises(ConfigError) as error:
        parse_config(text)
    assert str(error.value).endswith(
        f"pipelines[0]: {where} [2] are never detected: postprocess.classes keeps [0, 1] alone"
    ), str(error.value)
    parse_config(text.replace("[0, 1]", "[0, 1, 2]"))


MERGED = """
pipelines:
  - name: main
    model: {path: model.onnx}
    sources:
      - &cam {id: cam1, uri: clip.mp4, loop: false, queue_size: 2}
      - OVERRIDE
    sinks:
      - {type: jsonl, path: out.jsonl}
"""


@pytest.mark.parametrize(
    "item",
    [
        "<<: *cam\n        id: cam2\n        loop: true",
        "id: cam2\n        <<: *cam\n        loop: true",
        "{<<: [*cam, {id: cam9}], id: cam2, loop: true}",
    ],
    ids=["after", "before", "list"],
)
def test_a_key_written_beside_a_merge_wins_as_pyyaml_reads_it(workdir: Path, item: str) -> None:
    """``- <<: *cam`` then ``id: cam2`` was refused as a duplicate key: in YAML's merge the
    keys written win, wherever they stand (PyYAML's own reading is the oracle)."""
    text = MERGED.replace("OVERRIDE", item)
    written = yaml.safe_load(text)["pipelines"][0]["sources"]
    assert written[1] == {"id": "cam2", "uri": "clip.mp4", "loop": True, "queue_size": 2}
    sources = parse_config(text, base_dir=workdir).pipelines[0].sources
    assert [(s.id, s.loop, s.queue_size) for s in sources] == [
        (s["id"], s["loop"], s["queue_size"]) for s in written
    ]


def test_of_merged_mappings_the_first_listed_wins_and_of_two_merges_the_later(
    workdir: Path,
) -> None:
    """``<<: [*a, *b]``: a key of ``*a`` wins (yaml.org/type/merge.html; PyYAML 6.0.4 gives
    ``*b``'s for keys of two characters or more, yaml/pyyaml#953, so the spec is the
    oracle). Two ``<<`` keys in one mapping: the later wins, as PyYAML reads it."""
    text = MERGED.replace(
        "- OVERRIDE",
        "- &b {id: cam2, uri: clip.mp4, queue_size: 3, loop: true}\n"
        "      - {<<: [*cam, *b], id: cam3}\n"
        "      - {<<: *cam, <<: *b, id: cam4}",
    )
    assert yaml.safe_load(text)["pipelines"][0]["sources"][3]["queue_size"] == 3
    sources = parse_config(text, base_dir=workdir).pipelines[0].sources
    assert [(s.id, s.queue_size, s.loop) for s in sources[2:]] == [
        ("cam3", 2, False),
        ("cam4", 3, True),
    ]


def test_a_key_written_before_a_merge_keeps_its_line(workdir: Path) -> None:
    """The mapping merged after a key gave that key the anchor's line: an error in the value
    written pointed at the line of the value it had replaced."""
    text = MERGED.replace("OVERRIDE", "queue_size: 0\n        id: cam2\n        <<: *cam")
    assert errors_of(workdir, text) == [
        f"{workdir / 'pipelines.yaml'}:6: pipelines[0].sources[1].queue_size: "
        "must be in [1, 64], got 0"
    ]


@pytest.mark.parametrize("merged", ["5", "[*cam, 5]", ""], ids=["scalar", "in-list", "empty"])
def test_a_merge_of_something_not_a_mapping_is_one_line(workdir: Path, merged: str) -> None:
    """``<<: 5`` was ignored without a word; PyYAML refuses it."""
    text = MERGED.replace("OVERRIDE", f"<<: {merged}\n        id: cam2\n        uri: clip.mp4")
    with pytest.raises(yaml.YAMLError, match="for merging"):
        yaml.safe_load(text)
    shown = "'5'" if merged else "''"
    assert errors_of(workdir, text) == [
        f"{workdir / 'pipelines.yaml'}:6: pipelines[0].sources[1]: cannot merge {shown}: "
        "<< takes a mapping or a list of mappings"
    ]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        ("['']", "class_names[0]: String should have at least 1 character"),
        ("[a, 2]", "class_names[1]: Input should be a valid string (got 2)"),
        ("{x: a}", "class_names.x: String should match pattern '^\\d{1,6}$' (got 'x')"),
        ("{0: a, 1: ''}", "class_names.1: String should have at least 1 character"),
    ],
    ids=["empty-name", "number", "key", "empty-value"],
)
def test_a_class_names_error_is_one_line_naming_the_key(
    workdir: Path, names: str, expected: str
) -> None:
    """``class_names`` is a list or a mapping: each error came once per kind, its path
    holding pydantic's names of them (``class_names.list[function-after[_printable(),
    constrained-str]][0]``), and the kind the value was not said it should be one."""
    text = GOOD.replace("{path: model.onnx}", f"{{path: model.onnx, class_names: {names}}}")
    assert errors_of(workdir, text) == [
        f"{workdir / 'pipelines.yaml'}:3: pipelines[0].model.{expected}"
    ]


@pytest.mark.parametrize(
    ("form", "name"),
    [
        ("${CAM_PASSWORD-fallback}", "CAM_PASSWORD"),
        ("${CAM_PASSWORD:fallback}", "CAM_PASSWORD"),
        ("${CAM_PASSWORD:?must be set}", "CAM_PASSWORD"),
        ("${CAM_PASSWORD", "CAM_PASSWORD"),
        ("${CAM_PASSWORD:-${OTHER}}", "CAM_PASSWORD"),
        ("${ CAM_PASSWORD }", None),
    ],
)
def test_an_interpolation_vstream_does_not_read_is_refused(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, form: str, name: str | None
) -> None:
    """Any ``${`` but ``${VAR}`` and ``${VAR:-default}`` was left as it stood, and became
    the camera's password; it is refused now, naming the variable and no more of it."""
    monkeypatch.delenv("CAM_PASSWORD", raising=False)
    text = GOOD.replace("clip.mp4", f"'rtsp://viewer:{form}@10.0.0.21/live'")
    example = name or "NAME"
    assert errors_of(workdir, text) == [
        f"{workdir / 'pipelines.yaml'}:6: pipelines[0].sources[0].uri: unsupported "
        f"interpolation ${{{name or ''}...}}: write ${{{example}}} or ${{{example}:-default}}, "
        "or $${ for a literal ${"
    ]


def test_a_dollar_brace_is_written_as_two_dollars(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAM_PASSWORD", "pa${ss")  # a value is never read for ${
    text = GOOD.replace("clip.mp4", "'rtsp://viewer:${CAM_PASSWORD}@cam/$${x}'")
    uri = parse_config(text, base_dir=workdir).pipelines[0].sources[0].uri
    assert uri == "rtsp://viewer:pa${ss@cam/${x}"


NUMBERS = """
server:
  port: ${PORT}
  token: ${TOKEN:-}
processes: ${PROCESSES:-1}
pipelines:
  - name: main
    model: {path: model.onnx}
    sources:
      - id: ${CAM_ID}
        uri: clip.mp4
        loop: ${LOOP}
        max_behind_seconds: ${BEHIND:-2.5}
    sinks:
      - {type: mqtt, host: h, password: '${MQTT_PASSWORD}'}
"""


def test_a_whole_variable_gives_a_number_or_boolean_where_the_key_takes_one(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``port: ${PORT}`` was refused whatever PORT held ("must be an integer, got '9090'"):
    a value from the environment is text. It reads now as YAML reads its text in its place,
    where the key refuses text; a text key keeps the text (a password of digits)."""
    env = {
        "PORT": "9090",
        "TOKEN": "12345678",
        "PROCESSES": "auto",
        "CAM_ID": "0042",
        "LOOP": "true",
        "MQTT_PASSWORD": "123456",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = parse_config(NUMBERS, base_dir=workdir)
    source = config.pipelines[0].sources[0]
    assert (config.server.port, config.processes, source.loop) == (9090, "auto", True)
    assert (source.id, source.max_behind_seconds) == ("0042", 2.5)
    token = config.server.token
    assert token is not None and token.get_secret_value() == "12345678"
    sink = config.pipelines[0].sinks[0]
    assert sink.password.get_secret_value() == "123456"

    monkeypatch.setenv("PORT", "99999")
    monkeypatch.setenv("LOOP", "1")
    monkeypatch.setenv("PROCESSES", "4")
    assert [line.split(": ", 1)[1] for line in errors_of(workdir, NUMBERS)] == [
        "server.port: must be in [0, 65535], got 99999",
        "pipelines[0].sources[0].loop: Input should be a valid boolean (got '1')",
    ]


def test_an_empty_classes_list_is_refused_from_yaml_and_from_the_flag(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``classes: []`` (or ``--classes "$IDS"`` with IDS empty) kept no class: every frame
    had 0 detections, and nothing said why."""
    from vstream.cli import main

    rule = "an empty list keeps no class: list at least one class id, or leave it out to keep "
    text = GOOD.replace("    sinks:", "    postprocess: {classes: []}\n    sinks:")
    assert errors_of(workdir, text) == [
        f"{workdir / 'pipelines.yaml'}:7: pipelines[0].postprocess.classes: {rule}every class"
    ]
    source, model = str(workdir / "clip.mp4"), str(workdir / "model.onnx")
    assert main(["run", "--source", source, "--model", model, "--classes", ""]) == 2
    assert capsys.readouterr().err.splitlines() == [f"vstream: error: --classes: {rule}every class"]


@pytest.mark.parametrize(
    ("section", "key"),
    [
        (
            "    analytics: {lines: [{name: g, start: [0, 0], end: [9, 9], classes: []}]}",
            "analytics.lines[0].classes",
        ),
        ("    postprocess: {classes: [1, 1]}", "postprocess.classes"),
    ],
    ids=["line-empty", "postprocess-twice"],
)
def test_class_ids_are_one_rule_wherever_they_are_given(
    workdir: Path, section: str, key: str
) -> None:
    """The postprocess's, a line's, a zone's and a secondary model's ``on.classes`` are one
    type: none empty, none twice (the postprocess took both, a secondary model an empty
    list, and a line's empty list had pydantic's words)."""
    text = GOOD.replace("    sinks:", f"{section}\n    sinks:")
    (line,) = errors_of(workdir, text)
    assert f"pipelines[0].{key}: " in line
    assert "an empty list keeps no class" in line or "class ids listed twice: [1]" in line
