#include "config/load.hpp"

namespace framefuse::config {

// Kept in step with schema.hpp and pipeline/spec.hpp by config_test (DefaultConfig.*), which loads it
// and compares every value with the default-constructed structs.
std::string default_config_yaml() {
  return R"yaml(# framefused configuration: every key with its default value.
# Durations take a unit (100us, 250ms, 5s, 1m, 2h); sizes a number of bytes or 8KiB, 64MiB, ...
# Any value may use ${VAR} or ${VAR:-default} from the environment.
log:
  level: info                      # trace | debug | info | warn | error
  format: text                     # text | json (one object per line)
http:
  enabled: true                    # serve /metrics, /livez, /readyz, /status and /preview
  bind: 127.0.0.1                  # IPv4 or IPv6 address to listen on
  port: 9400                       # 1..65535
  max_connections: 64              # concurrent connections; more are refused
  idle_timeout: 30s                # close keep-alive connections idle this long
  max_header_bytes: 8KiB           # larger request headers are rejected (1KiB..1MiB)
decode:                            # hybrid decode: `decoder: auto` streams spread over NVDEC and the cores
  nvdec_fps: 15360                 # per GPU, 1080p frames per second (an H200 held 512 live 1080p30 streams)
  cpu_fps: auto                    # what the cores decode in software (auto = 100 per hardware thread)
  codec_costs:                     # per pixel against 8-bit H.264 on NVDEC and on the cores; unlisted codecs: 1
    hevc: {nvdec: 0.8, cpu: 1.9}   # measured on an H200 host (REFERENCE.md, "Hybrid decode")
    hevc_10bit: {nvdec: 0.8, cpu: 2.2}   # streams of more than 8 bits per sample
device: auto                       # auto (first CUDA device, else cpu) | cpu | cuda | cuda:N
readiness: all                     # /readyz: all = every pipeline streaming, any = at least one
drain_timeout: 5s                  # on shutdown, time for queued frames to finish (0s = none)
cpu_threads: 0                     # CPU executor threads (0 = one per core)
batching: []                       # batch groups: {name, max_batch, max_wait, device, queue_depth}; see REFERENCE.md
pipelines:                         # at least one
  - name: camera                   # letters, digits, _ and -; unique; labels metrics and folders
    source:
      uri: rtsp://camera.local:554/stream   # rtsp[s]:// URL, or a file path (relative to this file)
      loop: false                  # files: restart at the end
      realtime: false              # files: pace at the stream's frame rate, like a camera
      transport: tcp               # rtsp: tcp | udp
      timeout: 5s                  # rtsp: socket timeout for connecting and reading
      stall_timeout: 10s           # no frame for this long = stalled, reconnect
      reconnect:
        initial: 500ms             # first delay before reconnecting, doubled after each failure
        max: 30s                   # longest delay between reconnects
        attempts: unlimited        # unlimited | N: give up after N failed reconnects
      max_frames: -1               # stop after this many decoded frames (-1 = all)
    decoder: auto                  # auto | nvdec | cpu
    device: null                   # this pipeline's device (null = the daemon's)
    queue_depth: 4                 # decoded frames waiting for processing
    pool_frames: auto              # decode buffers: auto (decoder + queue_depth + in flight) | 2..4096
    batch_group: null              # a `batching` group whose fused launches this pipeline's frames share (null = none)
    color:
      matrix: auto                 # auto (stream metadata) | bt601 | bt709
      range: auto                  # auto (stream metadata) | limited | full
      chroma_upsample: nearest     # nearest | linear
    outputs:                       # 1..8, computed in one fused pass per frame
      - name: output               # letters, digits, _ and -; unique in the pipeline; output subfolder
        crop: {x: 0, y: 0, w: 1, h: 1, units: fraction}   # region read; units: pixels (default) | fraction
        resize: {width: 224, height: 224}   # or {shorter_side: N}; leave out to keep the crop's size
        interp: linear             # nearest | linear | area
        aspect: stretch            # stretch | letterbox | fill (letterbox and fill need width, height)
        center_crop: null          # [w, h] or N cut from the middle after resize (null = none)
        pad_value: 114             # 0..255 fill for letterbox / oversized center_crop: N or [r, g, b]
        channels: rgb              # rgb | bgr | gray
        scale: 1/255               # multiplies 0..255 pixels before mean/std; N or "1/N" (uint8: default 1)
        mean: 0                    # subtracted after scale: N or [r, g, b]
        std: 1                     # divides after mean, non-zero: N or [r, g, b]
        layout: chw                # chw | hwc
        dtype: float32             # float32 | float16 | uint8 (rounded, saturated)
    sink:
      type: npy                    # npy (.npy files) | shm (a shared-memory ring: name, slots) | cuda_ipc (the same in GPU memory) | null (discard outputs)
      directory: out/camera        # npy: folder (relative to this file), one subfolder per output
      frames_per_file: 1           # npy: frames stacked per file, shape [N, ...]
    control:                       # per-frame statistics and control loops; a section given is on unless enabled: false
      enabled: false               # luma, histogram, motion per frame and output window (on a 128x72 luma thumbnail)
      delay_frames: 2              # the control of frame n uses the statistics of frame n - delay_frames (1..64)
      auto_gain:
        enabled: false             # drive outputs' mean luma toward target (PI controller, gain before normalize)
        outputs: []                # outputs it drives ([] = all)
        target: 0.45               # mean output luma to reach, (0, 1]
        kp: 0.1                    # proportional gain on log luma, 0..10
        ki: 0.3                    # integral gain, 0..10 (kp and ki not both 0)
        min_gain: 0.25             # lowest gain, 0.001..1
        max_gain: 8                # highest gain, 1..1000
        max_step: 0.25             # largest gain change per frame (slew limit), > 0
      roi_follow:
        enabled: false             # move one output's crop window toward the motion centroid (digital pan/tilt)
        output: output             # the output whose crop moves (its size is kept)
        smoothing: 0.2             # share of the remaining distance moved per frame, (0, 1]
        dead_band: 0.02            # no move while the centroid is this close (fraction of the frame), 0..0.5
        min_motion: 0.0005         # hold while whole-frame motion (mean |luma change|) is below this, 0..1
        bounds: {x: 0, y: 0, w: 1, h: 1, units: fraction}   # where the window may go; same form as crop
      health:
        enabled: false             # frozen, black, overexposed and scene-change flags
        frozen_motion: 0.0005      # motion below this is a still picture, 0..1
        frozen_after: 10s          # still this long = frozen
        black_fraction: 0.95       # share of near-black thumbnail pixels (luma < 1/16) that is black, (0, 1]
        overexposed_fraction: 0.5  # share of near-white pixels (luma >= 15/16) that is overexposed, (0, 1]
        scene_change: 0.5          # histogram distance (0..1) to the previous frame that is a cut or tamper, (0, 1]
        raise_after: 500ms         # black / overexposed must last this long before the flag rises
        clear_after: 2s            # a flag clears once its condition has been gone this long
)yaml";
}

}  // namespace framefuse::config
