"""Secondary-model options: the YAML, and every bad input refused with one line naming it."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers import run_cli, tiny_detector, write_video
from secondary_models import batch_of_one_model, inputless_model, linear_model

from vstream.config import ConfigError, parse_config
from vstream.config.secondary import SecondaryConfig, check_on_classes
from vstream.errors import ModelError
from vstream.inference.secondary_spec import check_secondary


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    tiny_detector(tmp_path / "model.onnx")
    write_video(tmp_path / "clip.mp4", frames=4)
    linear_model(tmp_path / "colour.onnx", np.eye(3), metadata={"labels": '["r", "g", "b"]'})
    return tmp_path


def config_text(secondary: str) -> str:
    items = textwrap.indent(textwrap.dedent(secondary).strip(), "      ")
    return (
        "pipelines:\n"
        "  - name: main\n"
        "    model: {path: model.onnx}\n"
        f"    secondary:\n{items}\n"
        "    sources: [{id: cam, uri: clip.mp4}]\n"
        "    sinks: [{type: stdout}]\n"
    )


def parse(workdir: Path, secondary: str):
    return parse_config(config_text(secondary), source="p.yaml", base_dir=workdir)


def test_a_cascade_reads_from_yaml(workdir: Path) -> None:
    config = parse(
        workdir,
        """
        - name: colour
          path: colour.onnx
          on: {classes: [0, 1], min_size: 32}
          labels: [red, green, blue]
          reinfer_seconds: 0.5
          max_batch: 8
        """,
    )
    (model,) = config.pipelines[0].secondary
    assert model.path == str(workdir / "colour.onnx")
    assert model.on.classes == [0, 1] and model.on.min_size == 32
    assert model.kind == "classifier" and model.labels == ["red", "green", "blue"]
    assert (model.reinfer_seconds, model.regrow, model.max_batch) == (0.5, 2.0, 8)


def test_no_secondary_is_an_empty_list(workdir: Path) -> None:
    text = config_text("[]")
    assert parse_config(text, base_dir=workdir).pipelines[0].secondary == []


@pytest.mark.parametrize(
    ("secondary", "expected"),
    [
        ("- {name: c, path: missing.onnx}", "secondary model file not found"),
        ("- {name: c, path: colour.onnx, kind: colour}", "'classifier' or 'embedding'"),
        ("- {name: c, path: colour.onnx, on: {classes: [2, 2]}}", "class ids listed twice: [2]"),
        ("- {name: c, path: colour.onnx, on: {min_size: -1}}", "got -1"),
        ("- {name: c, path: colour.onnx, labels: [a, b, a]}", "labels listed twice: ['a']"),
        ("- {name: c, path: colour.onnx, max_batch: 0}", "must be in [1, 256], got 0"),
        ("- {name: c, path: colour.onnx, regrow: 0.5}", "got 0.5"),
        ("- {name: c, path: colour.onnx, std: [1, 0, 1]}", "got 0"),
        ("- {name: c, path: colour.onnx, kind: embedding, labels: [a]}", "labels apply to a"),
        ("- {name: c, path: colour.onnx, keep_embedding: true}", "applies to kind embedding"),
        (
            "- {name: c, path: colour.onnx, threshold: 0.9}",
            "c: threshold 0.9 applies with multi_label: true; without it a classifier gives "
            "its best label whatever its score",
        ),
        ("- {name: c, path: colour.onnx, kind: embedding, threshold: 0.9}", "threshold apply"),
        ("- {name: c, path: colour.onnx, colour: red}", "unknown key 'colour'"),
        ("- {name: c, path: colour.onnx, crop: {round: up}}", "'nearest', 'floor' or 'subpix"),
        ("- {name: c, path: colour.onnx, crop: {mode: circle}}", "'stretch' or 'square'"),
        ("- {name: c, path: colour.onnx, crop: {edge: 2}}", "unknown key 'edge'"),
        ("- {name: c, path: colour.onnx}\n- {name: c, path: colour.onnx}", "both named 'c'"),
    ],
)
def test_bad_options_name_the_key_and_the_value(
    workdir: Path, secondary: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(workdir, secondary)
    message = str(caught.value)
    assert expected in message, message
    assert message.startswith("p.yaml:") and "pipelines[0].secondary" in message
    assert "\n" not in message


def secondary(workdir: Path, **options: object) -> SecondaryConfig:
    return SecondaryConfig.model_validate(
        {"name": "c", "path": "colour.onnx", **options}, context={"base_dir": workdir}
    )


def test_the_model_file_resolves_labels_and_preprocessing(workdir: Path) -> None:
    linear_model(
        workdir / "meta.onnx",
        np.ones((3, 2)),
        imgsz=("h", "w"),
        metadata={
            "labels": '["yes", "no"]',
            "imgsz": "[24, 40]",
            "mean": "[0.5, 0.5, 0.5]",
            "std": "[0.25, 0.25, 0.25]",
            "crop": "square",
            "crop_round": "floor",
        },
    )
    spec = check_secondary(secondary(workdir, path="meta.onnx"))
    assert spec.labels == ("yes", "no") and spec.output_size == 2
    assert spec.input_size == (24, 40) and spec.crop == "square" and spec.resize == "linear"
    assert spec.crop_round == "floor"
    assert spec.mean == (0.5,) * 3 and spec.std == (0.25,) * 3 and spec.input_range == 1
    assert spec.outputs == "logits"
    # Options win over the metadata; a word alone is the crop's mode.
    spec = check_secondary(secondary(workdir, path="meta.onnx", imgsz=32, crop="stretch"))
    assert spec.input_size == (32, 32) and (spec.crop, spec.crop_round) == ("stretch", "floor")
    spec = check_secondary(secondary(workdir, path="meta.onnx", crop={"round": "subpixel"}))
    assert (spec.crop, spec.crop_round) == ("square", "subpixel")
    # Without either, a whole-pixel cut rounded to the nearest pixel (supervision's crop_image).
    assert check_secondary(secondary(workdir)).crop_round == "nearest"


def test_a_crop_round_in_the_metadata_that_is_no_rule_is_refused(workdir: Path) -> None:
    linear_model(workdir / "odd.onnx", np.eye(3), metadata={"crop_round": "ceil"})
    with pytest.raises(ModelError, match="metadata crop_round='ceil' is not one of nearest, fl"):
        check_secondary(secondary(workdir, path="odd.onnx"))


@pytest.mark.parametrize(
    ("build", "options", "expected"),
    [
        (
            lambda p: linear_model(p, np.eye(3), metadata={"labels": '["a", "b"]'}),
            {},
            "the metadata's labels name 2 classes but the model gives 3 values per crop",
        ),
        (
            lambda p: linear_model(p, np.eye(3)),
            {"labels": ["a", "b", "c", "d"]},
            "labels name 4 classes but the model gives 3 values per crop",
        ),
        (
            lambda p: linear_model(p, np.eye(1), channels=1),
            {},
            "takes one image input [batch, 3, height, width]; this model takes images "
            "tensor(float) ['batch', 1, 16, 16]",
        ),
        (
            lambda p: linear_model(p, np.eye(3)),
            {"imgsz": 32},
            "takes a fixed 16x16 input; imgsz 32x32 does not fit",
        ),
        (
            lambda p: linear_model(p, np.eye(3), imgsz=("h", "w")),
            {},
            "the input size is dynamic and not in the metadata; set imgsz",
        ),
        (
            lambda p: linear_model(p, np.eye(3), metadata={"kind": "embedding"}),
            {},
            "the model's metadata says it is of kind embedding, configured as kind classifier",
        ),
        pytest.param(
            lambda p: batch_of_one_model(p, declared=True, batch=2),
            {},
            "input 'images' [2, 3, 16, 16] and output 'output0' [1, 3] fix different batches",
            id="two-fixed-batches",
        ),
        pytest.param(
            inputless_model,
            {},
            "a secondary model takes one image input [batch, 3, height, width]; "
            "this model takes no input",
            id="no-input",
        ),
        pytest.param(
            lambda p: linear_model(p, np.eye(3), metadata={"labels": '["car", "car", "bus"]'}),
            {},
            "bad.onnx: metadata labels listed twice: ['car']",
            id="labels-twice",
        ),
        pytest.param(
            lambda p: linear_model(p, np.eye(3), imgsz=("h", "w"), metadata={"imgsz": "[0, 16]"}),
            {},
            "the input size is dynamic and metadata imgsz='[0, 16]' is not one integer or "
            "[height, width] above 0; set imgsz",
            id="imgsz-zero",
        ),
        pytest.param(
            lambda p: linear_model(p, np.eye(3), imgsz=("h", "w"), metadata={"imgsz": "True"}),
            {},
            "metadata imgsz='True' is not one integer or [height, width] above 0",
            id="imgsz-bool",
        ),
        pytest.param(
            lambda p: linear_model(p, np.eye(3), metadata={"mean": "[1e999, 0, 0]"}),
            {},
            "bad.onnx: metadata mean='[1e999, 0, 0]': each value must be a finite number, "
            "got inf (allowed: [-1000, 1000])",
            id="mean-infinite",
        ),
        pytest.param(
            lambda p: linear_model(p, np.eye(3), metadata={"std": "[2000, 1, 1]"}),
            {},
            "bad.onnx: metadata std='[2000, 1, 1]': each value must be in (0, 1000], got 2000",
            id="std-too-large",
        ),
    ],
)
def test_a_model_that_does_not_fit_is_refused_in_one_line(
    workdir: Path, build, options: dict, expected: str
) -> None:
    build(workdir / "bad.onnx")
    with pytest.raises(ModelError) as caught:
        check_secondary(secondary(workdir, path="bad.onnx", **options))
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_that_is_no_model_is_refused(workdir: Path) -> None:
    (workdir / "junk.onnx").write_bytes(b"not a model")
    with pytest.raises(ModelError, match="cannot load secondary model"):
        check_secondary(secondary(workdir, path="junk.onnx"))


def test_on_classes_are_checked_against_the_detector(workdir: Path) -> None:
    model = secondary(workdir, on={"classes": [0, 2, 7]})
    check_on_classes(model, {0: "car", 2: "bus", 7: "truck"})
    check_on_classes(model, [])  # a detector without names cannot be checked
    with pytest.raises(ModelError) as caught:
        check_on_classes(model, ["car", "bus"])
    assert str(caught.value) == (
        "secondary 'c': on.classes [2, 7] are not classes of the detector, which has 0 car, 1 bus"
    )


def test_tracking_appearance_names_an_embedding_model(workdir: Path) -> None:
    text = config_text("- {name: look, path: colour.onnx, kind: embedding}").replace(
        "    sources:",
        "    analytics: {tracking: {appearance: look, appearance_weight: 0.4}}\n    sources:",
    )
    tracking = parse_config(text, base_dir=workdir).pipelines[0].analytics.tracking
    assert (tracking.appearance, tracking.appearance_weight) == ("look", 0.4)
    wrong = config_text("- {name: look, path: colour.onnx}").replace(
        "    sources:", "    analytics: {tracking: {appearance: look}}\n    sources:"
    )
    with pytest.raises(
        ConfigError,
        match="appearance 'look' must name a secondary model of "
        "kind embedding; this pipeline has none",
    ):
        parse_config(wrong, base_dir=workdir)


def test_an_embedding_model_neither_tracked_nor_kept_is_refused(workdir: Path) -> None:
    """Its vectors would go nowhere, read on every object for nothing."""
    unused = "- {name: c, path: colour.onnx}\n- {name: look, path: colour.onnx, kind: embedding}"
    with pytest.raises(ConfigError) as caught:
        parse(workdir, unused)
    assert str(caught.value).endswith(
        "secondary[1]: secondary 'look' is an embedding read for nothing: name it in "
        "analytics.tracking.appearance, or set keep_embedding: true"
    )
    assert "\n" not in str(caught.value)
    kept = "- {name: look, path: colour.onnx, kind: embedding, keep_embedding: true}"
    assert parse(workdir, kept).pipelines[0].secondary[0].keep_embedding
    tracked = config_text("- {name: look, path: colour.onnx, kind: embedding}").replace(
        "    sources:", "    analytics: {tracking: {appearance: look}}\n    sources:"
    )
    assert parse_config(tracked, base_dir=workdir).pipelines[0].analytics.tracking.appearance


def test_vstream_validate_checks_each_secondary_model_in_one_line(workdir: Path) -> None:
    linear_model(workdir / "two.onnx", np.eye(3)[:, :2])
    good = "- {name: colour, path: colour.onnx, on: {classes: [0, 1]}}"
    (workdir / "good.yaml").write_text(config_text(good))
    bad = (
        "- {name: colour, path: colour.onnx, on: {classes: [0, 5]}}\n"
        "- {name: kind, path: two.onnx, labels: [x, y, z]}"
    )
    (workdir / "bad.yaml").write_text(config_text(bad))
    assert run_cli("validate", workdir / "good.yaml").returncode == 0
    result = run_cli("validate", workdir / "bad.yaml")
    assert result.returncode == 2
    assert result.stderr_lines == [
        f"vstream: {workdir / 'bad.yaml'}: pipelines[0].secondary[0]: secondary 'colour': "
        "on.classes [5] are not classes of the detector, which has 0 a, 1 b",
        f"vstream: {workdir / 'bad.yaml'}: pipelines[0].secondary[1]: two.onnx: labels name 3 "
        "classes but the model gives 2 values per crop",
    ]
