"""TensorRT through ONNX Runtime (``runtime.provider: tensorrt``), checked without a GPU.

What a session asks ONNX Runtime for (fp16, caches, shape profiles of the
buckets), the config's rules, and the one line when TensorRT cannot start:
its libraries missing here, or ORT failing the session for it. The GPU is
:mod:`fakes.fake_cuda`'s; ONNX Runtime is the real CPU wheel, with the GPU
wheel's compiled side stood in for by :class:`GpuWheelWithoutTensorrt`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import onnxruntime as ort
import pytest
import torch
from fakes.fake_cuda import FakeGpu
from helpers import model_session, tiny_detector
from onnx_models import scale_model
from onnxruntime.capi import onnxruntime_inference_collection as collection

from vstream import Detector, ModelError, VstreamError
from vstream.assets import DEMO_MODEL
from vstream.cli import main
from vstream.cli.options import RUN_SECTIONS, options
from vstream.config import ConfigError, load_config, parse_config
from vstream.config.model import tensorrt_cache
from vstream.doctor import environment
from vstream.doctor.providers import gpu_provider
from vstream.doctor.report import Failed
from vstream.inference import providers, session
from vstream.inference.model import ModelSpec, TensorSpec
from vstream.inference.providers import TENSORRT_LIBRARIES, tensorrt_options

GPU_WHEEL = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
"""What onnxruntime-gpu 1.31.1's ``get_available_providers()`` lists, libraries or not."""

IMAGE = "tensor(float)"
HEX16 = re.compile(r"[0-9a-f]{16}")


def spec_of(path: Path, image: tuple[Any, ...], *sizes: tuple[Any, ...]) -> ModelSpec:
    """A detector's interface as :func:`read_model_spec` gives it, ``path`` the file hashed."""
    size_inputs = tuple(TensorSpec("orig_target_sizes", "tensor(int64)", s) for s in sizes)
    return ModelSpec(path, TensorSpec("images", IMAGE, image), (), size_inputs=size_inputs)


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "det.onnx"
    path.write_bytes(b"weights, version 1")
    return path


# -- the provider's options ----------------------------------------------------------------------


def test_a_dynamic_batch_model_gets_one_profile_over_its_buckets_fp16_and_both_caches(
    model_file: Path, tmp_path: Path
) -> None:
    spec = spec_of(model_file, ("batch", 3, "height", "width"))
    cache = tmp_path / "cache"
    options = tensorrt_options(spec, (1, 2, 4, 8, 16, 32), (384, 640), cache, {})
    engines = Path(options.pop("trt_engine_cache_path"))
    assert options == {
        "trt_fp16_enable": "True",
        "trt_profile_min_shapes": "images:1x3x384x640",
        "trt_profile_opt_shapes": "images:32x3x384x640",
        "trt_profile_max_shapes": "images:32x3x384x640",
        "trt_engine_cache_enable": "True",
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(cache / "timing"),
    }
    assert engines.parent == cache / "engines" and engines.is_dir()
    assert engines.name.startswith("det-") and HEX16.fullmatch(engines.name[4:])
    assert (cache / "timing").is_dir()


def test_a_fixed_batch_model_gets_its_batch_and_a_static_one_no_profile(
    model_file: Path, tmp_path: Path
) -> None:
    sized = tensorrt_options(spec_of(model_file, (4, 3, "h", "w")), (4,), (64, 64), tmp_path, {})
    assert {sized[f"trt_profile_{k}_shapes"] for k in ("min", "opt", "max")} == {"images:4x3x64x64"}
    static = tensorrt_options(spec_of(model_file, (4, 3, 64, 64)), (4,), (64, 64), tmp_path, {})
    assert not any(key.startswith("trt_profile") for key in static)
    assert static["trt_fp16_enable"] == "True"


def test_every_dynamic_input_is_in_the_profile_the_image_sizes_too(
    model_file: Path, tmp_path: Path
) -> None:
    """ORT refuses explicit profiles that leave out a dynamic input (DETR's orig_target_sizes)."""
    spec = spec_of(model_file, ("batch", 3, 640, 640), ("batch", 2))
    options = tensorrt_options(spec, (1, 2, 4), (640, 640), tmp_path, {})
    assert options["trt_profile_min_shapes"] == "images:1x3x640x640,orig_target_sizes:1x2"
    assert options["trt_profile_max_shapes"] == "images:4x3x640x640,orig_target_sizes:4x2"


def test_the_users_options_win_and_engines_follow_the_model_and_the_options(
    model_file: Path, tmp_path: Path
) -> None:
    spec = spec_of(model_file, ("batch", 3, 64, 64))

    def engines(given: dict[str, str]) -> str:
        return tensorrt_options(spec, (1, 2), (64, 64), tmp_path, given)["trt_engine_cache_path"]

    first = engines({})
    assert engines({}) == first, "the same model and options reuse their engine"
    assert engines({"device_id": "1", "user_compute_stream": "77"}) == first
    assert engines({"trt_fp16_enable": "False"}) != first
    model_file.write_bytes(b"weights, version 2")  # retrained, copied over the old file
    assert engines({}) != first, "ORT would have run the old engine: it hashes the graph only"
    own = tmp_path / "mine" / "engines"
    chosen = tensorrt_options(spec, (1,), (64, 64), tmp_path, {"trt_engine_cache_path": str(own)})
    assert chosen["trt_engine_cache_path"] == str(own) and own.is_dir()


def test_a_cache_folder_that_cannot_be_made_is_one_line(model_file: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    spec = spec_of(model_file, ("batch", 3, 64, 64))
    with pytest.raises(VstreamError) as refused:
        tensorrt_options(spec, (1,), (64, 64), blocked, {})
    assert str(refused.value).startswith(f"TensorRT cache folder {blocked / 'engines'}/det-")
    assert str(refused.value).endswith("set runtime.tensorrt_cache to a folder this user can write")


def test_the_default_cache_is_the_users(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tensorrt_cache(None) == tmp_path / "vstream" / "tensorrt"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert tensorrt_cache(None) == Path.home() / ".cache" / "vstream" / "tensorrt"
    assert tensorrt_cache("/srv/engines") == Path("/srv/engines")


# -- a session on a (fake) GPU -------------------------------------------------------------------


class GpuWheelWithoutTensorrt:
    """The compiled side of onnxruntime-gpu 1.31.1 on a machine without TensorRT's libraries,
    as far as creating a session sees it; the wheel's Python (``InferenceSession``, the same
    logic in the CPU wheel here) runs for real on top of it.

    - ``get_available_providers()`` lists TensorRT, CUDA and the CPU: what the
      wheel was built with, whether or not their libraries load.
    - ``register_tensorrt_plugins_as_custom_ops``, which ``InferenceSession``
      calls for a TensorRT provider before making the session, raises what
      ORT's C++ raises when ``libonnxruntime_providers_tensorrt.so`` does not
      load (``RegisterTensorRTPluginsAsCustomOps``: ``ORT_THROW``, a
      ``RuntimeError`` in Python), with the message users report.

    The Python then does what it does with the GPU wheel: without
    ``enable_fallback=0``, it prints "EP Error" to stdout and makes the
    session again with CUDA and the CPU and none of the options given; CUDA
    is not really there, so that session runs on the CPU.
    """

    MESSAGE = (
        "/onnxruntime_src/onnxruntime/python/onnxruntime_pybind_state.cc:539 void "
        "onnxruntime::python::RegisterTensorRTPluginsAsCustomOps(PySessionOptions&, const "
        "onnxruntime::ProviderOptions&) Please install TensorRT libraries as mentioned in the "
        "GPU requirements page, make sure they're in the PATH or LD_LIBRARY_PATH, and that your "
        "GPU is supported."
    )

    @classmethod
    def install(cls, monkeypatch) -> None:
        def register(session_options: Any, options: Any) -> None:
            raise RuntimeError(cls.MESSAGE)

        monkeypatch.setattr(collection.C, "get_available_providers", lambda: list(GPU_WHEEL))
        monkeypatch.setattr(ort, "get_available_providers", lambda: list(GPU_WHEEL))
        monkeypatch.setattr(
            collection.C, "register_tensorrt_plugins_as_custom_ops", register, raising=False
        )


@pytest.fixture
def asked(monkeypatch) -> dict[str, Any]:
    """What ``ort.InferenceSession`` is called with; the real one then makes the session."""
    calls: dict[str, Any] = {}
    real = ort.InferenceSession

    def spy(path: str, sess_options: Any = None, providers: Any = None, **kwargs: Any) -> Any:
        calls.update(providers=providers, kwargs=kwargs)
        return real(path, sess_options=sess_options, providers=providers, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    return calls


def test_the_switch_asks_for_tensorrt_then_cuda_then_the_cpu_on_the_pipelines_stream(
    tmp_path: Path, monkeypatch, asked: dict[str, Any]
) -> None:
    """With TensorRT's libraries loading (as with the tensorrt extra), the session asks for
    the three providers; the CPU wheel here then builds a CPU session, as a GPU wheel whose
    TensorRT provider quietly stayed out would, and vstream refuses it with one line."""
    FakeGpu().install(monkeypatch)
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(GPU_WHEEL))
    monkeypatch.setattr(session, "load_tensorrt", lambda: None)
    cache = tmp_path / "cache"
    with (
        pytest.warns(UserWarning, match="not in available provider names"),
        pytest.raises(ModelError) as refused,
    ):
        model_session(
            scale_model(tmp_path / "s.onnx"),
            device="cuda",
            provider="tensorrt",
            tensorrt_cache=str(cache),
            imgsz=32,
        )
    (trt, trt_options), (cuda, cuda_options), cpu = asked["providers"]
    assert (trt, cuda, cpu) == (
        "TensorrtExecutionProvider",
        "CUDAExecutionProvider",
        ("CPUExecutionProvider", {}),
    )
    assert asked["kwargs"] == {"enable_fallback": 0}
    stream = cuda_options["user_compute_stream"]
    assert cuda_options == {"device_id": "0", "user_compute_stream": stream} and int(stream)
    engines = trt_options.pop("trt_engine_cache_path")
    assert trt_options == {
        "trt_fp16_enable": "True",
        "trt_profile_min_shapes": "images:1x3x32x32",
        "trt_profile_opt_shapes": "images:32x3x32x32",
        "trt_profile_max_shapes": "images:32x3x32x32",
        "trt_engine_cache_enable": "True",
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(cache / "timing"),
        "device_id": "0",
        "user_compute_stream": stream,
    }
    assert Path(engines).parent == cache / "engines" and Path(engines).is_dir()
    assert str(refused.value) == (
        f"s.onnx: ONNX Runtime did not start its TensorRT provider on cuda:0 (this onnxruntime "
        f"{ort.__version__} wheel has no TensorRT provider library), the session would run on "
        "CPUExecutionProvider: pip install 'vstream[tensorrt]', or set runtime.provider: cuda"
    )


def test_tensorrt_libraries_missing_here_are_one_line_naming_the_library(
    tmp_path: Path, monkeypatch
) -> None:
    """The real loader on a tensorrt_libs folder without TensorRT in it: its own message."""
    FakeGpu().install(monkeypatch)
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(GPU_WHEEL))
    monkeypatch.setattr(providers, "tensorrt_folder", lambda: tmp_path)
    with pytest.raises(ModelError) as refused:
        model_session(scale_model(tmp_path / "s.onnx"), device="cuda", provider="tensorrt")
    assert str(refused.value) == (
        "s.onnx: TensorRT was asked for, but its libraries do not load here "
        f"({tmp_path / TENSORRT_LIBRARIES[0]}: cannot open shared object file: No such file or "
        "directory): pip install 'vstream[tensorrt]', or set runtime.provider: cuda"
    )


def test_ort_failing_the_session_for_tensorrt_is_refused_not_retried_without_options(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """model.providers as pipelines files already list them: no "EP Error" retry on CUDA with
    no device and no stream, but one line with what does not load."""
    FakeGpu().install(monkeypatch)
    GpuWheelWithoutTensorrt.install(monkeypatch)
    monkeypatch.setattr(session, "load_tensorrt", lambda: None)
    chain = [{"name": "tensorrt"}, {"name": "cuda"}, {"name": "cpu"}]
    with pytest.raises(ModelError) as refused:
        model_session(
            scale_model(tmp_path / "s.onnx"),
            device="cuda",
            providers=chain,
            tensorrt_cache=str(tmp_path / "cache"),
        )
    assert "EP Error" not in capsys.readouterr().out
    assert str(refused.value) == (
        "s.onnx: TensorRT was asked for, but its libraries do not load here (this onnxruntime "
        f"{ort.__version__} wheel has no TensorRT provider library): "
        "pip install 'vstream[tensorrt]', or set runtime.provider: cuda"
    )


def test_a_wheel_without_the_provider_is_one_line(tmp_path: Path, monkeypatch) -> None:
    FakeGpu().install(monkeypatch)
    monkeypatch.setattr(ort, "get_available_providers", lambda: GPU_WHEEL[1:])
    with pytest.raises(ModelError, match=r"^s.onnx: TensorRT was asked for, but this onnxrun"):
        model_session(scale_model(tmp_path / "s.onnx"), device="cuda", provider="tensorrt")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_on_a_machine_without_a_gpu_the_switch_runs_on_the_cpu_with_a_notice(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="vstream"):
        detector = Detector(DEMO_MODEL, provider="tensorrt")
    assert detector.device == torch.device("cpu")
    assert detector.model.providers == ["CPUExecutionProvider"]
    assert "runtime.provider tensorrt has no effect on cpu" in caplog.text


# -- the config ---------------------------------------------------------------------------------


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    tiny_detector(tmp_path / "model.onnx")
    return tmp_path


def pipelines(runtime: str, model: str = "{path: model.onnx}") -> str:
    """A pipelines file of one pipeline with ``model`` and ``runtime`` (YAML flow mappings)."""
    return (
        "pipelines:\n"
        "  - name: main\n"
        f"    model: {model}\n"
        f"    runtime: {runtime}\n"
        "    sinks: [{type: jsonl, path: out.jsonl}]\n"
    )


def errors_of(directory: Path, text: str) -> list[str]:
    path = directory / "pipelines.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value.lines()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            pipelines("{provider: gpu}"),
            "pipelines.yaml:4: pipelines[0].runtime.provider: Input should be 'auto', 'cuda' or "
            "'tensorrt'",
        ),
        (
            pipelines("{device: cpu, provider: tensorrt}"),
            "pipelines.yaml:4: pipelines[0].runtime: provider tensorrt runs on CUDA, but device "
            "is cpu: leave provider out, or set device to auto or cuda",
        ),
        (
            pipelines("{provider: tensorrt}", "{path: model.onnx, providers: [{name: cuda}]}"),
            "pipelines[0]: runtime.provider is tensorrt but model.providers starts with cuda: "
            "list tensorrt first there, or leave one of them out",
        ),
        (
            pipelines("{tensorrt_cache: 7}"),
            "pipelines.yaml:4: pipelines[0].runtime.tensorrt_cache: Input should be a valid string",
        ),
    ],
    ids=["unknown-provider", "tensorrt-on-cpu", "two-orders", "cache-not-a-path"],
)
def test_bad_settings_are_one_line_naming_the_key(workdir: Path, text: str, expected: str) -> None:
    lines = errors_of(workdir, text)
    assert any(expected in line for line in lines), lines


def test_good_settings_load_and_validate_without_tensorrt(workdir: Path, capsys) -> None:
    """validate reads the model on the CPU: TensorRT's libraries are never needed there."""
    text = pipelines(
        "{provider: tensorrt, tensorrt_cache: engines}",
        "{path: model.onnx, providers: [{name: tensorrt, options: {trt_fp16_enable: false}}]}",
    )
    runtime = parse_config(text, base_dir=workdir).pipelines[0].runtime
    assert runtime.provider == "tensorrt" and runtime.tensorrt_cache == str(workdir / "engines")
    unset = parse_config(pipelines("{tensorrt_cache: ''}"), base_dir=workdir)
    assert unset.pipelines[0].runtime.tensorrt_cache is None
    (workdir / "pipelines.yaml").write_text(text)
    assert main(["validate", str(workdir / "pipelines.yaml")]) == 0
    assert "OK: 1 pipeline(s)" in capsys.readouterr().out


def test_the_switch_has_its_flags() -> None:
    flags = {option.cli.flag for option in options(RUN_SECTIONS)}
    assert {"--provider", "--tensorrt-cache"} <= flags


# -- vstream doctor ------------------------------------------------------------------------------


def doctor_model(running: list[str], reported: dict[str, str]) -> SimpleNamespace:
    """A CUDA detector's model as the provider-gpu check reads it: what ORT reports."""
    ort_session = SimpleNamespace(get_provider_options=lambda: {running[0]: reported})
    return SimpleNamespace(
        providers=running, session=ort_session, cuda_stream=SimpleNamespace(cuda_stream=0x7F00)
    )


def test_doctor_says_which_provider_runs_with_fp16_and_the_engines_folder() -> None:
    reported = {
        "user_compute_stream": str(0x7F00),
        "trt_fp16_enable": "1",
        "trt_engine_cache_path": "/cache/engines/det-0123",
    }
    detail, data = gpu_provider(doctor_model(GPU_WHEEL, reported), "tensorrt")
    assert detail == (
        "TensorrtExecutionProvider on the pipeline's stream 0x7f00, fp16 on, "
        "engines in /cache/engines/det-0123"
    )
    assert data["tensorrt"] == {
        "trt_fp16_enable": "1",
        "trt_engine_cache_path": "/cache/engines/det-0123",
    }
    with pytest.raises(
        Failed, match=r"runs on \['CUDAExecutionProvider', 'CPUExecutionProvider'\], not Tensor"
    ):
        gpu_provider(doctor_model(GPU_WHEEL[1:], reported), "tensorrt")


def test_doctor_environment_says_whether_tensorrt_loads_here(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = str(tmp_path / "vstream" / "tensorrt")
    assert environment._tensorrt_info() == {
        "cache": cache,
        "provider": f"not in this onnxruntime {ort.__version__} (onnxruntime-gpu has it)",
    }
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(GPU_WHEEL))
    monkeypatch.setattr(providers, "tensorrt_folder", lambda: tmp_path)
    assert environment._tensorrt_info() == {
        "cache": cache,
        "provider": "yes",
        "libraries": f"do not load: {tmp_path / TENSORRT_LIBRARIES[0]}: cannot open shared "
        "object file: No such file or directory (pip install 'vstream[tensorrt]')",
    }


def test_doctor_refuses_an_unknown_provider(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["doctor", "--provider", "gpu"])
    assert exit_.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "argument --provider: invalid choice: 'gpu'" in line
