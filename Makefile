# Quick start:  make demo   (set up, then run the demo model on the sample video)
#               make test   (set up, then run the test suite; CI runs this too)

VENV ?= .venv
PYTHON ?= python3
# torch and torchvision are pinned to the CPU-usable releases this project's
# machines install from local disk; a newer release would download gigabytes.
TORCH := torch==2.14.1 torchvision==0.29.1
STAMP := $(VENV)/.vstream-installed

.PHONY: setup demo test lint

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check $(TORCH)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[cpu,test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(VENV)/bin/vstream run

test: setup
	$(VENV)/bin/ruff check vstream tests tools examples
	$(VENV)/bin/python -m pytest

lint: setup
	$(VENV)/bin/ruff check vstream tests tools examples
	$(VENV)/bin/ruff format --check vstream tests tools examples
