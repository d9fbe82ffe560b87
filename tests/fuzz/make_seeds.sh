#!/usr/bin/env bash
# Writes the generated seeds of corpus/sps and corpus/decode with the ffmpeg command-line tool
# (libx264, libx265): tiny clips in the containers and formats sources meet, and the parameter sets
# inside them. The committed seeds came from this script (Debian 12's ffmpeg 5.1); run it again only
# to add seeds, since other encoder versions write other bytes. Hand-written seeds (http, text,
# config) are files of their own in corpus/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dec=$here/corpus/decode
sps=$here/corpus/sps
mkdir -p "$dec" "$sps"
src=(-f lavfi -i "testsrc2=size=48x32:rate=10:duration=0.3" -bitexact -map_metadata -1)
# libx265 needs a whole 64x64 coding tree unit: smaller frames corrupt its heap (Debian 12's 3.5).
hevc_src=(-f lavfi -i "testsrc2=size=64x64:rate=10:duration=0.3" -bitexact -map_metadata -1)
x265=(-c:v libx265 -x265-params "log-level=error:pools=none:frame-threads=1")
x264=(-c:v libx264 -threads 1 -x264-params "ref=3:bframes=2" -bitexact)

ffmpeg -loglevel error "${src[@]}" -pix_fmt yuv420p "${x264[@]}" -f h264 "$dec/h264_annexb.h264"
ffmpeg -loglevel error "${src[@]}" -pix_fmt yuv420p "${x264[@]}" -movflags +faststart -f mp4 "$dec/h264.mp4"
ffmpeg -loglevel error "${src[@]}" -pix_fmt yuv420p "${x264[@]}" -f mpegts "$dec/h264.ts"
ffmpeg -loglevel error "${src[@]}" -pix_fmt yuvj420p -color_range pc "${x264[@]}" -f matroska "$dec/h264_full_range.mkv"
ffmpeg -loglevel error "${src[@]}" -pix_fmt yuv422p "${x264[@]}" -f h264 "$dec/h264_422.h264"
ffmpeg -loglevel error "${src[@]}" -pix_fmt yuv444p "${x264[@]}" -f h264 "$dec/h264_444.h264"
ffmpeg -loglevel error "${src[@]}" -pix_fmt yuv420p10le "${x264[@]}" -f h264 "$dec/h264_10bit.h264"
ffmpeg -loglevel error "${src[@]}" -pix_fmt gray "${x264[@]}" -f h264 "$dec/h264_gray.h264"
ffmpeg -loglevel error "${hevc_src[@]}" -pix_fmt yuv420p "${x265[@]}" -f hevc "$dec/hevc_annexb.hevc"
ffmpeg -loglevel error "${src[@]}" -pix_fmt yuvj422p -c:v mjpeg -f avi "$dec/mjpeg.avi"
ffmpeg -loglevel error "${src[@]}" -pix_fmt rgb24 -c:v rawvideo -f nut "$dec/rgb24.nut"
# A size change mid-stream (Annex B streams carry a new SPS at the keyframe).
ffmpeg -loglevel error -f lavfi -i "testsrc2=size=32x24:rate=10:duration=0.2" -bitexact -pix_fmt yuv420p "${x264[@]}" \
  -f h264 "$tmp/small.h264"
cat "$tmp/small.h264" "$dec/h264_annexb.h264" >"$dec/h264_size_change.h264"

# Parameter sets: the first byte picks the codec (0 H.264, 1 HEVC), then Annex B bytes (the stream's
# first 96), or the avcC / hvcC record of an MP4.
annexb_seed() { { printf "\\x$1"; head -c 96 "$2"; } >"$3"; }
annexb_seed 00 "$dec/h264_annexb.h264" "$sps/h264_annexb"
annexb_seed 00 "$dec/h264_444.h264" "$sps/h264_444_annexb"
annexb_seed 00 "$dec/h264_10bit.h264" "$sps/h264_10bit_annexb"
annexb_seed 01 "$dec/hevc_annexb.hevc" "$sps/hevc_annexb"
ffmpeg -loglevel error "${hevc_src[@]}" -pix_fmt yuv420p "${x265[@]}" -tag:v hvc1 -f mp4 "$tmp/hevc.mp4"
# record BOX FILE: the payload of the first BOX ('avcC' or 'hvcC') in an MP4 file.
record() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
box, data = sys.argv[1].encode(), open(sys.argv[2], "rb").read()
at = data.index(box)
size = struct.unpack(">I", data[at - 4:at])[0]
sys.stdout.buffer.write(data[at + 4:at - 4 + size])
PY
}
{ printf '\x00'; record avcC "$dec/h264.mp4"; } >"$sps/h264_avcc"
{ printf '\x01'; record hvcC "$tmp/hevc.mp4"; } >"$sps/hevc_hvcc"
ls -l "$dec" "$sps"
