#include "pipeline/exec/cpu_executor.hpp"

#include <algorithm>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <type_traits>
#include <utility>
#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"
#include "pipeline/ops/dispatch.hpp"

namespace framefuse {

ParallelFor::ParallelFor(int threads) {
  const int n = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n; ++i) {
    workers_.emplace_back([this, i] {
      std::unique_lock lock(mu_);
      uint64_t seen = generation_;
      while (true) {
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        work(lock, i);
      }
    });
  }
}

ParallelFor::~ParallelFor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void ParallelFor::work(std::unique_lock<std::mutex>& lock, int worker) {
  ++busy_;
  while (next_ < end_) {
    const int64_t i = next_++;
    lock.unlock();
    call_(fn_, i, worker);
    lock.lock();
  }
  if (--busy_ == 0) done_cv_.notify_all();
}

void ParallelFor::run_erased(int64_t n, void* fn, Call call) {
  std::unique_lock lock(mu_);
  fn_ = fn;
  call_ = call;
  next_ = 0;
  end_ = n;
  ++generation_;
  cv_.notify_all();
  work(lock, 0);
  done_cv_.wait(lock, [&] { return busy_ == 0 && next_ >= end_; });
}

//! One axis of an output's resampling over the resized coordinates its window shows, [lo, hi):
//! coordinate lo + j reads index[j * taps + t] with weight[j * taps + t], t in Resize::sample's
//! order of accumulation. Zero weights are dropped (a zero-weight tap adds exactly +0: every value
//! is finite and >= +0); shorter entries are padded with weight-0 taps on their own first index.
struct AxisTaps {
  int32_t lo = 0, hi = 0, taps = 0;
  std::vector<int32_t> index;
  std::vector<float> weight;
};

//! x.index are positions in `cols`; y.index are source rows relative to the crop window, so
//! control's window moves (control::apply) need no new tables.
struct RowPlan {
  AxisTaps x, y;
  std::vector<int32_t> cols;   //!< crop-relative source columns the x taps read, ascending
  bool dense = false;          //!< cols is one run (a few columns no tap reads may be in it)
  int32_t cache_rows = 1;      //!< row cache size: the widest span of source rows one output row reads
};

namespace {

//! Row buffers hold a pixel as 4 floats: R, G, B and an unused lane (kept 0). A pixel in flight is
//! one SIMD register, each op on it doing per lane exactly the float operation Vec3's operators do.
constexpr int kLanes = 4;
using Px = float __attribute__((vector_size(kLanes * sizeof(float))));

Px load_px(const float* p) {
  Px v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
void store_px(float* p, Px v) { __builtin_memcpy(p, &v, sizeof v); }

//! Output rows per work item: enough items to balance threads, few enough row-cache refills.
constexpr int32_t kBandRows = 16;

//! A row's columns are converted as one run when they span at most this many times their count.
constexpr int32_t kDenseSpan = 2;

//! The row loops get an AVX2 clone beside the baseline (SSE2) one, chosen when the program loads
//! (no -march: hosts differ). AVX2 brings no FMA, and contraction is off: same values either way.
#if defined(__x86_64__) && defined(__GNUC__)
#define FF_ROW_LOOP [[gnu::target_clones("avx2", "default")]]
#else
#define FF_ROW_LOOP
#endif

//! Appends the taps of resized coordinate d on one axis (n source samples) to `t`, as
//! Resize::sample weighs them, and pads the entry to `t.taps`.
void append_taps(ops::Interp interp, int d, double scale, double inv_scale, int n, AxisTaps& t) {
  using R = ops::Resize;
  const size_t begin = t.index.size();
  const auto add = [&](int i, float w) {
    if (w != 0.f) {
      t.index.push_back(i);
      t.weight.push_back(w);
    }
  };
  int first = 0;
  switch (interp) {
    case ops::Interp::Nearest:
      first = R::nearest_tap(d, scale, n);
      add(first, 1.f);   // v * 1 == v: the nearest sample itself
      break;
    case ops::Interp::AreaBox: {
      const R::Box b = R::area_box(d, scale, n);
      first = b.first;
      for (int i = b.first; i <= b.last; ++i) add(i, R::box_weight(b, i));
      break;
    }
    default: {
      const R::Taps2 s = interp == ops::Interp::AreaUp ? R::area_up_taps(d, scale, inv_scale, n)
                                                         : R::linear_taps(d, scale, n);
      first = s.i0;
      add(s.i0, 1.f - s.a);
      add(s.i1, s.a);
      break;
    }
  }
  const int32_t pad_index = t.index.size() > begin ? t.index[begin] : first;
  while (t.index.size() - begin < size_t(t.taps)) {
    t.index.push_back(pad_index);
    t.weight.push_back(0.f);
  }
}

//! The taps of resized coordinates [lo, hi) on one axis, padded to the widest entry.
AxisTaps axis_taps(ops::Interp interp, int lo, int hi, double scale, double inv_scale, int n) {
  AxisTaps t;
  t.lo = lo;
  t.hi = std::max(lo, hi);
  for (int d = t.lo; d < t.hi; ++d) {   // widest entry first, then every entry padded to it
    AxisTaps one;
    append_taps(interp, d, scale, inv_scale, n, one);
    t.taps = std::max(t.taps, static_cast<int32_t>(one.index.size()));
  }
  t.taps = std::max(t.taps, 1);
  for (int d = t.lo; d < t.hi; ++d) append_taps(interp, d, scale, inv_scale, n, t);
  return t;
}

RowPlan make_row_plan(const ops::Chain::Params& p) {
  const ops::Resize::Params& r = p.resize;
  RowPlan plan;
  plan.x = axis_taps(r.interp, std::clamp(p.off_x, 0, r.dst_w), std::clamp(p.off_x + p.store.width, 0, r.dst_w),
                     r.scale_x, r.inv_scale_x, r.src_w);
  plan.y = axis_taps(r.interp, std::clamp(p.off_y, 0, r.dst_h), std::clamp(p.off_y + p.store.height, 0, r.dst_h),
                     r.scale_y, r.inv_scale_y, r.src_h);
  plan.cols = plan.x.index;
  std::sort(plan.cols.begin(), plan.cols.end());
  plan.cols.erase(std::unique(plan.cols.begin(), plan.cols.end()), plan.cols.end());
  if (!plan.cols.empty()) {   // convert whole runs where that costs less than gathering the columns
    const int32_t span = plan.cols.back() - plan.cols.front() + 1;
    if (span <= kDenseSpan * static_cast<int32_t>(plan.cols.size())) {
      const int32_t front = plan.cols.front();
      plan.cols.resize(size_t(span));
      for (int32_t i = 0; i < span; ++i) plan.cols[size_t(i)] = front + i;
      plan.dense = true;
    }
  }
  for (int32_t& i : plan.x.index)
    i = static_cast<int32_t>(std::lower_bound(plan.cols.begin(), plan.cols.end(), i) - plan.cols.begin());
  const int32_t k = plan.y.taps;
  for (size_t e = 0; e * k < plan.y.index.size(); ++e) {
    const auto [lo, hi] = std::minmax_element(plan.y.index.begin() + e * k, plan.y.index.begin() + (e + 1) * k);
    plan.cache_rows = std::max(plan.cache_rows, *hi - *lo + 1);
  }
  return plan;
}

}  // namespace

struct RowScratch {
  std::vector<float> luma, cb, cr;   //!< one source row's samples at the plan's cols
  std::vector<float> src;     //!< one converted source row: the plan's cols
  std::vector<float> cache;   //!< cache_rows horizontally resampled rows, visible width each
  std::vector<int32_t> held;  //!< crop row held by each cache slot, -1 none
  std::vector<float> line;    //!< one output row before the store
  std::vector<float> tmp;     //!< one output row, normalized, before the f16 conversion
};

namespace {

//! YuvToRgb::apply over n samples, planar in and out. (always_inline: compiled into each clone of
//! its caller, AVX2 included.)
[[gnu::always_inline]] inline void yuv_to_rgb(const float* __restrict l, const float* __restrict u,
                                              const float* __restrict v, int n, const ops::YuvToRgb::Params p,
                                              float* __restrict r, float* __restrict g, float* __restrict b) {
  for (int i = 0; i < n; ++i) {
    const ops::Vec3 c = ops::YuvToRgb::apply(l[i], u[i], v[i], p);
    r[i] = c.x;
    g[i] = c.y;
    b[i] = c.z;
  }
}

//! out = the n pixels (r[i], g[i], b[i], 0): a 4 x 4 transpose per 4 pixels.
[[gnu::always_inline]] inline void interleave(const float* r, const float* g, const float* b, int n, float* out) {
  const Px zero{0.f, 0.f, 0.f, 0.f};
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    const Px rv = load_px(r + i), gv = load_px(g + i), bv = load_px(b + i);
    const Px rg0 = __builtin_shufflevector(rv, gv, 0, 4, 1, 5), rg1 = __builtin_shufflevector(rv, gv, 2, 6, 3, 7);
    const Px bz0 = __builtin_shufflevector(bv, zero, 0, 4, 1, 5), bz1 = __builtin_shufflevector(bv, zero, 2, 6, 3, 7);
    store_px(out + kLanes * i, __builtin_shufflevector(rg0, bz0, 0, 1, 4, 5));
    store_px(out + kLanes * (i + 1), __builtin_shufflevector(rg0, bz0, 2, 3, 6, 7));
    store_px(out + kLanes * (i + 2), __builtin_shufflevector(rg1, bz1, 0, 1, 4, 5));
    store_px(out + kLanes * (i + 3), __builtin_shufflevector(rg1, bz1, 2, 3, 6, 7));
  }
  for (; i < n; ++i) store_px(out + kLanes * i, Px{r[i], g[i], b[i], 0.f});
}

//! Converts source row y (frame coordinates) at columns x0 + plan.cols[i] to RGB into s.src:
//! FrameReader::rgb, with the samples gathered first (one run when the columns are dense) so the
//! conversion is a branch-free, vectorised loop.
template <class Reader>
FF_ROW_LOOP void convert_row(const Reader& src, int x0, int y, const RowPlan& plan, RowScratch& s) {
  const int32_t* cols = plan.cols.data();
  const int n = static_cast<int>(plan.cols.size());
  float* out = s.src.data();
  if constexpr (Reader::kYuv) {
    float* l = s.luma.data();
    float* u = s.cb.data();
    float* v = s.cr.data();
    if (plan.dense) {
      src.yuv_run(x0 + cols[0], n, y, l, u, v);
    } else {
      src.yuv_gather(x0, cols, n, y, l, u, v);
    }
    constexpr int kBlock = 16;   // converted, then transposed, while in L1
    alignas(32) float r[kBlock], g[kBlock], b[kBlock];
    int i = 0;
    for (; i + kBlock <= n; i += kBlock) {
      yuv_to_rgb(l + i, u + i, v + i, kBlock, src.color.yuv, r, g, b);
      interleave(r, g, b, kBlock, out + kLanes * i);
    }
    yuv_to_rgb(l + i, u + i, v + i, n - i, src.color.yuv, r, g, b);
    interleave(r, g, b, n - i, out + kLanes * i);
  } else {
    for (int i = 0; i < n; ++i) {
      const ops::Vec3 c = src.rgb(x0 + cols[i], y);
      store_px(out + kLanes * i, Px{c.x, c.y, c.z, 0.f});
    }
  }
}

//! out[j] = 0 + in[index] * weight summed in tap order: Resize::sample's row sums (and its
//! a * (1 - ax) + b * ax for two taps).
template <int Taps>
FF_ROW_LOOP void resample_row(const float* in, const AxisTaps& t, float* out) {
  const int taps = Taps > 0 ? Taps : t.taps;
  const int32_t* index = t.index.data();
  const float* weight = t.weight.data();
  const int n = t.hi - t.lo;
  for (int j = 0; j < n; ++j) {
    Px s = {0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k < taps; ++k) s = s + load_px(in + kLanes * index[j * taps + k]) * weight[j * taps + k];
    store_px(out + kLanes * j, s);
  }
}

void resample(const float* in, const AxisTaps& t, float* out) {
  switch (t.taps) {   // unrolled tap loops for linear and nearest and for area boxes up to 7x
    case 1: return resample_row<1>(in, t, out);
    case 2: return resample_row<2>(in, t, out);
    case 3: return resample_row<3>(in, t, out);
    case 4: return resample_row<4>(in, t, out);
    case 5: return resample_row<5>(in, t, out);
    case 6: return resample_row<6>(in, t, out);
    case 7: return resample_row<7>(in, t, out);
    case 8: return resample_row<8>(in, t, out);
    default: return resample_row<0>(in, t, out);
  }
}

//! acc[i] += h[i] * w over n floats: one row's term of Resize::sample's sum over rows.
FF_ROW_LOOP void accumulate_row(float* __restrict acc, const float* __restrict h, float w, int n) {
  for (int i = 0; i < n; ++i) acc[i] = acc[i] + h[i] * w;
}

//! Row `to` of the frame's tensor becomes a copy of row `from` (every channel plane for CHW).
void copy_row(const ops::Chain::Params& p, std::byte* frame, int from, int to) {
  const ops::Store::Params& st = p.store;
  const int64_t element = ops::dtype_size(st.dtype);
  if (st.layout == ops::Layout::Hwc) {
    const int64_t bytes = int64_t(st.width) * st.channels * element;
    std::copy_n(frame + from * bytes, bytes, frame + to * bytes);
    return;
  }
  const int64_t bytes = int64_t(st.width) * element;
  for (int64_t c = 0; c < st.channels; ++c)
    std::copy_n(frame + (c * st.height + from) * bytes, bytes, frame + (c * st.height + to) * bytes);
}

//! Output channel c of a row-buffer pixel in the order C (Chain::pixel's switch).
template <ops::Channels C, int c>
float channel(const float* px) {
  if constexpr (C == ops::Channels::Gray) {
    return ops::rgb_to_gray({px[0], px[1], px[2]});
  } else if constexpr (C == ops::Channels::Bgr) {
    return px[2 - c];
  } else {
    return px[c];
  }
}

template <ops::DType D>
using Element = std::conditional_t<D == ops::DType::F32, float,
                                   std::conditional_t<D == ops::DType::F16, uint16_t, uint8_t>>;

//! Store::apply's element conversion; T = float keeps the normalized value (f16 staging).
template <ops::DType D, class T = Element<D>>
T element(float v) {
  if constexpr (D == ops::DType::F32 || std::is_same_v<T, float>) {
    return v;
  } else if constexpr (D == ops::DType::F16) {
    return ops::to_half_bits(v);
  } else {
    return ops::saturate_u8(v);
  }
}

//! out[i] = ops::to_half_bits(in[i]). Where the CPU has F16C, its conversion (IEEE round to
//! nearest even, so the same bits for every non-NaN input) with NaNs made to_half_bits' quiet NaN;
//! equal for all 2^32 inputs (checked exhaustively when this was written).
#if defined(__x86_64__) && defined(__GNUC__)
[[gnu::target("avx,f16c")]] void to_half_run_f16c(const float* in, uint16_t* out, int n) {
  const __m128i magnitude = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00), qnan = _mm_set1_epi16(0x7e00);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, magnitude), inf);
    h = _mm_blendv_epi8(h, _mm_or_si128(_mm_andnot_si128(magnitude, h), qnan), nan);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = ops::to_half_bits(in[i]);
}
#endif

void to_half_run(const float* in, uint16_t* out, int n) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool f16c = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  }();
  if (f16c) return to_half_run_f16c(in, out, n);
#endif
  for (int i = 0; i < n; ++i) out[i] = ops::to_half_bits(in[i]);
}

//! Channel order, normalize and store of one output row (pixels `line`, pad included) into row y
//! of the frame's tensor `frame`. Channels are compile-time, so each loop is one vectorised pass;
//! f16 goes through `tmp` (3 x width floats) and to_half_run.
template <ops::Channels C, ops::DType D, ops::Layout L>
FF_ROW_LOOP void store_row(const float* __restrict line, const ops::Chain::Params& p, std::byte* frame, int y,
                           float* __restrict tmp) {
  using T = std::conditional_t<D == ops::DType::F16, float, Element<D>>;   // f16: floats into tmp first
  constexpr int channels = C == ops::Channels::Gray ? 1 : 3;
  const int w = p.store.width;
  const ops::Normalize::Params norm = p.norm;   // a copy the stores cannot alias
  const auto target = [&](int64_t offset) -> T* {
    if constexpr (D == ops::DType::F16) {
      return tmp;
    } else {
      return reinterpret_cast<T*>(frame) + offset;
    }
  };
  const auto finish = [&](int64_t offset, int n) {
    if constexpr (D == ops::DType::F16) to_half_run(tmp, reinterpret_cast<uint16_t*>(frame) + offset, n);
  };
  [&]<int... c>(std::integer_sequence<int, c...>) {
    if constexpr (L == ops::Layout::Chw) {
      (
          [&] {
            const int64_t offset = (int64_t(c) * p.store.height + y) * w;
            T* __restrict out = target(offset);
            for (int x = 0; x < w; ++x)
              out[x] = element<D, T>(ops::Normalize::apply(channel<C, c>(line + kLanes * x), c, norm));
            finish(offset, w);
          }(),
          ...);
    } else {
      const int64_t offset = int64_t(y) * w * channels;
      T* __restrict out = target(offset);
      for (int x = 0; x < w; ++x)
        ((out[x * channels + c] = element<D, T>(ops::Normalize::apply(channel<C, c>(line + kLanes * x), c, norm))),
         ...);
      finish(offset, w * channels);
    }
  }(std::make_integer_sequence<int, channels>{});
}

using StoreRow = void (*)(const float*, const ops::Chain::Params&, std::byte*, int, float*);

template <ops::Channels C, ops::DType D>
StoreRow store_for(ops::Layout l) {
  return l == ops::Layout::Chw ? store_row<C, D, ops::Layout::Chw> : store_row<C, D, ops::Layout::Hwc>;
}

template <ops::Channels C>
StoreRow store_for(ops::DType d, ops::Layout l) {
  switch (d) {
    case ops::DType::F32: return store_for<C, ops::DType::F32>(l);
    case ops::DType::F16: return store_for<C, ops::DType::F16>(l);
    case ops::DType::U8: break;
  }
  return store_for<C, ops::DType::U8>(l);
}

StoreRow store_for(const ops::Chain::Params& p) {
  switch (p.channels) {
    case ops::Channels::Rgb: return store_for<ops::Channels::Rgb>(p.store.dtype, p.store.layout);
    case ops::Channels::Bgr: return store_for<ops::Channels::Bgr>(p.store.dtype, p.store.layout);
    case ops::Channels::Gray: break;
  }
  return store_for<ops::Channels::Gray>(p.store.dtype, p.store.layout);
}

//! Output rows [y_begin, y_end) of output `p` (control applied) of the frame read by `src`, into
//! that frame's tensor `frame`: Chain::pixel's values, a row at a time.
template <class Reader>
void run_band(const Reader& src, const ops::Chain::Params& p, const RowPlan& plan, std::byte* frame, int y_begin,
              int y_end, RowScratch& s) {
  const StoreRow store = store_for(p);
  const int w = p.store.width;
  const int visible = plan.x.hi - plan.x.lo;   // resized columns the window shows ...
  const int first = plan.x.lo - p.off_x;       // ... from this output column on
  const auto fill_pad = [&](float* px, int n) {
    for (int i = 0; i < n; ++i) store_px(px + kLanes * i, Px{p.pad[0], p.pad[1], p.pad[2], 0.f});
  };
  std::fill(s.held.begin(), s.held.begin() + plan.cache_rows, -1);
  const auto resampled_row = [&](int r) -> const float* {   // crop row r after the horizontal pass
    const int slot = r % plan.cache_rows;
    float* h = s.cache.data() + size_t(slot) * visible * kLanes;
    if (s.held[slot] != r) {
      convert_row(src, p.resize.x0, p.resize.y0 + r, plan, s);
      resample(s.src.data(), plan.x, h);
      s.held[slot] = r;
    }
    return h;
  };
  float* line = s.line.data();
  int pad_row = -1;   // an all-pad row already stored in this band
  for (int y = y_begin; y < y_end; ++y) {
    const int ry = y + p.off_y;
    if (visible == 0 || ry < plan.y.lo || ry >= plan.y.hi) {
      if (pad_row >= 0) {
        copy_row(p, frame, pad_row, y);
        continue;
      }
      fill_pad(line, w);
      pad_row = y;
    } else {
      fill_pad(line, first);
      fill_pad(line + kLanes * (first + visible), w - first - visible);
      float* acc = line + kLanes * first;
      std::fill(acc, acc + kLanes * visible, 0.f);
      const int e = (ry - plan.y.lo) * plan.y.taps;
      for (int t = 0; t < plan.y.taps; ++t) {   // Resize::sample's sum over rows, in its order
        const float wy = plan.y.weight[e + t];
        if (wy == 0.f) continue;   // would add exactly +0
        accumulate_row(acc, resampled_row(plan.y.index[e + t]), wy, kLanes * visible);
      }
    }
    store(line, p, frame, y, s.tmp.data());
  }
}

}  // namespace

CpuExecutor::CpuExecutor(int threads) : pool_(threads) {}

CpuExecutor::~CpuExecutor() = default;

std::string CpuExecutor::name() const { return fmt::format("cpu ({} threads)", pool_.threads()); }

void CpuExecutor::setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
                        int /*max_batch*/) {
  frame_ = frame;
  color_ = color;
  params_.clear();
  for (const auto& p : plans) params_.push_back(p.params);
  visible_ = plans.size();
  control_.reset();
  plan_rows();
}

void CpuExecutor::setup_control(const control::ControlParams& params) {
  if (params.num_outputs != static_cast<int32_t>(visible_) || params.frame_w != frame_.width ||
      params.frame_h != frame_.height)
    throw ConfigError("cpu executor: control was planned for other outputs or frames than setup()");
  params_.resize(visible_);
  params_.push_back(params.thumbnail);
  plan_rows();
  control_.emplace();
  control_->setup(params);
}

void CpuExecutor::plan_rows() {
  rows_.clear();
  bands_.clear();
  size_t src = 0, cache = 0, held = 0, line = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    const ops::Chain::Params& p = params_[k];
    const RowPlan& plan = rows_.emplace_back(make_row_plan(p));
    src = std::max(src, plan.cols.size());
    cache = std::max(cache, size_t(plan.cache_rows) * size_t(plan.x.hi - plan.x.lo));
    held = std::max(held, size_t(plan.cache_rows));
    line = std::max(line, size_t(p.store.width));
    for (int32_t y = 0; y < p.store.height; y += kBandRows)
      bands_.push_back({static_cast<int32_t>(k), y, std::min(p.store.height, y + kBandRows)});
  }
  scratch_.assign(size_t(pool_.threads()), RowScratch{});
  for (RowScratch& s : scratch_) {
    for (auto* v : {&s.luma, &s.cb, &s.cr}) v->resize(src);
    s.src.resize(kLanes * src);
    s.cache.resize(kLanes * cache);
    s.held.resize(held);
    s.line.resize(kLanes * line);
    s.tmp.resize(3 * line);
  }
}

std::optional<control::ControlRecord> CpuExecutor::control_record() const {
  if (!control_ || control_->block().header.iteration == 0) return std::nullopt;
  return control_->record();
}

void CpuExecutor::process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) {
  if (outs.size() != visible_) throw ConfigError("cpu executor: output count differs from setup()");
  if (!control_) {
    run_rows(frames, 0, frames.size(), outs, nullptr);
    return;
  }
  for (size_t b = 0; b < frames.size(); ++b) {
    control_->control_step();
    run_rows(frames, b, 1, outs, &*control_);
    control_->stats_step();
  }
}

void CpuExecutor::run_rows(std::span<const ops::ImageView> frames, size_t first, size_t count,
                           std::span<std::byte* const> outs, control::ControlEngine* control) {
  const int64_t bands = static_cast<int64_t>(bands_.size());
  const control::ControlState* state = control ? &control->state() : nullptr;
  float* thumbnail = control ? control->thumbnail() : nullptr;
  ops::dispatch_format(frame_.format, [&](auto tag) {
    using Reader = ops::FrameReader<decltype(tag)::value>;
    pool_.run(bands * static_cast<int64_t>(count), [&](int64_t item, int worker) {
      const size_t b = first + static_cast<size_t>(item / bands);
      const Band& band = bands_[static_cast<size_t>(item % bands)];
      const size_t k = static_cast<size_t>(band.output);
      ops::Chain::Params p = params_[k];
      std::byte* frame;
      if (k < visible_) {
        if (state) control::apply(*state, static_cast<int>(k), p);
        frame = outs[k] + p.frame_stride * static_cast<int64_t>(b);
      } else {   // the control thumbnail: one buffer, the current frame's
        frame = reinterpret_cast<std::byte*>(thumbnail);
      }
      const Reader src{frames[b], color_};
      run_band(src, p, rows_[k], frame, band.y_begin, band.y_end, scratch_[static_cast<size_t>(worker)]);
    });
  });
}

std::unique_ptr<Executor> make_cpu_executor(int threads) { return std::make_unique<CpuExecutor>(threads); }

}  // namespace framefuse
