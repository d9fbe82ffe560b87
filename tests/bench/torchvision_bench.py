#!/usr/bin/env python3
"""gpu_bench's workloads through torchvision.transforms.v2 on the GPU, for "ours vs torchvision".

Input: uint8 RGB tensors [B, 3, 1080, 1920] already on the GPU. Our chain starts from NV12 and its
time includes the NV12 -> RGB conversion; torchvision is handed RGB for free. Resizes are bilinear
without antialias (what our `linear` is). Inputs rotate among 128 frames (~800 MB, past the L2).
Modes: eager, and torch.compile (default mode). Prints µs per frame; --json FILE writes them.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
POOL = 128
ITERS = 32

_classify = v2.Compose([v2.Resize(256, antialias=False), v2.CenterCrop(224),
                        v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def classify(x):
    """Resize(256) -> CenterCrop(224) -> f32 / 255 -> ImageNet normalize, CHW."""
    return _classify(x)


def detect(x):
    """Letterbox 1920x1080 into 640x640: resize to 640x360, pad 140 rows of 114 above and below, / 255, f16."""
    x = F.resize(x, [360, 640], antialias=False)
    x = F.pad(x, [0, 140, 0, 140], fill=114)
    return F.to_dtype(x, torch.float16, scale=True)


def thumbnail(x):
    """320x180, u8, HWC."""
    return F.resize(x, [180, 320], antialias=False).permute(0, 2, 3, 1).contiguous()


def three(x):
    return classify(x), detect(x), thumbnail(x)


WORKLOADS = {"classify": classify, "detect": detect, "classify+detect+thumb": three}


def time_us_per_frame(fn, pool, batch, samples):
    sets = POOL // batch
    inputs = [pool[i * batch:(i + 1) * batch] for i in range(sets)]
    for i in range(2 * sets if sets < ITERS else ITERS):
        fn(inputs[i % sets])
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    us, i = [], 0
    for _ in range(samples):
        start.record()
        for _ in range(ITERS):
            fn(inputs[i % sets])
            i += 1
        stop.record()
        stop.synchronize()
        us.append(1e3 * start.elapsed_time(stop) / ITERS / batch)
    return statistics.median(us)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--samples", type=int, default=11)
    ap.add_argument("--no-compile", action="store_true", help="eager only")
    ap.add_argument("--compile-budget-s", type=float, default=100,
                    help="start no further torch.compile measurement after this many seconds")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torchvision_bench: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    pool = torch.randint(0, 256, (POOL, 3, 1080, 1920), dtype=torch.uint8, device="cuda")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"torchvision {__import__('torchvision').__version__}", flush=True)
    results = []
    began = time.time()
    for name, fn in WORKLOADS.items():
        modes = [("eager", fn)]
        if not args.no_compile:
            modes.append(("compile", torch.compile(fn, dynamic=False)))
        for batch in (1, 16):
            for mode, f in modes:
                if mode == "compile" and time.time() - began > args.compile_budget_s:
                    print(f"{name} B={batch} compile: skipped (past --compile-budget-s)", flush=True)
                    continue
                t0 = time.time()
                us = time_us_per_frame(f, pool, batch, args.samples)
                results.append({"workload": name, "batch": batch, "mode": mode, "us_per_frame": us})
                print(f"{name} B={batch} {mode}: {us:.2f} us/frame ({time.time() - t0:.0f} s incl. warm-up/compile)",
                      flush=True)
    print("\n| workload | B | torchvision eager | torchvision compile |\n|---|---|---|---|")
    for name in WORKLOADS:
        for batch in (1, 16):
            row = {r["mode"]: r["us_per_frame"] for r in results if r["workload"] == name and r["batch"] == batch}
            compiled = f"{row['compile']:.2f}" if "compile" in row else "-"
            print(f"| {name} | {batch} | {row['eager']:.2f} | {compiled} |")
    print("(µs per frame, input uint8 RGB already on the GPU)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
