#!/usr/bin/env bash
# End-to-end smoke + throughput of the daemon on a GPU host: framefused on the sample clips with the
# CUDA executor, once with NVDEC and once with software decode, 1 and 4 pipelines, null sink (plus
# the example config with its npy sink). Prints the daemon's summary lines. Needs `framefused` built
# in BUILD_DIR and samples/ made by tools/make_sample_clip (or carried).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD_DIR=${BUILD_DIR:-build-gpu-lane}
BIN=$BUILD_DIR/daemon/framefused
FRAMES=${FRAMES:-1800}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0

echo "== example config (device auto, npy sink)"
rm -rf out/basic
"$BIN" run --config config/examples/basic.yaml --no-http 2>&1 | grep -E "CUDA|summary|error" || status=1
npy=$(find out/basic -name '*.npy' 2>/dev/null | wc -l)
echo "npy files: $npy"
((npy > 0)) || { echo "   FAIL: the example config wrote no .npy file"; status=1; }

echo "== HTTP on a GPU host: GPU memory, NVDEC sessions, decoder in /metrics and /status"
cat >"$work/http.yaml" <<YAML
pipelines:
  - name: cam
    source: {uri: $ROOT/samples/sample_720p.mp4, loop: true, realtime: true}
    decoder: nvdec
    outputs: [{name: cls, resize: {width: 224, height: 224}}]
    sink: {type: null}
YAML
"$BIN" run --config "$work/http.yaml" --http-port 0 2>"$work/http.log" &
pid=$!
python3 - "$work/http.log" <<'PY' || status=1
import json, re, sys, time, urllib.request
log = sys.argv[1]
for _ in range(100):
    m = re.search(r"on 127\.0\.0\.1:(\d+)", open(log).read())
    if m:
        break
    time.sleep(0.1)
base = f"http://127.0.0.1:{m.group(1)}"
time.sleep(2)
metrics = urllib.request.urlopen(base + "/metrics").read().decode()
for name in ("framefuse_gpu_memory_used_bytes", "framefuse_nvdec_sessions 1", 'decoder="nvdec"} 1'):
    line = next((l for l in metrics.splitlines() if name in l and not l.startswith("#")), None)
    print(f"   {name}: {line}")
    assert line, name
status = json.loads(urllib.request.urlopen(base + "/status").read())
print("   /status gpus:", status["gpus"], "nvdec_sessions:", status["nvdec_sessions"])
try:
    urllib.request.urlopen(base + "/preview/cam.jpg")
    print("   /preview/cam.jpg: 200")
except urllib.error.HTTPError as e:
    print("   /preview/cam.jpg:", e.code, e.read().decode().strip())
PY
kill -TERM $pid; wait $pid || status=1

pipelines() {   # pipelines N DECODER
  for i in $(seq 1 "$1"); do
    cat <<YAML
  - name: cam$i
    source: {uri: $ROOT/samples/sample_1080p.mp4, loop: true, max_frames: $FRAMES}
    decoder: $2
    outputs:
      - {name: cls, resize: {shorter_side: 256}, center_crop: [224, 224], mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225]}
      - {name: det, resize: {width: 640, height: 640}, aspect: letterbox, dtype: float16}
    sink: {type: null}
YAML
  done
}
for decoder in nvdec cpu; do
  for n in 1 4; do
    cfg=$work/$decoder-$n.yaml
    { echo "http: {enabled: false}"; echo "pipelines:"; pipelines "$n" "$decoder"; } >"$cfg"
    echo "== $n x 1080p H.264, decoder $decoder, $FRAMES frames each"
    start=$(date +%s.%N)
    "$BIN" run --config "$cfg" --device cuda 2>&1 | grep -E "summary|error|fallback" | head -8 || status=1
    end=$(date +%s.%N)
    python3 -c "print(f'   total: {$n * $FRAMES / ($end - $start):.0f} frames/s over {$end - $start:.2f} s wall')"
  done
done
exit $status
