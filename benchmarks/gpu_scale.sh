#!/usr/bin/env bash
# Issue 29's GPU table in one script, on a machine with an NVIDIA GPU and no package registry:
# installs the wheels it is handed, checks the GPU path (pytest -m gpu), then measures stream
# scaling with benchmarks/gpu_scale.py for the demo detector at 320 (tracking on) and a
# YOLOv8n-class model at 640.
#
#   benchmarks/gpu_scale.sh WHEELS MEDIA [STEP ...]
#
# WHEELS: *.whl files, and any wheel too large to carry whole as NAME.whl.part.aa, .ab, ...
#         (split -b 55M NAME.whl NAME.whl.part.), joined here: onnxruntime-gpu, PyNvVideoCodec,
#         av and the pure-Python dependencies the machine lacks.
# MEDIA:  1080p30.mp4 (benchmarks/make_video.py or ffmpeg) and yolov8n.onnx
#         (benchmarks/make_yolov8n_onnx.py).
# STEP:   install, tests, probe, demo, procs, pipeline, yolo (default: all, in that order).
#         probe: does NVDEC decoding wait for GPU work queued on other streams of the process;
#         procs: the demo's and YOLOv8n's streams over 4 processes.
#         $OUT (default /tmp/gpu_scale) receives each step's output and JSON.
set -uo pipefail
WHEELS=${1:?wheels folder}
MEDIA=${2:?media folder}
shift 2
STEPS=${*:-install tests probe demo procs yolo}
OUT=${OUT:-/tmp/gpu_scale}
SITE=${SITE:-/tmp/vstream-site}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$SITE:$PWD"

for step in $STEPS; do
    case $step in
    install)
        for first in "$WHEELS"/*.whl.part.aa; do
            [ -e "$first" ] && cat "${first%.aa}".?? >"${first%.part.aa}"
        done
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "$WHEELS"/*.whl || exit 1
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python3 -c "import onnxruntime as o, torch, PyNvVideoCodec as n
print('onnxruntime', o.__version__, o.get_available_providers())
print('torch', torch.__version__, torch.cuda.get_device_name(0), 'PyNvVideoCodec', n.__version__)"
        ;;
    tests)
        timeout 170 python3 -m pytest -q -o addopts=-ra -m gpu tests/test_gpu.py -p no:cacheprovider 2>&1 |
            tail -25 | tee "$OUT/gpu_tests.txt"
        ;;
    probe)
        timeout 60 python3 benchmarks/gpu_scale.py --source "$MEDIA/1080p30.mp4" \
            --model vstream/assets/demo.onnx --probe 2>&1 | grep -v WARNING | tee "$OUT/probe.txt"
        ;;
    demo)
        timeout 240 python3 benchmarks/gpu_scale.py --source "$MEDIA/1080p30.mp4" \
            --model vstream/assets/demo.onnx --imgsz 320 --tracking --live-seconds 6 \
            --json "$OUT/demo320.json" 2>&1 | grep -v WARNING | tee "$OUT/demo320.txt"
        ;;
    procs)
        timeout 200 python3 benchmarks/gpu_scale.py --source "$MEDIA/1080p30.mp4" \
            --model vstream/assets/demo.onnx --imgsz 320 --tracking --live-seconds 6 \
            --skip-limits --streams 32 64 --processes 4 \
            --json "$OUT/demo320_4procs.json" 2>&1 | grep -v WARNING | tee "$OUT/demo320_4procs.txt"
        timeout 120 python3 benchmarks/gpu_scale.py --source "$MEDIA/1080p30.mp4" \
            --model "$MEDIA/yolov8n.onnx" --imgsz 640 --skip-live --skip-limits --streams 64 \
            --processes 4 --json "$OUT/yolo640_4procs.json" 2>&1 | grep -v WARNING |
            tee "$OUT/yolo640_4procs.txt"
        ;;
    yolo)
        timeout 200 python3 benchmarks/gpu_scale.py --source "$MEDIA/1080p30.mp4" \
            --model "$MEDIA/yolov8n.onnx" --imgsz 640 --skip-live \
            --json "$OUT/yolo640.json" 2>&1 | grep -v WARNING | tee "$OUT/yolo640.txt"
        ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
    esac
done
