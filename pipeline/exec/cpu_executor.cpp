#include "pipeline/exec/cpu_executor.hpp"

#include <algorithm>
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
    (*fn_)(i, worker);
    lock.lock();
  }
  if (--busy_ == 0) done_cv_.notify_all();
}

void ParallelFor::run(int64_t n, const std::function<void(int64_t, int)>& fn) {
  std::unique_lock lock(mu_);
  fn_ = &fn;
  next_ = 0;
  end_ = n;
  ++generation_;
  cv_.notify_all();
  work(lock, 0);
  done_cv_.wait(lock, [&] { return busy_ == 0 && next_ >= end_; });
}

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
};

namespace {

//! Converts source row y (frame coordinates) at columns x0 + cols[i] to RGB: FrameReader::rgb, with
//! the samples gathered first so the conversion runs as a branch-free, vectorised loop.
template <class Reader>
void convert_row(const Reader& src, int x0, int y, const std::vector<int32_t>& cols, RowScratch& s) {
  const int n = static_cast<int>(cols.size());
  float* __restrict out = s.src.data();
  if constexpr (Reader::kYuv) {
    float* __restrict l = s.luma.data();
    float* __restrict u = s.cb.data();
    float* __restrict v = s.cr.data();
    for (int i = 0; i < n; ++i) src.yuv(x0 + cols[i], y, l[i], u[i], v[i]);
    const ops::YuvToRgb::Params p = src.color.yuv;
    for (int i = 0; i < n; ++i) {
      const ops::Vec3 c = ops::YuvToRgb::apply(l[i], u[i], v[i], p);
      out[kLanes * i] = c.x;
      out[kLanes * i + 1] = c.y;
      out[kLanes * i + 2] = c.z;
      out[kLanes * i + 3] = 0.f;
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const ops::Vec3 c = src.rgb(x0 + cols[i], y);
      out[kLanes * i] = c.x;
      out[kLanes * i + 1] = c.y;
      out[kLanes * i + 2] = c.z;
      out[kLanes * i + 3] = 0.f;
    }
  }
}

//! out[j] = 0 + in[index] * weight summed in tap order: Resize::sample's row sums (and its
//! a * (1 - ax) + b * ax for two taps).
template <int Taps>
void resample_row(const float* in, const AxisTaps& t, float* out) {
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
  switch (t.taps) {
    case 1: return resample_row<1>(in, t, out);
    case 2: return resample_row<2>(in, t, out);
    default: return resample_row<0>(in, t, out);
  }
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

//! Store::apply's element conversion.
template <ops::DType D>
Element<D> element(float v) {
  if constexpr (D == ops::DType::F32) {
    return v;
  } else if constexpr (D == ops::DType::F16) {
    return ops::to_half_bits(v);
  } else {
    return ops::saturate_u8(v);
  }
}

//! Channel order, normalize and store of one output row (pixels `line`, pad included) into row y
//! of the frame's tensor `frame`. Channels are compile-time, so each loop is one vectorised pass.
template <ops::Channels C, ops::DType D, ops::Layout L>
void store_row(const float* __restrict line, const ops::Chain::Params& p, std::byte* frame, int y) {
  using T = Element<D>;
  constexpr int channels = C == ops::Channels::Gray ? 1 : 3;
  const int w = p.store.width;
  const ops::Normalize::Params norm = p.norm;   // a copy the stores cannot alias
  T* __restrict base = reinterpret_cast<T*>(frame);
  [&]<int... c>(std::integer_sequence<int, c...>) {
    if constexpr (L == ops::Layout::Chw) {
      (
          [&] {
            T* __restrict out = base + (int64_t(c) * p.store.height + y) * w;
            for (int x = 0; x < w; ++x)
              out[x] = element<D>(ops::Normalize::apply(channel<C, c>(line + kLanes * x), c, norm));
          }(),
          ...);
    } else {
      T* __restrict out = base + int64_t(y) * w * channels;
      for (int x = 0; x < w; ++x)
        ((out[x * channels + c] = element<D>(ops::Normalize::apply(channel<C, c>(line + kLanes * x), c, norm))), ...);
    }
  }(std::make_integer_sequence<int, channels>{});
}

using StoreRow = void (*)(const float*, const ops::Chain::Params&, std::byte*, int);

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
      convert_row(src, p.resize.x0, p.resize.y0 + r, plan.cols, s);
      resample(s.src.data(), plan.x, h);
      s.held[slot] = r;
    }
    return h;
  };
  float* line = s.line.data();
  for (int y = y_begin; y < y_end; ++y) {
    const int ry = y + p.off_y;
    if (visible == 0 || ry < plan.y.lo || ry >= plan.y.hi) {
      fill_pad(line, w);
    } else {
      fill_pad(line, first);
      fill_pad(line + kLanes * (first + visible), w - first - visible);
      float* __restrict acc = line + kLanes * first;
      const int n = kLanes * visible;
      std::fill(acc, acc + n, 0.f);
      const int e = (ry - plan.y.lo) * plan.y.taps;
      for (int t = 0; t < plan.y.taps; ++t) {   // Resize::sample's sum over rows, in its order
        const float wy = plan.y.weight[e + t];
        if (wy == 0.f) continue;   // would add exactly +0
        const float* __restrict h = resampled_row(plan.y.index[e + t]);
        for (int i = 0; i < n; ++i) acc[i] = acc[i] + h[i] * wy;
      }
    }
    store(line, p, frame, y);
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
    s.luma.resize(src);
    s.cb.resize(src);
    s.cr.resize(src);
    s.src.resize(kLanes * src);
    s.cache.resize(kLanes * cache);
    s.held.resize(held);
    s.line.resize(kLanes * line);
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
