"""Bundled files by name (``vstream://``), the shipped configs from any folder, and what a
new user meets first: ``--version``, flags' help without a config, the outputs line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import run_cli

from vstream import assets
from vstream.config import ConfigError, parse_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
EXAMPLE_ENV = {"CAM_USER": "viewer", "CAM_PASSWORD": "pa55word"}


def test_the_shipped_configs_work_copied_to_an_empty_folder(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copied, or installed, the configs name the bundled files as vstream://, not by
    ../vstream/assets; their outputs land beside them (out/), never in the folder above."""
    from vstream.cli import main

    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(CONFIGS, elsewhere / "configs")
    for name, value in EXAMPLE_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(elsewhere)
    copied = sorted((elsewhere / "configs").glob("*.yaml"))
    assert {p.name for p in copied} >= {"file.yaml", "dashboard.yaml", "cascade.yaml"}
    for config in copied:
        assert "../" not in config.read_text(), config.name
        assert main(["validate", str(config)]) == 0, capsys.readouterr().err

    done = run_cli("run", "configs/file.yaml", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    records = elsewhere / "configs" / "out" / "detections.jsonl"
    assert [json.loads(line)["frame"] for line in records.read_text().splitlines()] == list(
        range(200)
    )
    assert sorted(p.name for p in tmp_path.rglob("*.jsonl")) == ["detections.jsonl"]
    last = done.stderr.strip().splitlines()[-1]
    assert last == "vstream: outputs: records configs/out/detections.jsonl"


def test_bundled_names_resolve_in_every_path_that_reads_a_file(tmp_path: Path) -> None:
    text = f"""
pipelines:
  - name: demo
    model: {{path: vstream://demo.onnx}}
    secondary: [{{name: colour, path: vstream://colour.onnx}}]
    sources: [{{id: sample, uri: vstream://sample.mp4}}]
    sinks: [{{type: jsonl, path: {tmp_path / "out.jsonl"}}}]
"""
    (pipeline,) = parse_config(text, base_dir=tmp_path).pipelines
    assert pipeline.model.path == str(assets.DEMO_MODEL)
    assert pipeline.secondary[0].path == str(assets.COLOUR_MODEL)
    assert pipeline.sources[0].uri == str(assets.SAMPLE_VIDEO)

    for old, new, message in [
        ("vstream://sample.mp4", "vstream://nope.mp4", "uri: no bundled file "
         "'vstream://nope.mp4'; there are vstream://demo.onnx, vstream://colour.onnx"),
        ("vstream://demo.onnx", "vstream://../../x.onnx", "no bundled file "
         "'vstream://../../x.onnx'"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as caught:
            parse_config(text.replace(old, new), base_dir=tmp_path)
        assert message in str(caught.value)
    # A bundled name is a file to read, never a place to write.
    with pytest.raises(ConfigError, match="vstream:// names a bundled file to read, not a place"):
        parse_config(text.replace(str(tmp_path / "out.jsonl"), "vstream://x.jsonl"))


def test_run_flags_take_zones_and_bundled_names_relative_to_the_working_folder(
    capsys,
) -> None:
    from vstream.cli import build_parser, main
    from vstream.cli.options import RunExtras, build_run_config
    from vstream.cli.run import _FLAGS

    args = build_parser().parse_args(
        ["run", "--source", "vstream://sample.mp4", "--model", "vstream://demo.onnx",
         "--zone", "corner=0,0,200,0,200,150,0,150", "--zone", "right=320,0,640,0,640,360"]
    )  # fmt: skip
    extras = RunExtras(zones=tuple(args.zone))
    config = build_run_config(
        args, _FLAGS, source=args.source, output=None, model=assets.DEMO_MODEL, extras=extras
    )
    (pipeline,) = config.pipelines
    assert [z.name for z in pipeline.analytics.zones] == ["corner", "right"]
    assert pipeline.analytics.zones[1].points == [(320, 0), (640, 0), (640, 360)]
    assert pipeline.sources[0].uri == str(assets.SAMPLE_VIDEO)
    assert pipeline.sources[0].id == "sample"

    with pytest.raises(SystemExit) as exited:
        main(["run", "--zone", "dock=0,0,1,1"])
    assert exited.value.code == 2
    assert "at least 6 (3 corners x, y), got 4" in capsys.readouterr().err

    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"vstream {__import__('vstream').__version__}\n"

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--model MODEL ONNX file, relative to the working folder, or vstream://NAME" in shown
    assert "(default: vstream://demo.onnx, the bundled demo detector)" in shown
    assert "relative to the config file" not in shown
