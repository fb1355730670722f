#!/usr/bin/env bash
# Issue 29's GPU table in one script, on a machine with an NVIDIA GPU and no package registry:
# unpacks the bundle it is handed (benchmarks/gpu_bundle.sh), then measures stream scaling
# with benchmarks/gpu_scale.py for the demo detector at 320 (tracking on) and a YOLOv8n-class
# model at 640, and checks the GPU path (pytest -m gpu).
#
#   benchmarks/gpu_scale.sh [STEP ...]
#
# BUNDLE: the bundle's parts, in order (default: .gpu*/bundle.part.*; see gpu_bundle.sh for
#         how they travel, one a call, to /tmp/parts), joined and unpacked
#         into $VS (default /tmp/vstream-gpu): site/ (packages) and media/ (1080p30.mp4,
#         yolov8n.onnx).
# STEP:   unpack, shapes, ab, demo, procs, probe, tests, yolo (default: all, in that order),
#         and ray (not in the default: the bundle must hold ray and its dependencies).
#         shapes: host ms per model run as the batch size changes (one session, a session
#                 per bucket);
#         ab:     1 and 8 live streams with one session for every bucket, then as shipped;
#         demo:   limits, then 1-64 streams from files and live (the table);
#         procs:  the demo's and YOLOv8n's streams over 4 processes;
#         ray:    64 demo streams through processes: 6 (Ray workers, the driver writing the
#                 records), from files and live, as a user runs them;
#         rayauto: 1-64 demo streams from files through processes: auto (issue 29's goal 1
#                 as a user gets it: the processes auto picks are in the JSON rows), the
#                 files looped and timed for 8 s once every stream delivers, with the host
#                 CPU a frame of the driver and the workers together;
#         probe:  does NVDEC decoding wait for GPU work queued on other streams (with the
#                 native stacks of the waiting thread, by py-spy);
#         exit:   which part ends a process in SIGSEGV at exit (benchmarks/exit_probe.py;
#                 EXIT_PARTS: comma-separated combinations, with exit_probe's flags if
#                 wanted; EXIT_ENV: variables for them, e.g. PYTHONMALLOC=debug; EXIT_TAIL:
#                 lines of each one's output kept, default 25), then `vstream doctor` with
#                 each of DOCTOR_FLAGS (default --quick; empty: none); with EXIT_GDB=1 the
#                 first part that fails runs again under cuda-gdb for its native stacks;
#         profile: 32 file streams in one process, sampled by py-spy for 6 s from the first
#                 batch delivered: stacks of the thread holding the GIL (gil32.txt), of
#                 every busy thread (cpu32.txt) and of every thread with native frames
#                 (native32.txt), summed up by benchmarks/profile_summary.py;
#         together: 32 and 64 demo streams in one process, from files and live, with each
#                 stream's tracker stepped alone, then a batch's stepped together (as shipped;
#                 TRACKERS=together: only that); with BASE, another checkout first;
#         switch: 32 demo streams in one process, from files and live, at each GIL switch
#                 interval of SWITCH (seconds, default "0.001 0.005 0.02"; Python's is 0.005);
#         wait:   32 demo streams in one process, from files and live, with each policy of
#                 HOST_WAIT for threads waiting for the GPU (default "auto block": the
#                 driver's default, which spins, then blocking; gpu_scale.py --host-wait);
#         kernel: 32 demo streams in one process, from files and live, letterboxed by torch,
#                 then by one CUDA kernel a batch (gpu_scale.py --letterbox-kernel);
#         delay:  packets a picture waits in NVDEC as files and as live input get it (no
#                 display queue, each packet a whole picture), with and without B-frames, and
#                 NVDEC's frames/s either way at 1, 8 and 32 sessions
#                 (benchmarks/decoder_delay.py);
#         mps:    YOLOv8n's 50 live streams over 6 processes, without and then with CUDA MPS
#                 (when nvidia-cuda-mps-control is there; the daemon is stopped after).
#         $OUT (default /tmp/gpu_scale) receives one text file per step.
# COUNTING=1: the demo's streams count too (a line and a zone on every stream, gpu_scale.py
#         --counting), in every step that runs the demo.
# Python runs with -X faulthandler: these processes have ended in a segmentation fault after
# their output, at interpreter exit (BENCHMARKS.md), and the dump says in which thread.
set -uo pipefail
STEPS=${*:-unpack shapes ab demo procs probe tests yolo}
OUT=${OUT:-/tmp/gpu_scale}
VS=${VS:-/tmp/vstream-gpu}
MEDIA=$VS/media
mkdir -p "$OUT" "$VS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$VS/site:$PWD" PYSPY="$VS/site/py_spy-0.4.3.data/scripts/py-spy"
# scale [TIMEOUT_S] ARGS...: benchmarks/gpu_scale.py on the 1080p video, its warnings left out.
scale() {
    timeout "$1" python3 -X faulthandler benchmarks/gpu_scale.py --device "${DEVICE:-cuda}" \
        --source "$MEDIA/1080p30.mp4" "${@:2}" 2>&1 | grep -v WARNING
}
DEMO=(--model vstream/assets/demo.onnx --imgsz 320 --tracking --live-seconds 6
    ${COUNTING:+--counting})

for step in $STEPS; do
    echo "== $step $(date +%T)"
    case $step in
    unpack)
        # shellcheck disable=SC2086
        cat ${BUNDLE:-.gpu*/bundle.part.*} | xz -d -T0 | tar -x -C "$VS" || exit 1
        chmod +x "$PYSPY"
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python3 -c "import onnxruntime as o, torch, PyNvVideoCodec as n
print('onnxruntime', o.__version__, o.get_available_providers())
print('torch', torch.__version__, torch.cuda.get_device_name(0), 'PyNvVideoCodec', n.__version__)"
        ;;
    shapes)
        for model in "vstream/assets/demo.onnx 320" "$MEDIA/yolov8n.onnx 640"; do
            set -- $model
            scale 90 --model "$1" --imgsz "$2" --shapes | tee -a "$OUT/shapes.txt"
        done
        ;;
    ab)
        for sessions in --one-session ""; do
            # shellcheck disable=SC2086
            scale 90 "${DEMO[@]}" --skip-limits --skip-files --streams 1 8 $sessions \
                >>"$OUT/ab.txt"
        done
        grep -E "^\||sessions|stages" "$OUT/ab.txt"
        ;;
    demo)
        scale 240 "${DEMO[@]}" >"$OUT/demo320.txt"
        grep -E "^\||alone|stages" "$OUT/demo320.txt"
        ;;
    procs)
        scale 120 "${DEMO[@]}" --skip-limits --streams 64 --processes 4 \
            >"$OUT/procs.txt"
        scale 90 --model "$MEDIA/yolov8n.onnx" --imgsz 640 --skip-live --skip-limits \
            --streams 64 --processes 4 >>"$OUT/procs.txt"
        grep -E "^\|" "$OUT/procs.txt"
        ;;
    ray)
        scale 300 "${DEMO[@]}" --skip-limits --streams 64 --ray-processes 6 >"$OUT/ray.txt"
        grep -E "^\||^throughput|^live" "$OUT/ray.txt"
        ;;
    rayauto)
        scale 330 "${DEMO[@]}" --skip-limits --skip-live --ray-processes auto >"$OUT/rayauto.txt"
        grep -E "^\||^throughput" "$OUT/rayauto.txt"
        ;;
    probe)
        scale 90 --model vstream/assets/demo.onnx --probe >"$OUT/probe.txt"
        grep "^probe" "$OUT/probe.txt"
        ;;
    tests)
        timeout 150 python3 -X faulthandler -m pytest -q -o addopts=-ra -m gpu tests/test_gpu.py \
            -p no:cacheprovider >"$OUT/gpu_tests.txt" 2>&1
        echo "pytest exit code: $?" >>"$OUT/gpu_tests.txt"
        tail -15 "$OUT/gpu_tests.txt"
        ;;
    yolo)
        scale 150 --model "$MEDIA/yolov8n.onnx" --imgsz 640 --skip-live >"$OUT/yolo640.txt"
        grep -E "^\||alone" "$OUT/yolo640.txt"
        ;;
    exit)
        # EXIT_PARTS: the combinations of exit_probe.py's parts to try, one process each.
        IFS=, read -r -a parts <<<"${EXIT_PARTS:-torch,ort,torch ort,nvdec,pipeline}"
        first=""
        for p in "${parts[@]}"; do
            # shellcheck disable=SC2086
            timeout 90 env ${EXIT_ENV:-} python3 -X faulthandler benchmarks/exit_probe.py \
                --source "$MEDIA/1080p30.mp4" $p >"$OUT/exit_probe.txt.tmp" 2>&1
            rc=$?
            { echo "-- parts: $p ${EXIT_ENV:-}  exit code: $rc"
                grep -v WARNING "$OUT/exit_probe.txt.tmp" | tail -"${EXIT_TAIL:-25}"; } \
                | tee -a "$OUT/exit_probe.txt" | grep -- "^-- parts"
            [ $rc -ne 0 ] && [ -z "$first" ] && first=$p
        done
        for flags in ${DOCTOR_FLAGS---quick}; do
            # shellcheck disable=SC2086
            timeout 120 python3 -X faulthandler -m vstream doctor $flags \
                >"$OUT/exit_doctor$flags.txt" 2>&1
            echo "-- vstream doctor $flags  exit code: $?" | tee -a "$OUT/exit_probe.txt"
        done
        if [ -n "$first" ] && [ "${EXIT_GDB:-0}" = 1 ] && command -v cuda-gdb >/dev/null; then
            # shellcheck disable=SC2086
            timeout 180 cuda-gdb -q -batch -ex "set pagination off" -ex run -ex bt \
                -ex "info threads" -ex "thread apply all bt 12" --args \
                python3 benchmarks/exit_probe.py --source "$MEDIA/1080p30.mp4" $first \
                >"$OUT/exit_gdb.txt" 2>&1
            grep -A25 "SIGSEGV" "$OUT/exit_gdb.txt" | head -40
        fi
        ;;
    profile)
        rm -f /tmp/gpu_scale.delivering
        GPU_SCALE_DELIVERING=/tmp/gpu_scale.delivering python3 -X faulthandler \
            benchmarks/gpu_scale.py --device cuda --skip-limits --skip-live \
            --source "$MEDIA/1080p30.mp4" "${DEMO[@]}" --streams 32 >"$OUT/profile_run.txt" 2>&1 &
        pid=$!
        # From the first batch delivered, for 6 s of a run of about 10: a fixed delay caught
        # a fresh machine's start-up, a longer one the decoders' release and the exit.
        for _ in $(seq 600); do
            [ -e /tmp/gpu_scale.delivering ] && break
            sleep 0.1
        done
        sleep 1
        "$PYSPY" record --pid $pid --nonblocking --gil --threads -r 100 -d 6 -f raw \
            -o "$OUT/gil32.txt" >/dev/null 2>&1 &
        "$PYSPY" record --pid $pid --nonblocking --threads -r 100 -d 6 -f raw \
            -o "$OUT/cpu32.txt" >/dev/null 2>&1 &
        # Native frames need the threads stopped for each sample (no --nonblocking): 20 Hz,
        # every thread, idle ones too, so that waiting for the GIL shows as such.
        "$PYSPY" record --pid $pid --native --threads --idle -r 20 -d 6 -f raw \
            -o "$OUT/native32.txt" >/dev/null 2>&1
        wait
        grep -E "^\||stages" "$OUT/profile_run.txt"
        ls -la "$OUT"/gil32.txt "$OUT"/cpu32.txt "$OUT"/native32.txt
        python3 benchmarks/profile_summary.py "$OUT"/native32.txt "$OUT"/gil32.txt \
            >"$OUT/profile_summary.txt" 2>&1
        head -80 "$OUT/profile_summary.txt"
        ;;
    together)
        # TRACKERS=together: only as shipped. BASE: another checkout's root (carried in the
        # tree, e.g. a git worktree of an earlier commit in an ignored folder), measured
        # first in the same call: runs on different days of the lent machines differ by
        # more than most changes (BENCHMARKS.md, sixth run), so a change is compared here.
        modes=(--track-alone "")
        [ "${TRACKERS:-both}" = together ] && modes=("")
        for tree in ${BASE:+"$BASE"} "$PWD"; do
            echo "-- vstream from $tree ($(git -C "$tree" rev-parse --short HEAD 2>/dev/null))" \
                >>"$OUT/together.txt"
            for mode in "${modes[@]}"; do
                # shellcheck disable=SC2086
                PYTHONPATH="$VS/site:$tree" scale 200 "${DEMO[@]}" --skip-limits --streams 32 64 \
                    $mode >>"$OUT/together.txt"
            done
        done
        grep -E "^\||^-- vstream|trackers stepped" "$OUT/together.txt"
        ;;
    switch)
        for interval in ${SWITCH:-0.001 0.005 0.02}; do
            scale 120 "${DEMO[@]}" --skip-limits --streams 32 --switch-interval "$interval" \
                >>"$OUT/switch.txt"
        done
        grep -E "^\||GIL switch" "$OUT/switch.txt"
        ;;
    kernel)
        for flag in "" --letterbox-kernel; do
            # shellcheck disable=SC2086
            scale 120 "${DEMO[@]}" --skip-limits --streams 32 $flag >>"$OUT/kernel.txt"
        done
        grep -E "^\||letterbox by|stages" "$OUT/kernel.txt"
        ;;
    wait)
        for policy in ${HOST_WAIT:-auto block}; do
            scale 120 "${DEMO[@]}" --skip-limits --streams 32 --host-wait "$policy" \
                >>"$OUT/wait.txt"
        done
        grep -E "^\||host wait" "$OUT/wait.txt"
        ;;
    delay)
        timeout 240 python3 -X faulthandler benchmarks/decoder_delay.py --decoders nvdec \
            --frames 150 --sessions 1 8 32 2>&1 | grep -v WARNING | tee "$OUT/delay.txt"
        ;;
    mps)
        YOLO=(--model "$MEDIA/yolov8n.onnx" --imgsz 640 --live-seconds 6 --skip-limits
            --skip-files --streams 50 --processes 6)
        scale 150 "${YOLO[@]}" >"$OUT/mps.txt"
        if command -v nvidia-cuda-mps-control >/dev/null; then
            export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
            mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
            if nvidia-cuda-mps-control -d; then
                echo "== with MPS" >>"$OUT/mps.txt"
                scale 150 "${YOLO[@]}" >>"$OUT/mps.txt"
                echo quit | nvidia-cuda-mps-control
                tail -5 "$CUDA_MPS_LOG_DIRECTORY"/control.log >>"$OUT/mps.txt"
            fi
            unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        else
            echo "no nvidia-cuda-mps-control on this machine" | tee -a "$OUT/mps.txt"
        fi
        grep -E "^\||MPS" "$OUT/mps.txt"
        ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
    esac
done
