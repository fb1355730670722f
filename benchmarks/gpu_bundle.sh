#!/usr/bin/env bash
# What benchmarks/gpu_scale.sh needs on a GPU machine without a package registry, packed here
# into parts small enough to travel one per call (the device tool carries 64 MiB a call,
# the working tree included):
#
#   benchmarks/gpu_bundle.sh WHEELS MEDIA [PART_MIB]
#
# WHEELS: cp312 manylinux wheels of what the machine lacks (its image has torch, numpy, the
#         CPU onnxruntime and many common packages: device/KINDS.md). Used on 2026-11-26:
#         onnxruntime-gpu 1.31.1, pynvvideocodec 2.2.4, av 19.0.2, py-spy 0.4.3, pydantic 2.14.4
#         with pydantic-core, annotated-types and typing-inspection, fastapi, starlette,
#         uvicorn, redis, paho-mqtt, orjson 3.13.0 (since 2026-11-27); for the `ray` step
#         also ray 2.60.0, jsonschema, jsonschema-specifications, referencing and rpds-py.
#         Each fetched with
#           python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#             --implementation cp --platform manylinux_2_28_x86_64 \
#             --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d WHEELS NAME==V
# MEDIA:  1080p30.mp4 and yolov8n.onnx (BENCHMARKS.md says how each is made).
#
# The wheels are unpacked (a folder on PYTHONPATH needs no pip there), PyNvVideoCodec's
# sources, samples and CUDA 12 build are left out, and the whole is one tar.xz (about a
# fifth smaller than the wheels' zip), split into .gpu1/bundle.part.aa, .gpu2/...ab, ...
# Each .gpuN folder is ignored by git (.git/info/exclude) and carried by one call. A carried
# folder is gone from the checkout there at the next call, so each call copies its part out:
#   call N:    cp .gpuN/* /tmp/parts/          (carry: [".gpuN"]; mkdir -p /tmp/parts first)
#   last call: BUNDLE="/tmp/parts/bundle.part.*" benchmarks/gpu_scale.sh unpack ...
# The calls follow each other while the machine is warm (it goes back after 30 s idle).
set -euo pipefail
WHEELS=${1:?wheels folder}
MEDIA=${2:?media folder}
PART_MIB=${3:-50}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/site" "$stage/media"
for wheel in "$WHEELS"/*.whl; do
    case $(basename "$wheel") in
    pynvvideocodec-*)
        unzip -q -o "$wheel" 'PyNvVideoCodec/*' 'pynvvideocodec.*' \
            -x 'PyNvVideoCodec/PyNvVideoCodec_121*' -d "$stage/site"
        ;;
    *) unzip -q -o "$wheel" -d "$stage/site" ;;
    esac
done
cp "$MEDIA/1080p30.mp4" "$MEDIA/yolov8n.onnx" "$stage/media/"
tar -C "$stage" -cf - site media | xz -T0 -6 >"$stage/bundle.tar.xz"
rm -rf .gpu[0-9]*
split -b "${PART_MIB}M" "$stage/bundle.tar.xz" "$stage/bundle.part."
n=1
for part in "$stage"/bundle.part.*; do
    mkdir -p ".gpu$n"
    mv "$part" ".gpu$n/"
    grep -qx "/.gpu$n/" .git/info/exclude || echo "/.gpu$n/" >>.git/info/exclude
    n=$((n + 1))
done
ls -l .gpu*/bundle.part.*
