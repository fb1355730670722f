# Quick start:  make demo   (set up, then run the demo model on the sample video)
#               make test   (set up, then run the test suite; CI runs this too)

VENV ?= .venv
PYTHON ?= python3
# torch and torchvision are pinned to the CPU-usable releases this project's
# machines install from local disk; a newer release would download gigabytes.
TORCH := torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.vstream-installed
# Real servers and tools the tests start: ffprobe, an MQTT broker, Redis,
# GStreamer's RTSP server (run under Debian's python3 with python3-gi), and
# Chromium for the dashboard's browser tests (driven by Playwright, no download), and
# nginx's RTMP module as the media server the live video output publishes to.
SYSTEM_PACKAGES := ffmpeg mosquitto redis-server python3-gi gir1.2-gst-rtsp-server-1.0 chromium \
	gstreamer1.0-tools gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly \
	nginx-light libnginx-mod-rtmp

.PHONY: setup system-deps demo test lint

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(TORCH)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[cpu,test,ray]'
	touch $(STAMP)

setup: $(STAMP)

# Debian starts nginx's own service (port 80, all interfaces) where systemd runs: the tests
# start their own nginx on 127.0.0.1, so that one is stopped and left disabled.
system-deps:
	@dpkg -s $(SYSTEM_PACKAGES) >/dev/null 2>&1 || { \
		apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			$(SYSTEM_PACKAGES) >/dev/null && \
		{ systemctl disable --now nginx >/dev/null 2>&1 || true; }; }

# The bundled model on the bundled video: tracking, a counting line, the demo colour
# classifier as a cascade (attributes.colour), records and the annotated video side by
# side in out/ (the summary line says where).
demo: setup
	@mkdir -p out
	$(VENV)/bin/vstream run --track --line gate=320,360,320,0 \
		--secondary vstream://colour.onnx --appearance vstream://appearance.onnx \
		--output out/demo.jsonl --save-video out/demo.mp4

demo-seg: setup
	@mkdir -p out
	$(VENV)/bin/vstream run --model vstream/assets/demo_seg.onnx --line gate=320,360,320,0 \
		--output out/demo_seg.jsonl --save-video out/demo_seg.mp4

test: setup system-deps
	$(VENV)/bin/ruff check vstream tests tools examples benchmarks
	$(VENV)/bin/mypy
	$(VENV)/bin/python -m pytest

lint: setup
	$(VENV)/bin/ruff check vstream tests tools examples benchmarks
	$(VENV)/bin/ruff format --check vstream tests tools examples benchmarks
	$(VENV)/bin/mypy
