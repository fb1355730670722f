"""The deployment files: what they copy, install and run must exist in the repository.

No Docker engine runs here, so the files are read as text: every COPY source
exists, every extra installed is declared in pyproject.toml, each image runs
``vstream serve`` on a config that exists, and the compose file's paths exist.
The GPU image and service ask for the driver's ``video`` capability (NVDEC,
NVENC), the GPU wheels are pinned to one CUDA major, and the image's health
check asks the running service (run here against a stand-in HTTP server).
"""

from __future__ import annotations

import http.server
import json
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_both_images_exist() -> None:
    assert {p.name for p in DOCKERFILES} == {"Dockerfile.cpu", "Dockerfile.gpu"}


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_everything_copied_exists_in_the_build_context(dockerfile: Path) -> None:
    copies = [args for op, args in instructions(dockerfile) if op in ("COPY", "ADD")]
    assert copies
    for args in copies:
        *sources, _ = [a for a in shlex.split(args) if not a.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"{dockerfile.name} copies missing {source}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_installed_extras_are_declared_and_match_the_image(dockerfile: Path) -> None:
    runs = " ".join(args for op, args in instructions(dockerfile) if op == "RUN")
    extras = re.findall(r"""["']?\.\[([a-z0-9_,-]+)\]["']?""", runs)
    kind = dockerfile.suffix.lstrip(".")
    # ray: the same image is a cluster driver or a Ray worker node.
    assert extras == [f"{kind},ray"], f"{dockerfile.name} should install .[{kind},ray]"
    assert kind in EXTRAS and "ray" in EXTRAS


def test_the_gpu_image_and_extra_pin_one_cuda_major() -> None:
    """torch, onnxruntime-gpu and PyNvVideoCodec of CUDA 13, pinned together (issue 20)."""
    dockerfile = DOCKER / "Dockerfile.gpu"
    (base,) = [args for op, args in instructions(dockerfile) if op == "FROM"]
    assert re.match(r"nvidia/cuda:13\.", base)
    pins = dict(
        re.fullmatch(r"([A-Za-z-]+)(?:\[[a-z,]+\])?==([\d.]+)", p).groups() for p in EXTRAS["gpu"]
    )
    assert pins == {
        "torch": "2.14.1",  # PyPI's build of 2.14.1 is for CUDA 13
        "torchvision": "0.29.1",
        "onnxruntime-gpu": "1.31.1",  # PyPI's build: CUDA 13, cuDNN 9
        "PyNvVideoCodec": "2.2.4",  # the driver API only
        "cuda-bindings": "13.5.0",  # NVRTC and the driver for the letterbox kernel
    }
    assert "onnxruntime-gpu[cuda,cudnn]==" in " ".join(EXTRAS["gpu"]), "CUDA 13 libraries as wheels"
    makefile = (ROOT / "Makefile").read_text()
    assert f"torch=={pins['torch']} torchvision=={pins['torchvision']}" in makefile
    assert not any("cupy" in p for p in EXTRAS["gpu"]), "torch does the device work"
    assert "--index-url" not in dockerfile.read_text(), "torch of the extra's CUDA major"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_each_image_serves_an_existing_config(dockerfile: Path) -> None:
    (cmd,) = [args for op, args in instructions(dockerfile) if op == "CMD"]
    argv = json.loads(cmd)
    assert argv[:2] == ["vstream", "serve"]
    assert (ROOT / argv[2]).is_file()
    workdir = [args for op, args in instructions(dockerfile) if op == "WORKDIR"]
    assert workdir == ["/app"]


def test_the_compose_example_refers_to_existing_files() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    assert {"vstream", "mosquitto"} <= set(services)
    build = services["vstream"]["build"]
    context = (DOCKER / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).is_file()
    for service in services.values():
        for volume in service.get("volumes", []):
            assert (DOCKER / volume.split(":")[0]).exists(), volume
    command = services["vstream"]["command"]
    config = ROOT / command[2]
    assert command[:2] == ["vstream", "serve"] and config.is_file()
    for name in services["vstream"].get("environment", {}):
        assert f"${{{name}" in config.read_text(), f"{config.name} does not use {name}"
    for port in services["vstream"]["ports"]:
        assert port.startswith("127.0.0.1:"), "publish the API on the host's loopback only"


def _env(dockerfile: Path) -> dict[str, str]:
    pairs = [p for op, args in instructions(dockerfile) if op == "ENV" for p in shlex.split(args)]
    return dict(pair.split("=", 1) for pair in pairs)


def test_the_gpu_image_grants_the_video_capability_nvdec_needs() -> None:
    capabilities = _env(DOCKER / "Dockerfile.gpu")["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    assert {"compute", "utility", "video"} <= set(capabilities)


def test_the_gpu_image_checks_its_health_by_asking_the_running_service() -> None:
    """Not a second CUDA context, ORT session and NVDEC session beside the service (issue 20)."""
    (healthcheck,) = [
        args for op, args in instructions(DOCKER / "Dockerfile.gpu") if op == "HEALTHCHECK"
    ]
    options, command = healthcheck.split("CMD", 1)
    assert json.loads(command) == ["python", "docker/healthcheck.py"]
    assert "--interval=" in options and "--timeout=" in options


class _Service(http.server.BaseHTTPRequestHandler):
    """``GET /health`` answering as the server's route does, or 500; behind ``token`` where
    one is set, refused with 401 as the server refuses a missing or wrong token."""

    answer: tuple[int, dict[str, str]] = (200, {"status": "ok"})
    token = ""

    def do_GET(self) -> None:
        code, body = self.answer
        if self.token and self.headers.get("Authorization") != f"Bearer {self.token}":
            code, body = 401, {"error": "missing or wrong bearer token"}
        assert self.path == "/health"
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args: object) -> None:
        pass


FAILED = (503, {"status": "failed", "error": "pipeline main has failed: bug"})


@pytest.mark.parametrize(
    ("answer", "tokens", "healthy"),
    [
        ((200, {"status": "ok"}), ("", ""), True),
        ((200, {"status": "stopping"}), ("", ""), False),
        ((500, {"error": "internal error"}), ("", ""), False),
        (FAILED, ("", ""), False),
        (None, ("", ""), False),
        ((200, {"status": "ok"}), ("s3cret-token", "s3cret-token"), True),
        # Behind a token, as the images serve: a failed pipeline was hidden behind the 401.
        (FAILED, ("s3cret-token", "s3cret-token"), False),
        ((200, {"status": "ok"}), ("s3cret-token", ""), False),
        ((200, {"status": "ok"}), ("s3cret-token", "wrong-token!"), False),
    ],
)
def test_the_health_check_script(
    answer: tuple[int, dict[str, str]] | None, tokens: tuple[str, str], healthy: bool
) -> None:
    """``tokens``: the service's and the one in the check's environment."""
    served, given = tokens
    handler = type("Service", (_Service,), {"answer": answer, "token": served})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    port = server.server_address[1]
    if answer is None:
        server.server_close()  # nothing listens there
    else:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        done = subprocess.run(
            [sys.executable, str(DOCKER / "healthcheck.py")],
            env={"VSTREAM_PORT": str(port), "VSTREAM_API_TOKEN": given},
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        if answer is not None:
            server.shutdown()
            server.server_close()
    assert (done.returncode == 0) is healthy, done.stderr
    assert healthy or done.stderr.startswith("unhealthy: ")
    if served and served != given:
        assert done.stderr.rstrip().endswith(
            "answered 401: the check sent "
            + ("VSTREAM_API_TOKEN" if given else "no token (VSTREAM_API_TOKEN is not set)")
        )
    elif answer is not None and "error" in answer[1] and not healthy:
        assert done.stderr.rstrip().endswith(f"answered {answer[0]}: {answer[1]['error']}")
    assert not given or given not in done.stderr  # the token is never printed


def test_the_compose_gpu_service_reserves_the_gpu_with_video() -> None:
    services = yaml.safe_load((DOCKER / "compose.yaml").read_text())["services"]
    gpu = services["vstream-gpu"]
    assert gpu["profiles"] == ["gpu"], "not started unless asked for"
    assert gpu["build"]["dockerfile"] == "docker/Dockerfile.gpu"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and {"gpu", "video"} <= set(device["capabilities"])
    assert "video" in gpu["environment"]["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    assert all(port.startswith("127.0.0.1:") for port in gpu["ports"])
    assert gpu["command"][:2] == ["vstream", "serve"] and (ROOT / gpu["command"][2]).is_file()
