#include "pipeline/fused/fused_kernel.hpp"
#include "pipeline/control/stats_blocks.cuh"
#include "pipeline/ops/dispatch.hpp"

#include <type_traits>

namespace framefuse {
namespace {

constexpr int kStageThreads = 512;

// Blocks per multiprocessor the compiler must allow for, which caps registers per thread. sm_90
// (H200), classify / detect / three outputs at batch 16, kernel alone (tests/bench/RESULTS.md,
// session 2): 6 blocks (40 registers) 1.00 / 2.69 / 4.47 us per frame; 5 blocks (48) 1.39 / 2.82 /
// 4.68; 4 blocks (64) 1.38 / 3.16 / 5.15. Other architectures keep the compiler's choice (not measured).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define FF_FUSED_MIN_BLOCKS 6
#else
#define FF_FUSED_MIN_BLOCKS 1
#endif

//! Programmatic dependent launch (sm_90+; no-ops elsewhere and when launched without it): the
//! upload lets the fused kernel start, and the fused kernel waits for the upload's completion and
//! memory (griddepcontrol.wait) before it reads the per-call block.
__device__ __forceinline__ void let_dependents_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_upload() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

//! Output k's pixels of thread column x, rows y0, y0 + kBlockRows, ... (R of them), variant V
//! (fused_params.hpp). Before wait_for_upload it reads only the by-value launch data and the tap
//! tables, which setup() wrote.
template <ops::PixelFormat F, int R, int V>
__device__ __forceinline__ void run_tile(const FusedLaunch& launch, int k, int b, int x, int y0) {
  const FusedOutput& o = launch.outputs[k];
  ops::Chain::Params p = o.params;
  if constexpr (V < kNumFixedStores) {
    p.channels = kFixedStores[V].channels;
    p.store.layout = kFixedStores[V].layout;
    p.store.dtype = kFixedStores[V].dtype;
  }
  ops::Resize::Taps2 tx{};
  bool col_inside = false;
  if constexpr (V != kVariantBox) {
    const AxisTap col = o.cols[x];
    tx = col.taps;
    col_inside = col.inside != 0;
  }
  // With control: this output's control in both parities (fused_control.hpp), picked below.
  control::OutputControl controls[2];
  int32_t frame_w = 0, frame_h = 0;
  if (const control::FusedControl* c = launch.control) {
    controls[0] = c->applied[0].out[k];
    controls[1] = c->applied[1].out[k];
    frame_w = c->applied[0].frame_w;
    frame_h = c->applied[0].frame_h;
  }
  wait_for_upload();
  const FusedParams& block = *launch.block;
  if (b >= block.num_frames) return;   // uniform per block
  const ops::FrameReader<F> src{block.frames[b].image, block.frames[b].color};
  // Frame b's tensor: Chain::pixel / emit then see batch frame 0 (the same addresses, fewer registers).
  p.store.data = static_cast<uint8_t*>(block.out[k]) + p.frame_stride * b;
  if (const control::FusedControl* c = launch.control)
    // A select, not an index: `controls` stays in registers.
    control::apply((control::launch_iteration(*c, b) & 1u) ? controls[1] : controls[0], frame_w, frame_h, p);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int y = y0 + i * kBlockRows;
    if (y >= p.store.height) break;
    if constexpr (V == kVariantBox) {
      ops::Chain::pixel(src, p, 0, x, y);
    } else {
      const AxisTap row = o.rows[y];
      // Chain::pixel with the resize taps from the tables: the pad outside the resized image.
      const ops::Vec3 v = col_inside && row.inside != 0
                              ? ops::Resize::blend(src, p.resize.x0, p.resize.y0, tx, row.taps)
                              : ops::Vec3{p.pad[0], p.pad[1], p.pad[2]};
      ops::Chain::emit(p, 0, x, y, v);
    }
  }
}

constexpr int kOnlyFixed = -1, kAnyVariant = -2, kWithControl = -3, kControlOnlyFixed = -4;   //!< fused_kernel's M
//! M = kControlFixed + v: with control, every output fixed store v (0 .. kNumFixedStores - 1).
constexpr int kControlFixed = 16;
constexpr bool with_control(int m) { return m == kWithControl || m == kControlOnlyFixed || m >= kControlFixed; }

//! One block = one tile of one output of one frame (first_frame + blockIdx.y); a block finds its
//! output and tile from the by-value launch data alone. Each thread computes R pixels of its
//! column, kBlockRows rows apart, so a warp always covers 32 consecutive pixels of a row
//! (coalesced source taps and stores). The switch on the output's variant is uniform per block.
//! M, the variants an instantiation compiles (fewer: fewer registers, no spills; sm_90 at 40
//! registers, 4 rows per thread: any variant spills ~1 KB, one fixed store none): one fixed store
//! (0 .. kNumFixedStores - 1), any fixed store, any variant, or with control (launch.control set)
//! any variant, any fixed store or one fixed store: blocks below launch.stats_blocks then run the
//! control (finisher and statistics).
template <ops::PixelFormat F, int R, int M>
__global__ void __launch_bounds__(kBlockThreads, FF_FUSED_MIN_BLOCKS)
    fused_kernel(const __grid_constant__ FusedLaunch launch, int first_frame) {
  const int b = first_frame + static_cast<int>(blockIdx.y);
  int tile = static_cast<int>(blockIdx.x);
  if constexpr (with_control(M)) {
    tile -= launch.stats_blocks;
    if (tile < 0) {   // uniform per block: pipeline/control/stats_blocks.cuh
      control::control_block<F>(launch, b, static_cast<int>(blockIdx.x), [] { wait_for_upload(); });
      return;
    }
  }
  int k = 0;
#pragma unroll
  for (int j = 1; j < kMaxOutputs; ++j) k += tile >= launch.tile_begin[j] ? 1 : 0;
  const int local = tile - launch.tile_begin[k];
  const int tiles_x = launch.tiles_x[k];
  const int x = (local % tiles_x) * kTileW + static_cast<int>(threadIdx.x % kTileW);
  const int y0 = (local / tiles_x) * (kBlockRows * R) + static_cast<int>(threadIdx.x / kTileW);
  if (x >= launch.outputs[k].params.store.width) return;
  const int variant = M >= kControlFixed ? M - kControlFixed : M < 0 ? launch.outputs[k].variant : M;
  switch (variant) {
    case 0: return run_tile<F, R, 0>(launch, k, b, x, y0);
    case 1: return run_tile<F, R, 1>(launch, k, b, x, y0);
    case 2: return run_tile<F, R, 2>(launch, k, b, x, y0);
  }
  if constexpr (M == kAnyVariant || M == kWithControl) {
    if (variant == kVariantTaps) return run_tile<F, R, kVariantTaps>(launch, k, b, x, y0);
    run_tile<F, R, kVariantBox>(launch, k, b, x, y0);
  }
}
static_assert(kNumFixedStores == 3, "fused_kernel's switch lists the fixed stores");

//! Copies the parameter block from pinned host memory (device-readable under UVA) to its device
//! copy: one block, 16-byte words, so the read crosses the bus once; with `control`, also starts
//! its batch of the block's num_frames launches (control::begin_batch) in thread 0, from the first
//! word it copies (num_frames) and the iteration count it fetched beside it: no memory round trip
//! after the copy. Lets the fused kernel after it start at once (it waits for this kernel's
//! completion before reading the block).
__global__ void __launch_bounds__(kStageThreads) stage_params(const uint4* __restrict__ host,
                                                              uint4* __restrict__ device, int words,
                                                              control::FusedControl* control) {
  static_assert(offsetof(FusedParams, num_frames) == 0, "num_frames is the first word's x");
  let_dependents_start();
  const bool starts_batch = control && threadIdx.x == 0;
  const uint64_t launches = starts_batch ? control->launches : 0;
  for (int i = static_cast<int>(threadIdx.x); i < words; i += kStageThreads) {
    const uint4 w = host[i];
    device[i] = w;
    if (i == 0 && starts_batch) control::begin_batch(*control, launches, static_cast<int32_t>(w.x));
  }
}

//! One block: closes the iteration a d >= 2 control left open (control::detail::finish_late).
__global__ void __launch_bounds__(control::kStatsThreads) flush_control(control::FusedControl* control) {
  control::detail::finish_late(*control, control::num_regions(control->params), false);
}

//! Launches `kernel` as one block of `threads` on `stream`: the launch's own status, not an earlier
//! call's left-over error (which cudaGetLastError after a <<<>>> launch would return).
template <class... Params, class... Args>
cudaError_t launch_one_block(void (*kernel)(Params...), int threads, cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

//! The narrowest instantiation (fused_kernel's M) that computes every output of `launch`.
int kernel_variants(const FusedLaunch& launch) {
  bool same = true, fixed = true;
  for (int k = 0; k < launch.num_outputs; ++k) {
    same = same && launch.outputs[k].variant == launch.outputs[0].variant;
    fixed = fixed && launch.outputs[k].variant < kNumFixedStores;
  }
  const int m = !fixed ? kAnyVariant : same ? launch.outputs[0].variant : kOnlyFixed;
  if (launch.control) return m >= 0 ? kControlFixed + m : m == kOnlyFixed ? kControlOnlyFixed : kWithControl;
  return m;
}

//! Calls fn(kernel) with the instantiation for `format`, `rows_per_thread` and `variants` (M).
template <class Fn>
cudaError_t with_kernel(ops::PixelFormat format, int rows_per_thread, int variants, Fn&& fn) {
  return ops::dispatch_format(format, [&](auto tag) {
    constexpr ops::PixelFormat F = decltype(tag)::value;
    const auto pick = [&](auto rows) {
      constexpr int R = decltype(rows)::value;
      switch (variants) {
        case 0: return fn(fused_kernel<F, R, 0>);
        case 1: return fn(fused_kernel<F, R, 1>);
        case 2: return fn(fused_kernel<F, R, 2>);
        case kOnlyFixed: return fn(fused_kernel<F, R, kOnlyFixed>);
        case kWithControl: return fn(fused_kernel<F, R, kWithControl>);
        case kControlOnlyFixed: return fn(fused_kernel<F, R, kControlOnlyFixed>);
        case kControlFixed + 0: return fn(fused_kernel<F, R, kControlFixed + 0>);
        case kControlFixed + 1: return fn(fused_kernel<F, R, kControlFixed + 1>);
        case kControlFixed + 2: return fn(fused_kernel<F, R, kControlFixed + 2>);
        default: return fn(fused_kernel<F, R, kAnyVariant>);
      }
    };
    switch (rows_per_thread) {
      case 1: return pick(std::integral_constant<int, 1>{});
      case 2: return pick(std::integral_constant<int, 2>{});
      case 4: return pick(std::integral_constant<int, 4>{});
      default: return cudaErrorInvalidValue;
    }
  });
}

}  // namespace

cudaError_t launch_fused(ops::PixelFormat format, int rows_per_thread, const FusedLaunch& launch, int32_t first_frame,
                         int32_t frames, cudaStream_t stream) {
  const int32_t tiles = launch.tile_begin[kMaxOutputs];
  if (tiles <= 0 || first_frame < 0 || frames <= 0 || first_frame + frames > kMaxBatch) return cudaErrorInvalidValue;
  return with_kernel(format, rows_per_thread, kernel_variants(launch), [&](auto kernel) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(launch.stats_blocks + tiles), static_cast<unsigned>(frames));
    config.blockDim = dim3(kBlockThreads);
    config.stream = stream;
    config.attrs = &attr;
    // With control only a batch's first launch overlaps the upload before it: the blocks of a later
    // one read, before their wait, what the launch before it wrote (fused_control.hpp).
    config.numAttrs = launch.control && first_frame > 0 ? 0 : 1;
    return cudaLaunchKernelEx(&config, kernel, launch, first_frame);
  });
}

cudaError_t stage_fused_params(const void* host, void* device, size_t bytes, control::FusedControl* control,
                               cudaStream_t stream) {
  if (bytes == 0 || bytes % 16 != 0) return cudaErrorInvalidValue;
  return launch_one_block(stage_params, kStageThreads, stream, static_cast<const uint4*>(host),
                          static_cast<uint4*>(device), static_cast<int>(bytes / 16), control);
}

cudaError_t flush_fused_control(control::FusedControl* control, cudaStream_t stream) {
  return launch_one_block(flush_control, control::kStatsThreads, stream, control);
}

cudaError_t fused_blocks_per_sm(ops::PixelFormat format, int rows_per_thread, int* blocks) {
  return with_kernel(format, rows_per_thread, kAnyVariant, [&](auto kernel) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, kBlockThreads, 0);
  });
}

}  // namespace framefuse
