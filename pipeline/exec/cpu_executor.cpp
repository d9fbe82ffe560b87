#include "pipeline/exec/cpu_executor.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <iterator>
#include <map>
#include <string_view>
#if defined(__x86_64__)
#include <cpuid.h>
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
  workers_.clear();   // joined here, while the mutex and condition variables they wait on still exist
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

//! Outputs per block of the box path, and the samples in one half of a gather block: 8 floats.
constexpr int32_t kPickLanes = 8;
//! Slots per block of a byte gather: two halves.
constexpr int32_t kPickSlots = 2 * kPickLanes;
//! A block's bytes lie in at most this many 16-byte windows, else the gather is not built.
constexpr int32_t kMaxPickRegs = 4;
//! The widest box (columns per output) of the box path, and of its VBMI loop (16 outputs' NV12
//! chroma bytes within 128).
constexpr int32_t kMaxBox = 8;
constexpr int32_t kMaxVbmiBox = 7;
//! The most source rows per output row of the box path's fused vertical pass (box_rows).
constexpr int32_t kMaxBoxRows = 16;

//! A gather of bytes pos[i] of one row (offsets from a row pointer) done by shuffles: block b (slots
//! 16b .. 16b + 15) loads `regs` 16-byte windows from byte base[b], and masks[group[b] + r] moves
//! window r's bytes into their slots (0x80: none); equal mask groups are stored once. pos is padded
//! to whole blocks with its last offset. A block's halves (slots 0-7, 8-15) become two 8-float vectors.
struct BytePicks {
  int32_t regs = 0;   //!< 0: not built (a block spans too many windows)
  std::vector<int32_t> pos, base, group;
  std::vector<std::array<uint8_t, 16>> masks;
};

//! A gather of bytes of one row by AVX-512 VBMI byte permutes, 16 slots (a block) at a time: block b
//! reads the 128 bytes from base[b], and slot i of plane k is byte idx[group[k][b]][4i] of them
//! (planes: luma; or chroma U and V, from one NV12 window, or at equal offsets of the U and V rows).
//! Equal index vectors are stored once. Empty where a block spans 128 bytes or more.
struct VbmiPicks {
  std::vector<int32_t> base, group[2];
  std::vector<std::array<uint8_t, 64>> idx;
};

//! x.index are positions in `cols`; y.index are source rows relative to the crop window, so
//! control's window moves (control::apply) need no new tables.
//! 8-bit YUV frames with nearest chroma gather their samples by shuffles (`luma`, and chroma picks
//! for an even and an odd crop x0, as chroma column (x0 + c) >> 1 depends on its parity): luma 16
//! columns a block; NV12 chroma U of 8 columns in one half and their V in the other, planar YUV
//! 16 columns a block, read from the U row and from the V row.
//! Box path (`box` > 0): every x entry is `box` consecutive columns of one weight (INTER_AREA at an
//! integer factor). Per block of 8 outputs, a luma half holds tap k of the 8 (taps 2q, 2q + 1 in
//! block q) and chroma one plane per distinct chroma column offset (cplane[parity][k]: tap k's
//! plane; an even factor puts two taps on each column): NV12 U and V of plane m in block m, planar
//! planes 2q, 2q + 1 in block q. box_row converts and sums them in one pass.
struct RowPlan {
  AxisTaps x, y;
  std::vector<int32_t> cols;   //!< crop-relative source columns the x taps read, ascending (not box)
  bool dense = false;          //!< cols is one run (a few columns no tap reads may be in it)
  int32_t cache_rows = 1;      //!< row cache size: the widest span of source rows one output row reads
  bool picked = false;         //!< samples come from the picks below (cols padded to whole blocks)
  BytePicks luma, chroma[2];   //!< chroma by x0 parity
  VbmiPicks vluma, vchroma[2]; //!< picked (not box): the samples of cols by 16 columns (planar rows use them)
  int32_t box = 0;
  float box_weight = 0.f;
  int32_t stride = 0;          //!< > 0: cached rows are planar R, G, B, this many floats apart (box, YUV direct_x)
  bool direct_x = false;       //!< x taps are cols in order, weight 1: converted rows are resampled rows
  bool tap_major = false;      //!< cols are the x taps, tap by tap (see make_row_plan), converted planar
  std::vector<float> tap_weight;   //!< tap_major: x.weight, tap by tap
  int32_t slot_px = 0;         //!< pixels per row-cache slot: the visible width, or cols when direct_x
  int32_t span_lo = 0, span_hi = -1;          //!< crop-relative columns a row's conversion reads
  //! Box path with AVX-512 VBMI (factor <= kMaxVbmiBox), two blocks (16 outputs) at a time: the
  //! byte of output i's sample sits at dword i of a two-register byte permute of the 128 bytes from
  //! the pair's first column; one index vector per tap (luma) and per chroma plane, by parity.
  std::vector<std::array<uint8_t, 64>> vbmi_luma, vbmi_u[2], vbmi_v[2];
  int32_t c0 = 0;                              //!< box: crop-relative first column of the window
  int32_t cplanes[2] = {0, 0};                 //!< box: chroma planes per block, by parity
  std::array<int8_t, kMaxBox> cplane[2] = {};  //!< box: chroma plane of tap k, by parity
  //! Box path with VBMI tables where every output row reads its own rows (no row read twice), at
  //! least one and at most kMaxBoxRows of weight > 0: output rows are summed whole, no row cache.
  bool box_rows = false;
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
//! Not under ThreadSanitizer: the clones' resolver runs while the program loads, before TSan's
//! runtime, and crashes there. Not with clang, which clones no templates (the fuzz build).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define FF_ROW_LOOP [[gnu::target_clones("avx2", "default")]]
#else
#define FF_ROW_LOOP
#endif

//! Appends the taps of resized coordinate d on one axis of `r` (y_axis: rows) to `t`, as
//! Resize::sample weighs them (Resize::axis_taps' two taps, or AreaBox's box), and pads the entry to
//! `t.taps`.
void append_taps(const ops::Resize::Params& r, bool y_axis, int d, AxisTaps& t) {
  using R = ops::Resize;
  const size_t begin = t.index.size();
  const auto add = [&](int i, float w) {
    if (w != 0.f) {
      t.index.push_back(i);
      t.weight.push_back(w);
    }
  };
  int first = 0;
  if (r.interp == ops::Interp::AreaBox) {
    const R::Box b = R::area_box(d, y_axis ? r.scale_y : r.scale_x, y_axis ? r.src_h : r.src_w);
    first = b.first;
    for (int i = b.first; i <= b.last; ++i) add(i, R::box_weight(b, i));
  } else {   // nearest is {i, i, 0}: the sample itself with weight 1 (v * 1 == v)
    const R::Taps2 s = R::axis_taps(r, y_axis, d);
    first = s.i0;
    add(s.i0, 1.f - s.a);
    add(s.i1, s.a);
  }
  const int32_t pad_index = t.index.size() > begin ? t.index[begin] : first;
  while (t.index.size() - begin < size_t(t.taps)) {
    t.index.push_back(pad_index);
    t.weight.push_back(0.f);
  }
}

//! The taps of resized coordinates [lo, hi) on one axis of `r`, padded to the widest entry.
AxisTaps tap_table(const ops::Resize::Params& r, bool y_axis, int lo, int hi) {
  AxisTaps t;
  t.lo = lo;
  t.hi = std::max(lo, hi);
  for (int d = t.lo; d < t.hi; ++d) {   // widest entry first, then every entry padded to it
    AxisTaps one;
    append_taps(r, y_axis, d, one);
    t.taps = std::max(t.taps, static_cast<int32_t>(one.index.size()));
  }
  t.taps = std::max(t.taps, 1);
  for (int d = t.lo; d < t.hi; ++d) append_taps(r, y_axis, d, t);
  return t;
}

#if defined(__x86_64__) && defined(__GNUC__)
//! What the CPU runs of the explicit SIMD loops: AVX2 (shuffle gathers, the box path in 8 lanes,
//! YuvToRgb), AVX-512 F + DQ + BW + VL, F16C (the box path in 16 lanes, f16 stores), + VBMI (byte permutes:
//! the box path's and the gathers').
//! FRAMEFUSE_CPU_SIMD=baseline|avx2|avx512 caps the level (tests run every path on one host).
struct CpuSimd {
  bool avx2, avx512, vbmi;
};

//! F16C (CPUID leaf 1, ECX bit 29), which clang's __builtin_cpu_supports does not name.
bool has_f16c() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

const CpuSimd& cpu_simd() {
  static const CpuSimd simd = [] {
    __builtin_cpu_init();
    const char* env = std::getenv("FRAMEFUSE_CPU_SIMD");
    const std::string_view cap = env ? env : "";
    const bool avx2 = __builtin_cpu_supports("avx2") && cap != "baseline";
    const bool avx512 = avx2 && cap != "avx2" && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && has_f16c();
    return CpuSimd{avx2, avx512, avx512 && cap != "avx512" && __builtin_cpu_supports("avx512vbmi")};
  }();
  return simd;
}
#endif

//! The box path pays where its fused loop runs (AVX2 and up); elsewhere the tap tables do as well.
bool box_path_pays() {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_simd().avx2;
#else
  return false;
#endif
}

//! The gather of bytes `pos` (padded here to whole blocks); regs 0 when a block spans more than
//! kMaxPickRegs windows.
BytePicks make_picks(std::vector<int32_t> pos) {
  BytePicks picks;
  if (pos.empty()) return picks;
  while (pos.size() % kPickSlots != 0) pos.push_back(pos.back());
  int32_t regs = 1;
  for (size_t b = 0; b < pos.size(); b += kPickSlots) {
    const auto [lo, hi] = std::minmax_element(pos.begin() + b, pos.begin() + b + kPickSlots);
    regs = std::max(regs, (*hi - *lo) / 16 + 1);
  }
  if (regs > kMaxPickRegs) return picks;
  picks.regs = regs;
  for (size_t b = 0; b < pos.size(); b += kPickSlots) {   // windows end at the block's last byte where
    const int32_t hi = *std::max_element(pos.begin() + b, pos.begin() + b + kPickSlots);   // they can
    picks.base.push_back(std::max(0, hi - 16 * regs + 1));
  }
  std::map<std::vector<std::array<uint8_t, 16>>, int32_t> groups;
  for (size_t b = 0; b < pos.size(); b += kPickSlots) {
    const int32_t base = picks.base[b / kPickSlots];
    std::vector<std::array<uint8_t, 16>> group(static_cast<size_t>(regs));
    for (int32_t r = 0; r < regs; ++r) {
      group[size_t(r)].fill(0x80);
      for (int32_t i = 0; i < kPickSlots; ++i) {
        const int32_t d = pos[b + size_t(i)] - base;
        if (d / 16 == r) group[size_t(r)][size_t(i)] = static_cast<uint8_t>(d % 16);
      }
    }
    const auto [it, added] = groups.try_emplace(group, static_cast<int32_t>(picks.masks.size()));
    if (added) picks.masks.insert(picks.masks.end(), group.begin(), group.end());
    picks.group.push_back(it->second);
  }
  picks.pos = std::move(pos);
  return picks;
}

//! The VBMI gather of bytes a[i] (and b[i] from the same window or offsets), 16 slots a block; a and
//! b are whole blocks long.
VbmiPicks make_vbmi_picks(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  VbmiPicks picks;
  std::map<std::array<uint8_t, 64>, int32_t> groups;
  const auto group = [&](const std::vector<int32_t>& pos, size_t first, int32_t base) {
    std::array<uint8_t, 64> idx{};
    for (size_t i = 0; i < size_t(kPickSlots); ++i) idx[4 * i] = static_cast<uint8_t>(pos[first + i] - base);
    const auto [it, added] = groups.try_emplace(idx, static_cast<int32_t>(picks.idx.size()));
    if (added) picks.idx.push_back(idx);
    return it->second;
  };
  for (size_t f = 0; f < a.size(); f += kPickSlots) {
    const auto [alo, ahi] = std::minmax_element(a.begin() + f, a.begin() + f + kPickSlots);
    const auto [blo, bhi] = std::minmax_element(b.begin() + f, b.begin() + f + kPickSlots);
    const int32_t base = std::min(*alo, *blo);
    if (std::max(*ahi, *bhi) - base >= 128) return {};
    picks.base.push_back(base);
    picks.group[0].push_back(group(a, f, base));
    picks.group[1].push_back(group(b, f, base));
  }
  return picks;
}

//! Whether every entry of `t` has 1 to kMaxBoxRows taps of weight > 0 and no index of one lies at
//! or before an index of an earlier entry.
bool own_rows(const AxisTaps& t) {
  int32_t last = -1;
  for (size_t e = 0; e * size_t(t.taps) < t.index.size(); ++e) {
    int32_t n = 0, lo = INT32_MAX, hi = -1;
    for (size_t k = e * size_t(t.taps); k < (e + 1) * size_t(t.taps); ++k) {
      if (t.weight[k] == 0.f) continue;
      ++n;
      lo = std::min(lo, t.index[k]);
      hi = std::max(hi, t.index[k]);
    }
    if (n == 0 || n > kMaxBoxRows || lo <= last) return false;
    last = hi;
  }
  return true;
}

//! f > 1 when every entry of `t` is f consecutive samples, each entry starting f after the
//! previous, all of one weight (INTER_AREA at an integer factor); else 0.
int32_t box_factor(const AxisTaps& t) {
  const int32_t f = t.taps, n = t.hi - t.lo;
  if (f < 2 || n < 1) return 0;
  for (int32_t j = 0; j < n; ++j) {
    for (int32_t k = 0; k < f; ++k) {
      const size_t e = size_t(j) * f + k;
      if (t.weight[e] != t.weight[0] || t.index[e] != t.index[0] + f * j + k) return 0;
    }
  }
  return f;
}

RowPlan make_row_plan(const ops::Chain::Params& p, ops::PixelFormat format, ops::ChromaUpsample upsample) {
  const ops::Resize::Params& r = p.resize;
  RowPlan plan;
  plan.x = tap_table(r, false, std::clamp(p.off_x, 0, r.dst_w), std::clamp(p.off_x + p.store.width, 0, r.dst_w));
  plan.y = tap_table(r, true, std::clamp(p.off_y, 0, r.dst_h), std::clamp(p.off_y + p.store.height, 0, r.dst_h));
  const bool pickable = (format == ops::PixelFormat::Nv12 || format == ops::PixelFormat::Yuv420p ||
                         format == ops::PixelFormat::Yuv422p) &&
                        upsample == ops::ChromaUpsample::Nearest;
  const int32_t n = plan.x.hi - plan.x.lo, taps = plan.x.taps;
  if (const int32_t f = box_factor(plan.x); pickable && f > 0 && f <= kMaxBox && box_path_pays()) {
    // Box path picks: luma tap k of the block's 8 outputs; chroma per plane m, read at the first tap
    // on it. Chroma column (x0 + c) >> 1 is (x0 >> 1) + ((par + c) >> 1) for par = x0 & 1.
    const int32_t c0 = plan.x.index[0];
    const auto col = [&](int32_t b, int32_t i, int32_t k) {   // tap k of output b + i (the last repeated)
      return plan.x.index[size_t(std::min(b + i, n - 1)) * f] + k;
    };
    const bool nv12 = format == ops::PixelFormat::Nv12;
    std::vector<int32_t> luma;
    for (int32_t b = 0; b < n; b += kPickLanes) {
      for (int32_t k = 0; k < f; k += 2) {   // taps k and k + 1 (the last again for an odd factor)
        for (int32_t i = 0; i < kPickLanes; ++i) luma.push_back(col(b, i, k));
        for (int32_t i = 0; i < kPickLanes; ++i) luma.push_back(col(b, i, std::min(k + 1, f - 1)));
      }
    }
    plan.luma = make_picks(std::move(luma));
    bool ok = plan.luma.regs > 0;
    for (int par = 0; par < 2; ++par) {
      const int32_t q = (par + c0) & 1;   // an even factor keeps the parity of every box's first column
      std::vector<int32_t> first_tap;    // of each plane
      for (int32_t k = 0; k < f; ++k) {
        const int32_t m = f % 2 == 0 ? (q + k) >> 1 : k;
        plan.cplane[par][size_t(k)] = static_cast<int8_t>(m);
        if (m == static_cast<int32_t>(first_tap.size())) first_tap.push_back(k);
      }
      const int32_t planes = static_cast<int32_t>(first_tap.size());
      plan.cplanes[par] = planes;
      const auto rel = [&](int32_t b, int32_t i, int32_t m) { return (par + col(b, i, first_tap[size_t(m)])) >> 1; };
      std::vector<int32_t> chroma;
      for (int32_t b = 0; b < n; b += kPickLanes) {
        for (int32_t m = 0; m < planes; m += nv12 ? 1 : 2) {
          for (int32_t i = 0; i < kPickLanes; ++i) chroma.push_back(nv12 ? 2 * rel(b, i, m) : rel(b, i, m));
          for (int32_t i = 0; i < kPickLanes; ++i)
            chroma.push_back(nv12 ? 2 * rel(b, i, m) + 1 : rel(b, i, std::min(m + 1, planes - 1)));
        }
      }
      plan.chroma[par] = make_picks(std::move(chroma));
      ok = ok && plan.chroma[par].regs > 0;
    }
    if (ok) {
      plan.picked = true;
      plan.box = f;
      plan.box_weight = plan.x.weight[0];
      plan.c0 = c0;
    }
    if (ok && f <= kMaxVbmiBox) {   // offsets from the pair's first luma column / chroma byte
      const auto index = [](const auto& offset) {
        std::array<uint8_t, 64> idx{};
        for (int32_t i = 0; i < 2 * kPickLanes; ++i) idx[size_t(4 * i)] = static_cast<uint8_t>(offset(i));
        return idx;
      };
      for (int32_t t = 0; t < f; ++t) plan.vbmi_luma.push_back(index([&](int32_t i) { return f * i + t; }));
      for (int par = 0; par < 2; ++par) {
        const int32_t q = (par + c0) & 1;
        for (int32_t m = 0, t = 0; t < f; ++t) {
          if (plan.cplane[par][size_t(t)] != m) continue;   // the first tap on plane m
          const auto rel = [&](int32_t i) { return (q + f * i + t) >> 1; };
          plan.vbmi_u[par].push_back(index([&](int32_t i) { return nv12 ? 2 * rel(i) : rel(i); }));
          plan.vbmi_v[par].push_back(index([&](int32_t i) { return nv12 ? 2 * rel(i) + 1 : rel(i); }));
          ++m;
        }
      }
      plan.box_rows = own_rows(plan.y);
    }
  }
  if (plan.box == 0) {
    plan.cols = plan.x.index;
    std::sort(plan.cols.begin(), plan.cols.end());
    plan.cols.erase(std::unique(plan.cols.begin(), plan.cols.end()), plan.cols.end());
    // Tap-major where outputs share few columns (downscales): per block of 8 resized columns, tap t
    // of each in cols[(8b + t) * 8 + i], converted planar, so the horizontal pass runs over vectors.
    plan.tap_major = pickable && taps >= 2 && n > 0 && int64_t(n) * taps * 4 <= int64_t(plan.cols.size()) * 5;
    if (plan.tap_major) {
      plan.cols.clear();
      for (int32_t b = 0; b < n; b += kPickLanes) {
        for (int32_t t = 0; t < taps; ++t) {
          for (int32_t i = 0; i < kPickLanes; ++i) {
            const size_t e = size_t(std::min(b + i, n - 1)) * taps + t;
            plan.cols.push_back(plan.x.index[e]);
            plan.tap_weight.push_back(plan.x.weight[e]);
          }
        }
      }
    } else if (!plan.cols.empty()) {   // convert whole runs where that costs less than gathering the columns
      const int32_t span = plan.cols.back() - plan.cols.front() + 1;
      if (span <= kDenseSpan * static_cast<int32_t>(plan.cols.size())) {
        const int32_t front = plan.cols.front();
        plan.cols.resize(size_t(span));
        for (int32_t i = 0; i < span; ++i) plan.cols[size_t(i)] = front + i;
        plan.dense = true;
      }
    }
    const size_t unique = plan.cols.size();
    if (pickable && !plan.dense && !plan.cols.empty()) {   // gathered (tap-major included): by shuffles
      while (plan.cols.size() % kPickSlots != 0) plan.cols.push_back(plan.cols.back());
      plan.luma = make_picks(plan.cols);
      bool ok = plan.luma.regs > 0;
      for (int par = 0; par < 2; ++par) {
        const auto rel = [&](size_t i) { return (par + plan.cols[i]) >> 1; };   // chroma column, relative
        std::vector<int32_t> chroma;
        for (size_t b = 0; b < plan.cols.size(); b += kPickLanes) {
          for (size_t i = b; i < b + kPickLanes; ++i)
            chroma.push_back(format == ops::PixelFormat::Nv12 ? 2 * rel(i) : rel(i));
          for (size_t i = b; i < b + kPickLanes && format == ops::PixelFormat::Nv12; ++i)
            chroma.push_back(2 * rel(i) + 1);
        }
        plan.chroma[par] = make_picks(std::move(chroma));
        ok = ok && plan.chroma[par].regs > 0;
      }
      plan.picked = ok;
      if (!ok) plan.cols.resize(unique);
      for (int par = 0; par < 2 && ok; ++par) {   // chroma bytes of cols: U, and V (NV12: the next byte)
        std::vector<int32_t> u, v;
        for (const int32_t c : plan.cols) {
          const int32_t rel = (par + c) >> 1;
          u.push_back(format == ops::PixelFormat::Nv12 ? 2 * rel : rel);
          v.push_back(format == ops::PixelFormat::Nv12 ? 2 * rel + 1 : rel);
        }
        plan.vchroma[par] = make_vbmi_picks(u, v);
        ok = !plan.vchroma[par].base.empty();
      }
      if (ok) plan.vluma = make_vbmi_picks(plan.cols, plan.cols);
      if (plan.vluma.base.empty()) plan.vchroma[0] = plan.vchroma[1] = {};
    }
    if (!plan.tap_major) {
      for (int32_t& i : plan.x.index)   // the first occurrence: padding repeats the last column
        i = static_cast<int32_t>(std::lower_bound(plan.cols.begin(), plan.cols.begin() + unique, i) -
                                 plan.cols.begin());
      plan.direct_x = plan.x.taps == 1;   // 0 + c * 1 == c: pixels are never -0 or NaN
      for (size_t j = 0; j < plan.x.index.size() && plan.direct_x; ++j)
        plan.direct_x = plan.x.index[j] == static_cast<int32_t>(j) && plan.x.weight[j] == 1.f;
    }
  }
  plan.slot_px = std::max(n, plan.direct_x ? static_cast<int32_t>(plan.cols.size()) : 0);
  if (plan.box > 0 || plan.tap_major) {   // whole blocks of 8 resized columns
    plan.stride = (n + kPickLanes - 1) / kPickLanes * kPickLanes;
  } else if (plan.direct_x && format != ops::PixelFormat::Rgb24 && format != ops::PixelFormat::Bgr24) {
    plan.stride = static_cast<int32_t>(plan.cols.size());   // YuvToRgb writes planar
  }
  plan.slot_px = std::max(plan.slot_px, (3 * plan.stride + kLanes - 1) / kLanes);
  const std::vector<int32_t>& read = plan.box > 0 ? plan.luma.pos : plan.cols;
  if (!read.empty()) {
    const auto [lo, hi] = std::minmax_element(read.begin(), read.end());
    plan.span_lo = *lo;
    plan.span_hi = *hi;
  }
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
  std::vector<float> src;     //!< one converted source row: the plan's cols (tap-major: planar R, G, B)
  std::vector<float> cache;   //!< cache_rows horizontally resampled rows, visible width each
  std::vector<int32_t> held;  //!< crop row held by each cache slot, -1 none
  std::vector<float> line;    //!< one output row before the store
  std::vector<float> tmp;     //!< one output row, normalized, before the f16 conversion
  std::vector<float> sum;     //!< planar rows: one output row's R, G, B sums
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

#if defined(__x86_64__) && defined(__GNUC__)
//! Whether block b of `p` reads only bytes [0, limit) of its row.
bool in_row(const BytePicks& p, size_t b, int32_t limit) { return p.base[b] + 16 * p.regs <= limit; }

//! Block b of `p` from `row` (in_row): its two halves, as floats.
[[gnu::target("avx2"), gnu::always_inline]] inline void pick16(const uint8_t* row, const BytePicks& p, size_t b,
                                                              __m256& lo, __m256& hi) {
  const uint8_t* w = row + p.base[b];
  const auto* masks = reinterpret_cast<const __m128i*>(p.masks[size_t(p.group[b])].data());
  __m128i bytes = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)), _mm_loadu_si128(masks));
  for (int32_t r = 1; r < p.regs; ++r) {
    const __m128i window = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * r));
    bytes = _mm_or_si128(bytes, _mm_shuffle_epi8(window, _mm_loadu_si128(masks + r)));
  }
  lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(bytes, bytes)));
}

//! x < 0 ? 0 : x per lane, for every x (NaN and -0 included): MAXPS(a, b) is a > b ? a : b.
[[gnu::target("avx2"), gnu::always_inline]] inline __m256 floor0(__m256 x) {
  return _mm256_max_ps(_mm256_setzero_ps(), x);
}
//! clampf(x, 0, 255) per lane, for every x: MINPS(a, b) is a < b ? a : b.
[[gnu::target("avx2"), gnu::always_inline]] inline __m256 clamp255(__m256 x) {
  return _mm256_min_ps(_mm256_set1_ps(255.f), floor0(x));
}

//! yuv_to_rgb with AVX2: YuvToRgb::apply's operations per lane, in its order.
[[gnu::target("avx2")]] void yuv_to_rgb_avx2(const float* l, const float* u, const float* v, int n,
                                             const ops::YuvToRgb::Params p, float* r, float* g, float* b) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 yy = floor0(_mm256_loadu_ps(l + i) - p.y_off) * p.ky;
    const __m256 cu = _mm256_loadu_ps(u + i) - 128.f, cv = _mm256_loadu_ps(v + i) - 128.f;
    _mm256_storeu_ps(r + i, clamp255(yy + p.rv * cv));
    _mm256_storeu_ps(g + i, clamp255(yy + p.gu * cu + p.gv * cv));
    _mm256_storeu_ps(b + i, clamp255(yy + p.bu * cu));
  }
  yuv_to_rgb(l + i, u + i, v + i, n - i, p, r + i, g + i, b + i);
}

//! Block halves go to lo + b * stride and hi + b * stride.
[[gnu::target("avx2")]] void pick_avx2(const uint8_t* row, int32_t limit, const BytePicks& p, float* lo, float* hi,
                                       int stride) {
  for (size_t b = 0; b < p.base.size(); ++b, lo += stride, hi += stride) {
    if (in_row(p, b, limit)) {
      __m256 l, h;
      pick16(row, p, b, l, h);
      _mm256_storeu_ps(lo, l);
      _mm256_storeu_ps(hi, h);
    } else {
      for (size_t i = 0; i < size_t(kPickLanes); ++i) {
        lo[i] = float(row[p.pos[b * kPickSlots + i]]);
        hi[i] = float(row[p.pos[b * kPickSlots + kPickLanes + i]]);
      }
    }
  }
}
#endif

//! yuv_to_rgb, AVX2 where the CPU has it.
void convert_yuv(const float* l, const float* u, const float* v, int n, const ops::YuvToRgb::Params p, float* r,
                 float* g, float* b) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_simd().avx2) return yuv_to_rgb_avx2(l, u, v, n, p, r, g, b);
#endif
  yuv_to_rgb(l, u, v, n, p, r, g, b);
}

//! The samples float(row[p.pos[i]]) of every block b of `p`: its halves at lo + b * stride and
//! hi + b * stride; `limit`: bytes readable from `row`.
void pick(const uint8_t* row, int32_t limit, const BytePicks& p, float* lo, float* hi, int stride) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_simd().avx2) return pick_avx2(row, limit, p, lo, hi, stride);
#endif
  for (size_t b = 0; b < p.base.size(); ++b) {
    for (size_t i = 0; i < size_t(kPickLanes); ++i) {
      lo[b * size_t(stride) + i] = float(row[p.pos[b * kPickSlots + i]]);
      hi[b * size_t(stride) + i] = float(row[p.pos[b * kPickSlots + kPickLanes + i]]);
    }
  }
}

//! Row y of an 8-bit YUV frame as the picks of a plan read it (crop x0): each plane's row pointer
//! (at x0's column) and the bytes readable from it.
struct PickedRow {
  const uint8_t *y = nullptr, *u = nullptr, *v = nullptr;
  int32_t y_limit = 0, c_limit = 0, par = 0;
  bool nv12 = false;   //!< u == v: the interleaved chroma row

  PickedRow() = default;
  PickedRow(const ops::ImageView& img, int x0, int row) : par(x0 & 1), nv12(img.format == ops::PixelFormat::Nv12) {
    const int32_t cx0 = x0 >> 1, cw = (img.width + 1) >> 1;
    const int64_t cy = row >> ops::chroma_shift_y(img.format);
    y = img.data[0] + int64_t(row) * img.pitch[0] + x0;
    y_limit = img.width - x0;
    if (nv12) {
      u = v = img.data[1] + cy * img.pitch[1] + 2 * cx0;
      c_limit = 2 * (cw - cx0);
    } else {
      u = img.data[1] + cy * img.pitch[1] + cx0;
      v = img.data[2] + cy * img.pitch[2] + cx0;
      c_limit = cw - cx0;
    }
  }
};

//! FrameReader::yuv_gather's samples of row y at columns x0 + plan.cols[i], for a plan with picks
//! (NV12 / YUV420P / YUV422P, nearest chroma): the same bytes, as floats.
void gather_picked(const ops::ImageView& img, int x0, int y, const RowPlan& plan, float* l, float* u, float* v) {
  const PickedRow row(img, x0, y);
  pick(row.y, row.y_limit, plan.luma, l, l + kPickLanes, kPickSlots);
  const BytePicks& chroma = plan.chroma[row.par];
  if (row.nv12) {
    pick(row.u, row.c_limit, chroma, u, v, kPickLanes);
  } else {
    pick(row.u, row.c_limit, chroma, u, u + kPickLanes, kPickSlots);
    pick(row.v, row.c_limit, chroma, v, v + kPickLanes, kPickSlots);
  }
}

//! The box path's operands for one row: its samples and where the sums go.
struct BoxRow {
  PickedRow row;
  const RowPlan& plan;
  ops::YuvToRgb::Params yuv;
  float *r, *g, *b;   //!< the sums, planar, one per output
};

//! The box path's vertical pass fused with its horizontal one (VBMI): the source rows of one output
//! row, each with its weight, in Resize::sample's order (weight-0 rows, which add exactly +0, left
//! out); rows on one chroma row are neighbours. r, g, b: the output row's sums, planar. `next`: the
//! rows of the next output row, whose bytes under each block are fetched while the block is summed.
struct BoxRows {
  const RowPlan& plan;
  ops::YuvToRgb::Params yuv;
  float *r, *g, *b;
  int n = 0, ahead = 0;
  PickedRow row[kMaxBoxRows] = {};
  float wy[kMaxBoxRows] = {};
  PickedRow next[kMaxBoxRows] = {};
};

//! Box path blocks [b0, b1) of a row, any CPU: each block's samples gathered (a chroma plane per
//! tap), YuvToRgb as yuv_to_rgb applies it, and each output's sum 0 + c * w over its columns in
//! column order (resample_row's sum over the same taps).
void box_blocks(const BoxRow& a, int b0, int b1) {
  const RowPlan& plan = a.plan;
  const int f = plan.box, pairs = (f + 1) / 2, planes = plan.cplanes[a.row.par];
  const int cblocks = a.row.nv12 ? planes : (planes + 1) / 2;   // chroma blocks per output block
  const int8_t* cplane = plan.cplane[a.row.par].data();
  const std::vector<int32_t>& cpos = plan.chroma[a.row.par].pos;
  constexpr int kMax = kPickLanes * kMaxBox;
  float l[kMax], u[kMax], v[kMax], r[kMax], g[kMax], b[kMax];
  for (int k = b0; k < b1; ++k) {
    for (int t = 0; t < f; ++t) {
      const int m = cplane[t];
      const size_t ly = size_t((k * pairs + t / 2) * kPickSlots + t % 2 * kPickLanes);
      const size_t cu = a.row.nv12 ? size_t((k * cblocks + m) * kPickSlots)
                                   : size_t((k * cblocks + m / 2) * kPickSlots + m % 2 * kPickLanes);
      const size_t cv = a.row.nv12 ? cu + kPickLanes : cu;
      for (int i = 0; i < kPickLanes; ++i) {
        l[t * kPickLanes + i] = float(a.row.y[plan.luma.pos[ly + size_t(i)]]);
        u[t * kPickLanes + i] = float(a.row.u[cpos[cu + size_t(i)]]);
        v[t * kPickLanes + i] = float(a.row.v[cpos[cv + size_t(i)]]);
      }
    }
    yuv_to_rgb(l, u, v, f * kPickLanes, a.yuv, r, g, b);
    for (int i = 0; i < kPickLanes; ++i) {
      float sr = 0.f, sg = 0.f, sb = 0.f;
      for (int t = 0; t < f; ++t) {
        sr = sr + r[t * kPickLanes + i] * plan.box_weight;
        sg = sg + g[t * kPickLanes + i] * plan.box_weight;
        sb = sb + b[t * kPickLanes + i] * plan.box_weight;
      }
      a.r[k * kPickLanes + i] = sr;
      a.g[k * kPickLanes + i] = sg;
      a.b[k * kPickLanes + i] = sb;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
//! box_blocks for blocks whose windows lie in the row, in registers: the chroma terms of
//! YuvToRgb::apply (gains times centred chroma) once per chroma plane, then per tap its luma term
//! and YuvToRgb::apply's sums and clamps in its order, each sum + c * w as box_blocks does.
[[gnu::target("avx2")]] void box_blocks_avx2(const BoxRow& a, int b0, int b1) {
  using F8 = __m256;
  const RowPlan& plan = a.plan;
  const int f = plan.box, pairs = (f + 1) / 2, planes = plan.cplanes[a.row.par];
  const int cblocks = a.row.nv12 ? planes : (planes + 1) / 2;
  const int8_t* cplane = plan.cplane[a.row.par].data();
  const BytePicks& cp = plan.chroma[a.row.par];
  const ops::YuvToRgb::Params c = a.yuv;
  const F8 w = _mm256_set1_ps(plan.box_weight);
  for (int k = b0; k < b1; ++k) {
    F8 rv[kMaxBox], gu[kMaxBox], gv[kMaxBox], bu[kMaxBox];
    for (int q = 0; q < cblocks; ++q) {
      F8 u[2], v[2];   // planes m and m + 1 (planar), or U and V of plane m (NV12)
      const size_t e = size_t(k * cblocks + q);
      pick16(a.row.u, cp, e, u[0], u[1]);
      if (a.row.nv12) {
        v[0] = u[1];
      } else {
        pick16(a.row.v, cp, e, v[0], v[1]);
      }
      for (int h = 0; h < (a.row.nv12 ? 1 : 2); ++h) {
        const int m = a.row.nv12 ? q : 2 * q + h;
        const F8 cu = u[h] - 128.f, cv = v[h] - 128.f;
        rv[m] = c.rv * cv;
        gu[m] = c.gu * cu;
        gv[m] = c.gv * cv;
        bu[m] = c.bu * cu;
      }
    }
    F8 sr = _mm256_setzero_ps(), sg = sr, sb = sr;
    for (int q = 0; q < pairs; ++q) {
      F8 l[2];
      pick16(a.row.y, plan.luma, size_t(k * pairs + q), l[0], l[1]);
      for (int t = 2 * q; t < 2 * q + 2 && t < f; ++t) {
        const F8 yy = floor0(l[t - 2 * q] - c.y_off) * c.ky;
        const int m = cplane[t];
        sr = sr + clamp255(yy + rv[m]) * w;
        sg = sg + clamp255(yy + gu[m] + gv[m]) * w;
        sb = sb + clamp255(yy + bu[m]) * w;
      }
    }
    _mm256_storeu_ps(a.r + k * kPickLanes, sr);
    _mm256_storeu_ps(a.g + k * kPickLanes, sg);
    _mm256_storeu_ps(a.b + k * kPickLanes, sb);
  }
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
//! 16 lanes: lo's 8, then hi's.
[[gnu::target("avx512f,avx512dq"), gnu::always_inline]] inline __m512 join(__m256 lo, __m256 hi) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

//! MAXPS / MINPS in 16 lanes (as floor0 and clamp255 use them); the zero-masked forms leave GCC's
//! undefined-register idiom, which it warns about, out.
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512 max16(__m512 a, __m512 b) {
  return _mm512_maskz_max_ps(0xffff, a, b);
}
[[gnu::target("avx512f"), gnu::always_inline]] inline __m512 min16(__m512 a, __m512 b) {
  return _mm512_maskz_min_ps(0xffff, a, b);
}

//! box_blocks_avx2 two blocks at a time in 16 lanes (block k low, k + 1 high): the same
//! operations per lane (AVX-512 MAXPS / MINPS as AVX2's).
[[gnu::target("avx512f,avx512dq")]] void box_blocks_avx512(const BoxRow& a, int b0, int b1) {
  using F16 = __m512;
  const RowPlan& plan = a.plan;
  const int f = plan.box, pairs = (f + 1) / 2, planes = plan.cplanes[a.row.par];
  const int cblocks = a.row.nv12 ? planes : (planes + 1) / 2;
  const int8_t* cplane = plan.cplane[a.row.par].data();
  const BytePicks& cp = plan.chroma[a.row.par];
  const ops::YuvToRgb::Params c = a.yuv;
  const F16 w = _mm512_set1_ps(plan.box_weight), zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.f);
  int k = b0;
  for (; k + 1 < b1; k += 2) {
    F16 rv[kMaxBox], gu[kMaxBox], gv[kMaxBox], bu[kMaxBox];
    for (int q = 0; q < cblocks; ++q) {
      __m256 u0, u1, v0, v1, u2, u3, v2, v3;   // halves of block k (0, 1) and k + 1 (2, 3)
      pick16(a.row.u, cp, size_t(k * cblocks + q), u0, u1);
      pick16(a.row.u, cp, size_t((k + 1) * cblocks + q), u2, u3);
      F16 u[2] = {join(u0, u2), join(u1, u3)}, v[2];   // planes m, m + 1 (planar), or U, V (NV12)
      if (a.row.nv12) {
        v[0] = u[1];
      } else {
        pick16(a.row.v, cp, size_t(k * cblocks + q), v0, v1);
        pick16(a.row.v, cp, size_t((k + 1) * cblocks + q), v2, v3);
        v[0] = join(v0, v2);
        v[1] = join(v1, v3);
      }
      for (int h = 0; h < (a.row.nv12 ? 1 : 2); ++h) {
        const int m = a.row.nv12 ? q : 2 * q + h;
        const F16 cu = u[h] - 128.f, cv = v[h] - 128.f;
        rv[m] = c.rv * cv;
        gu[m] = c.gu * cu;
        gv[m] = c.gv * cv;
        bu[m] = c.bu * cu;
      }
    }
    F16 sr = zero, sg = zero, sb = zero;
    for (int q = 0; q < pairs; ++q) {
      __m256 l0, l1, l2, l3;
      pick16(a.row.y, plan.luma, size_t(k * pairs + q), l0, l1);
      pick16(a.row.y, plan.luma, size_t((k + 1) * pairs + q), l2, l3);
      const F16 l[2] = {join(l0, l2), join(l1, l3)};
      for (int t = 2 * q; t < 2 * q + 2 && t < f; ++t) {
        const F16 yy = max16(zero, l[t - 2 * q] - c.y_off) * c.ky;
        const int m = cplane[t];
        sr = sr + min16(top, max16(zero, yy + rv[m])) * w;
        sg = sg + min16(top, max16(zero, yy + gu[m] + gv[m])) * w;
        sb = sb + min16(top, max16(zero, yy + bu[m])) * w;
      }
    }
    _mm512_storeu_ps(a.r + k * kPickLanes, sr);
    _mm512_storeu_ps(a.g + k * kPickLanes, sg);
    _mm512_storeu_ps(a.b + k * kPickLanes, sb);
  }
  box_blocks_avx2(a, k, b1);
}
#endif

#if defined(__x86_64__) && defined(__GNUC__)
//! The 128 bytes of `row` from `base` (those at or past `limit` read as 0, never touched).
[[gnu::target("avx512f,avx512bw"), gnu::always_inline]] inline void window128(const uint8_t* row, int32_t base,
                                                                              int32_t limit, __m512i& lo, __m512i& hi) {
  const auto mask = [](int64_t n) -> __mmask64 { return n >= 64 ? ~0ull : (n <= 0 ? 0ull : (1ull << n) - 1); };
  lo = _mm512_maskz_loadu_epi8(mask(limit - base), row + base);
  hi = _mm512_maskz_loadu_epi8(mask(limit - base - 64), row + base + 64);
}

//! 16 samples: byte idx[4i] of the window lo:hi, as floats.
[[gnu::target("avx512f,avx512bw,avx512vbmi"), gnu::always_inline]] inline __m512 permute16(
    __m512i lo, __m512i hi, const std::array<uint8_t, 64>& idx) {
  const __m512i i = _mm512_loadu_si512(idx.data());
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_permutex2var_epi8(0x1111111111111111ull, lo, i, hi));
}

//! box_blocks_avx512's pairs of blocks from [b0, b1), samples by byte permutes of 128-byte windows
//! (plan.vbmi_*): the same operations per lane, and the vertical pass in registers: per output,
//! 0 + s * wy, then + s * wy row by row (accumulate_row's sum; s: a row's horizontal sum), where
//! 0 + x is x for the products here (>= +0, never NaN), as is 0 + c * w for s's first column. F:
//! plan.box and Q: the parity of the window's first chroma column, so the loops unroll, each tap's
//! chroma plane is known (make_row_plan's cplane) and the chroma terms stay in registers, once per
//! chroma row. Returns the first block not done (b1 or b1 - 1).
template <int F, int Q>
[[gnu::target("avx512f,avx512bw,avx512dq,avx512vbmi")]] int box_blocks_vbmi(const BoxRows& a, int b0, int b1) {
  using F16 = __m512;
  const RowPlan& plan = a.plan;
  constexpr int f = F;
  constexpr auto plane_of = [](int t) { return F % 2 == 0 ? (Q + t) >> 1 : t; };
  constexpr int planes = plane_of(F - 1) + 1;
  const int par = a.row[0].par;
  const bool nv12 = a.row[0].nv12;
  const auto& iu = plan.vbmi_u[par];
  const auto& iv = plan.vbmi_v[par];
  const ops::YuvToRgb::Params c = a.yuv;
  const F16 w = _mm512_set1_ps(plan.box_weight), zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.f);
  const int32_t cbytes = nv12 ? 2 : 1;
  const __m512i y_off = _mm512_set1_epi8(static_cast<char>(static_cast<uint8_t>(c.y_off)));   // an integer
  int k = b0;
  for (; k + 1 < b1; k += 2) {
    const int32_t first = plan.c0 + f * kPickLanes * k;   // the pair's first column
    const int32_t cbase = ((par + plan.c0) >> 1) + (first - plan.c0) / 2;   // its chroma column
    for (int j = 0; j < a.ahead; ++j) {   // the pair's bytes (2 * 8 * F columns) in the next rows
      const PickedRow& nr = a.next[j];
      for (int32_t o = 0; o < 2 * kPickLanes * F; o += 64) _mm_prefetch(nr.y + first + o, _MM_HINT_T0);
      _mm_prefetch(nr.y + first + 2 * kPickLanes * F - 1, _MM_HINT_T0);
      if (j > 0 && nr.u == a.next[j - 1].u) continue;
      for (int32_t o = 0; o < cbytes * kPickLanes * F; o += 64) {
        _mm_prefetch(nr.u + cbytes * cbase + o, _MM_HINT_T0);
        _mm_prefetch(nr.v + cbytes * cbase + o, _MM_HINT_T0);
      }
    }
    F16 ar = zero, ag = zero, ab = zero;
    for (int j = 0; j < a.n;) {
      const PickedRow& cr = a.row[j];
      __m512i ulo, uhi, vlo, vhi;
      window128(cr.u, cbytes * cbase, cr.c_limit, ulo, uhi);
      if (nv12) {
        vlo = ulo;
        vhi = uhi;
      } else {
        window128(cr.v, cbase, cr.c_limit, vlo, vhi);
      }
      F16 rv[planes], gu[planes], gv[planes], bu[planes];
#pragma GCC unroll 8
      for (int m = 0; m < planes; ++m) {
        const F16 cu = permute16(ulo, uhi, iu[size_t(m)]) - 128.f, cv = permute16(vlo, vhi, iv[size_t(m)]) - 128.f;
        rv[m] = c.rv * cv;
        gu[m] = c.gu * cu;
        gv[m] = c.gv * cv;
        bu[m] = c.bu * cu;
      }
      do {   // the rows on this chroma row
        const PickedRow& row = a.row[j];
        __m512i ylo, yhi;
        window128(row.y, first, row.y_limit, ylo, yhi);
        ylo = _mm512_subs_epu8(ylo, y_off);   // float(max(l - y_off, 0)) == floor0(float(l) - y_off)
        yhi = _mm512_subs_epu8(yhi, y_off);
        F16 sr = zero, sg = zero, sb = zero;
#pragma GCC unroll 8
        for (int t = 0; t < f; ++t) {
          const F16 yy = permute16(ylo, yhi, plan.vbmi_luma[size_t(t)]) * c.ky;
          const int m = plane_of(t);
          const F16 pr = min16(top, max16(zero, yy + rv[m])) * w;
          const F16 pg = min16(top, max16(zero, yy + gu[m] + gv[m])) * w;
          const F16 pb = min16(top, max16(zero, yy + bu[m])) * w;
          sr = t == 0 ? pr : sr + pr;
          sg = t == 0 ? pg : sg + pg;
          sb = t == 0 ? pb : sb + pb;
        }
        const F16 wy = _mm512_set1_ps(a.wy[j]);
        ar = j == 0 ? sr * wy : ar + sr * wy;
        ag = j == 0 ? sg * wy : ag + sg * wy;
        ab = j == 0 ? sb * wy : ab + sb * wy;
        ++j;
      } while (j < a.n && a.row[j].u == cr.u);
    }
    _mm512_storeu_ps(a.r + k * kPickLanes, ar);
    _mm512_storeu_ps(a.g + k * kPickLanes, ag);
    _mm512_storeu_ps(a.b + k * kPickLanes, ab);
  }
  return k;
}
#endif

//! Whether box_blocks_vbmi runs for `plan` here: the CPU has VBMI, the plan its tables, and the
//! luma offset is an integer byte (it subtracts it from bytes).
bool box_vbmi_runs(const RowPlan& plan, const ops::YuvToRgb::Params& yuv) {
#if defined(__x86_64__) && defined(__GNUC__)
  return cpu_simd().vbmi && !plan.vbmi_luma.empty() && yuv.y_off >= 0.f && yuv.y_off <= 255.f &&
         yuv.y_off == static_cast<float>(static_cast<int>(yuv.y_off));
#else
  return false;
#endif
}

//! box_blocks_vbmi for plan.box; returns the first block not done.
int box_vbmi(const BoxRows& a, int blocks) {
#if defined(__x86_64__) && defined(__GNUC__)
  using Blocks = int (*)(const BoxRows&, int, int);
  constexpr Blocks kVbmi[][2] = {
      {box_blocks_vbmi<2, 0>, box_blocks_vbmi<2, 1>}, {box_blocks_vbmi<3, 0>, box_blocks_vbmi<3, 1>},
      {box_blocks_vbmi<4, 0>, box_blocks_vbmi<4, 1>}, {box_blocks_vbmi<5, 0>, box_blocks_vbmi<5, 1>},
      {box_blocks_vbmi<6, 0>, box_blocks_vbmi<6, 1>}, {box_blocks_vbmi<7, 0>, box_blocks_vbmi<7, 1>}};
  static_assert(std::size(kVbmi) == kMaxVbmiBox - 1);
  return kVbmi[a.plan.box - 2][(a.row[0].par + a.plan.c0) & 1](a, 0, blocks);
#else
  (void)a;
  (void)blocks;
  return 0;
#endif
}

//! Box path blocks [done, blocks) of one row: AVX-512 or AVX2 where their shuffle windows lie in the
//! row (a prefix of the blocks: window bases grow with the block), box_blocks for the rest.
void box_blocks_from(const BoxRow& a, int done, int blocks) {
  int fast = done;
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_simd().avx2) {
    const RowPlan& plan = a.plan;
    const int pairs = (plan.box + 1) / 2, planes = plan.cplanes[a.row.par];
    const int cblocks = a.row.nv12 ? planes : (planes + 1) / 2;
    const auto fits = [&](int k) {
      return in_row(plan.luma, size_t(k * pairs + pairs - 1), a.row.y_limit) &&
             in_row(plan.chroma[a.row.par], size_t(k * cblocks + cblocks - 1), a.row.c_limit);
    };
    fast = blocks;
    while (fast > done && !fits(fast - 1)) --fast;
    if (cpu_simd().avx512) {
      box_blocks_avx512(a, done, fast);
    } else {
      box_blocks_avx2(a, done, fast);
    }
  }
#endif
  box_blocks(a, fast, blocks);
}

//! The box path's horizontal pass of source row y into h: planar R, G, B of the resized columns the
//! window shows (plan.stride floats each). (VBMI: one row of weight 1, whose s * 1 is s.)
void box_row(const ops::ImageView& img, const ops::YuvToRgb::Params& yuv, int x0, int y, const RowPlan& plan,
             float* h) {
  const int blocks = plan.stride / kPickLanes;
  const BoxRow a{PickedRow(img, x0, y), plan, yuv, h, h + plan.stride, h + 2 * plan.stride};
  int done = 0;
  if (box_vbmi_runs(plan, yuv)) {
    BoxRows rows{plan, yuv, a.r, a.g, a.b};
    rows.row[0] = a.row;
    rows.wy[0] = 1.f;
    rows.n = 1;
    done = box_vbmi(rows, blocks);
  }
  box_blocks_from(a, done, blocks);
}

//! The box path's output row for resized row entry e of plan.y (plan.box_rows, box_vbmi_runs):
//! Resize::sample's sum over its rows of their horizontal sums, into sum (planar R, G, B,
//! plan.stride floats apart), without a row cache: box_blocks_vbmi in registers, fetching entry
//! `next`'s rows (-1: none) meanwhile; blocks it leaves take box_blocks_from per row into tmp
//! (3 x plan.stride floats), summed as accumulate_row does.
void box_sum_row(const ops::ImageView& img, const ops::YuvToRgb::Params& yuv, int x0, int y0, const RowPlan& plan,
                 int e, int next, float* sum, float* tmp) {
  const int blocks = plan.stride / kPickLanes, cs = plan.stride;
  BoxRows rows{plan, yuv, sum, sum + cs, sum + 2 * cs};
  for (int t = 0; t < plan.y.taps; ++t) {
    const float wy = plan.y.weight[size_t(e + t)];
    if (wy == 0.f) continue;   // would add exactly +0
    rows.row[rows.n] = PickedRow(img, x0, y0 + plan.y.index[size_t(e + t)]);
    rows.wy[rows.n++] = wy;
  }
  for (int t = 0; next >= 0 && t < plan.y.taps; ++t) {
    if (plan.y.weight[size_t(next + t)] != 0.f)
      rows.next[rows.ahead++] = PickedRow(img, x0, y0 + plan.y.index[size_t(next + t)]);
  }
  const int done = box_vbmi(rows, blocks);
  for (int j = 0; j < rows.n && done < blocks; ++j) {
    box_blocks_from(BoxRow{rows.row[j], plan, yuv, tmp, tmp + cs, tmp + 2 * cs}, done, blocks);
    for (int c = 0; c < 3; ++c) {
      float* acc = sum + c * cs;
      const float* h = tmp + c * cs;
      for (int i = done * kPickLanes; i < cs; ++i) acc[i] = j == 0 ? h[i] * rows.wy[j] : acc[i] + h[i] * rows.wy[j];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
//! gather_picked's samples of blocks [b0, b1) of plan.cols (16 columns each) by the plan's VBMI
//! permutes, converted as yuv_to_rgb_avx2 converts them (YuvToRgb::apply's operations per lane, in
//! its order), into r, g, b + 16 * b0 onwards: the planar pixels without the samples in memory.
[[gnu::target("avx512f,avx512bw,avx512dq,avx512vbmi")]] void convert_vbmi(const PickedRow& row, const RowPlan& plan,
                                                                         int b0, int b1, const ops::YuvToRgb::Params c,
                                                                         float* r, float* g, float* b) {
  using F16 = __m512;
  const VbmiPicks& lp = plan.vluma;
  const VbmiPicks& cp = plan.vchroma[row.par];
  const F16 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.f);
  for (int k = b0; k < b1; ++k, r += kPickSlots, g += kPickSlots, b += kPickSlots) {
    __m512i lo, hi;
    window128(row.y, lp.base[size_t(k)], row.y_limit, lo, hi);
    const F16 l = permute16(lo, hi, lp.idx[size_t(lp.group[0][size_t(k)])]);
    window128(row.u, cp.base[size_t(k)], row.c_limit, lo, hi);
    const F16 u = permute16(lo, hi, cp.idx[size_t(cp.group[0][size_t(k)])]);
    if (!row.nv12) window128(row.v, cp.base[size_t(k)], row.c_limit, lo, hi);
    const F16 v = permute16(lo, hi, cp.idx[size_t(cp.group[1][size_t(k)])]);
    const F16 yy = max16(zero, l - c.y_off) * c.ky;
    const F16 cu = u - 128.f, cv = v - 128.f;
    _mm512_storeu_ps(r, min16(top, max16(zero, yy + c.rv * cv)));
    _mm512_storeu_ps(g, min16(top, max16(zero, yy + c.gu * cu + c.gv * cv)));
    _mm512_storeu_ps(b, min16(top, max16(zero, yy + c.bu * cu)));
  }
}
#endif

//! Converts source row y (frame coordinates) at columns x0 + plan.cols[i] to RGB pixels into out
//! (planar R, G, B cols.size() floats apart where plan.stride > 0):
//! FrameReader::rgb, with the samples gathered first (one run when the columns are dense) so the
//! conversion is a branch-free, vectorised loop.
template <class Reader>
FF_ROW_LOOP void convert_row(const Reader& src, int x0, int y, const RowPlan& plan, RowScratch& s, float* out) {
  const int32_t* cols = plan.cols.data();
  const int n = static_cast<int>(plan.cols.size());
  if constexpr (Reader::kYuv) {
    float* l = s.luma.data();
    float* u = s.cb.data();
    float* v = s.cr.data();
#if defined(__x86_64__) && defined(__GNUC__)
    if (plan.stride > 0 && !plan.vluma.base.empty() && cpu_simd().vbmi)   // samples to pixels in registers
      return convert_vbmi(PickedRow(src.img, x0, y), plan, 0, n / kPickSlots, src.color.yuv, out, out + n, out + 2 * n);
#endif
    if (plan.picked) {
      gather_picked(src.img, x0, y, plan, l, u, v);
    } else if (plan.dense) {
      src.yuv_run(x0 + cols[0], n, y, l, u, v);
    } else {
      src.yuv_gather(x0, cols, n, y, l, u, v);
    }
    if (plan.stride > 0) {   // planar rows (direct_x, tap_major): n floats apart
      convert_yuv(l, u, v, n, src.color.yuv, out, out + n, out + 2 * n);
      return;
    }
    constexpr int kBlock = 64;   // converted, then transposed, while in L1
    alignas(32) float r[kBlock], g[kBlock], b[kBlock];
    for (int i = 0; i < n; i += kBlock) {
      const int m = std::min(kBlock, n - i);
      convert_yuv(l + i, u + i, v + i, m, src.color.yuv, r, g, b);
      interleave(r, g, b, m, out + kLanes * i);
    }
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

//! The horizontal pass of a tap-major plan: plane c of h (plan.stride floats apart) gets, per resized
//! column j = 8b + i, 0 + in[(b * taps + t) * 8 + i] * w summed in tap order over in's plane c
//! (cols.size() floats apart): resample_row's sums, planar.
template <int Taps>
FF_ROW_LOOP void resample_planar_row(const float* __restrict in, const RowPlan& plan, float* __restrict h) {
  const int taps = Taps > 0 ? Taps : plan.x.taps, blocks = plan.stride / kPickLanes;
  const int cstride = static_cast<int>(plan.cols.size());
  const float* __restrict weight = plan.tap_weight.data();
  for (int c = 0; c < 3; ++c) {
    const float* __restrict plane = in + c * cstride;
    float* __restrict out = h + c * plan.stride;
    for (int b = 0; b < blocks; ++b) {
      const int e = b * taps * kPickLanes;
      float acc[kPickLanes] = {};
      for (int t = 0; t < taps; ++t)
        for (int i = 0; i < kPickLanes; ++i)
          acc[i] = acc[i] + plane[e + t * kPickLanes + i] * weight[e + t * kPickLanes + i];
      for (int i = 0; i < kPickLanes; ++i) out[b * kPickLanes + i] = acc[i];
    }
  }
}

void resample_planar(const float* in, const RowPlan& plan, float* h) {
  switch (plan.x.taps) {
    case 2: return resample_planar_row<2>(in, plan, h);
    case 3: return resample_planar_row<3>(in, plan, h);
    case 4: return resample_planar_row<4>(in, plan, h);
    default: return resample_planar_row<0>(in, plan, h);
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
//! Row pixel x of a pixel-vector row (Planar false) or of planar R, G, B rows `stride` floats apart.
template <ops::Channels C, int c, bool Planar>
float channel(const float* row, int stride, int x) {
  const auto at = [&](int k) { return Planar ? row[k * stride + x] : row[kLanes * x + k]; };
  if constexpr (C == ops::Channels::Gray) {
    return ops::rgb_to_gray({at(0), at(1), at(2)});
  } else if constexpr (C == ops::Channels::Bgr) {
    return at(2 - c);
  } else {
    return at(c);
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

//! to_half_run_f16c 16 at a time, of in[i] * mul + add where Affine (Normalize::apply, fused into
//! the store): NaN values (unordered with themselves) become sign | 0x7e00.
template <bool Affine>
[[gnu::target("avx512f,avx512bw,avx512vl,f16c")]] void to_half_avx512(const float* in, float mul, float add,
                                                                      uint16_t* out, int n) {
  const __m256i sign = _mm256_set1_epi16(static_cast<int16_t>(0x8000)), qnan = _mm256_set1_epi16(0x7e00);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(m, in + i);
    if constexpr (Affine) v = v * mul + add;
    const __m256i h = _mm512_maskz_cvtps_ph(0xffff, v, _MM_FROUND_TO_NEAREST_INT);
    const __m256i nan = _mm256_ternarylogic_epi32(h, sign, qnan, 0xEA);   // (h & sign) | qnan
    _mm256_mask_storeu_epi16(out + i, m, _mm256_mask_mov_epi16(h, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan));
  }
}
#endif

void to_half_run(const float* in, uint16_t* out, int n) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool f16c = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && has_f16c();
  }();
  if (cpu_simd().avx512) return to_half_avx512<false>(in, 0.f, 0.f, out, n);
  if (f16c) return to_half_run_f16c(in, out, n);
#endif
  for (int i = 0; i < n; ++i) out[i] = ops::to_half_bits(in[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
//! store_row's HWC u8 store of three planes (output channel c from plane[c]) with AVX-512 VBMI, 16
//! pixels at a time: Normalize::apply, saturate_u8 as its own operations per lane (MAXPS / MINPS
//! with the value first give its v > 0 and v < 255 choices, NaN included), bytes interleaved by a
//! permute.
[[gnu::target("avx512f,avx512bw,avx512dq,avx512vbmi")]] void store_hwc_u8_vbmi(const float* const plane[3],
                                                                              const ops::Normalize::Params& norm,
                                                                              uint8_t* out, int w) {
  alignas(64) static constexpr auto kOrder = [] {   // byte 3i + c from byte 16c + i
    std::array<uint8_t, 64> idx{};
    for (int i = 0; i < 16; ++i)
      for (int c = 0; c < 3; ++c) idx[size_t(3 * i + c)] = static_cast<uint8_t>(16 * c + i);
    return idx;
  }();
  const __m512i order = _mm512_load_si512(kOrder.data());
  const __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.f), round = _mm512_set1_ps(0x1p23f);
  for (int x = 0; x < w; x += 16) {
    const int n = std::min(16, w - x);
    const __mmask16 in = static_cast<__mmask16>((1u << n) - 1);
    __m128i bytes[3];
    for (int c = 0; c < 3; ++c) {
      const __m512 v = _mm512_maskz_loadu_ps(in, plane[c] + x) * norm.mul[c] + norm.add[c];
      const __m512 t = _mm512_maskz_min_ps(0xffff, _mm512_maskz_max_ps(0xffff, v, zero), top);
      bytes[c] = _mm512_maskz_cvtepi32_epi8(0xffff, _mm512_maskz_cvttps_epi32(0xffff, (t + round) - round));
    }
    const __m512i rg = _mm512_inserti64x2(_mm512_castsi128_si512(bytes[0]), bytes[1], 1);
    const __m512i all = _mm512_inserti64x2(rg, bytes[2], 2);
    _mm512_mask_storeu_epi8(out + 3 * x, (1ull << (3 * n)) - 1, _mm512_maskz_permutexvar_epi8(~0ull, order, all));
  }
}
#endif

//! Channel order, normalize and store of one output row (pixels `line`, pad included; planar rows
//! `stride` floats apart when Planar) into row y of the frame's tensor `frame`. Channels are
//! compile-time, so each loop is one vectorised pass; f16 goes through `tmp` (3 x width floats) and
//! to_half_run (planar rows into CHW: to_half_avx512 normalizes as it converts, where the CPU has
//! AVX-512); planar RGB / BGR rows into HWC u8 take store_hwc_u8_vbmi where the CPU has VBMI.
template <bool Planar, ops::Channels C, ops::DType D, ops::Layout L>
FF_ROW_LOOP void store_row(const float* __restrict line, int stride, const ops::Chain::Params& p, std::byte* frame,
                           int y, float* __restrict tmp) {
  using T = std::conditional_t<D == ops::DType::F16, float, Element<D>>;   // f16: floats into tmp first
  constexpr int channels = C == ops::Channels::Gray ? 1 : 3;
  const int w = p.store.width;
  const ops::Normalize::Params norm = p.norm;   // a copy the stores cannot alias
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (Planar && C != ops::Channels::Gray && D == ops::DType::U8 && L == ops::Layout::Hwc) {
    if (cpu_simd().vbmi) {
      const bool bgr = C == ops::Channels::Bgr;
      const float* const plane[3] = {line + (bgr ? 2 : 0) * stride, line + stride, line + (bgr ? 0 : 2) * stride};
      return store_hwc_u8_vbmi(plane, norm, reinterpret_cast<uint8_t*>(frame) + int64_t(y) * w * 3, w);
    }
  }
#endif
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
#if defined(__x86_64__) && defined(__GNUC__)
            if constexpr (D == ops::DType::F16 && Planar && C != ops::Channels::Gray) {   // a plane per channel
              if (cpu_simd().avx512)
                return to_half_avx512<true>(line + (C == ops::Channels::Bgr ? 2 - c : c) * stride, norm.mul[c],
                                            norm.add[c], reinterpret_cast<uint16_t*>(frame) + offset, w);
            }
#endif
            T* __restrict out = target(offset);
            for (int x = 0; x < w; ++x)
              out[x] = element<D, T>(ops::Normalize::apply(channel<C, c, Planar>(line, stride, x), c, norm));
            finish(offset, w);
          }(),
          ...);
    } else {
      const int64_t offset = int64_t(y) * w * channels;
      T* __restrict out = target(offset);
      for (int x = 0; x < w; ++x)
        ((out[x * channels + c] =
              element<D, T>(ops::Normalize::apply(channel<C, c, Planar>(line, stride, x), c, norm))),
         ...);
      finish(offset, w * channels);
    }
  }(std::make_integer_sequence<int, channels>{});
}

using StoreRow = void (*)(const float*, int, const ops::Chain::Params&, std::byte*, int, float*);

template <bool Planar, ops::Channels C, ops::DType D>
StoreRow store_for(ops::Layout l) {
  return l == ops::Layout::Chw ? store_row<Planar, C, D, ops::Layout::Chw> : store_row<Planar, C, D, ops::Layout::Hwc>;
}

template <bool Planar, ops::Channels C>
StoreRow store_for(ops::DType d, ops::Layout l) {
  switch (d) {
    case ops::DType::F32: return store_for<Planar, C, ops::DType::F32>(l);
    case ops::DType::F16: return store_for<Planar, C, ops::DType::F16>(l);
    case ops::DType::U8: break;
  }
  return store_for<Planar, C, ops::DType::U8>(l);
}

template <bool Planar>
StoreRow store_for(const ops::Chain::Params& p) {
  switch (p.channels) {
    case ops::Channels::Rgb: return store_for<Planar, ops::Channels::Rgb>(p.store.dtype, p.store.layout);
    case ops::Channels::Bgr: return store_for<Planar, ops::Channels::Bgr>(p.store.dtype, p.store.layout);
    case ops::Channels::Gray: break;
  }
  return store_for<Planar, ops::Channels::Gray>(p.store.dtype, p.store.layout);
}

//! Asks the caches for the bytes the conversion of frame row y (crop x0) will read: rows arrive
//! from memory while the current one converts (the rows an output reads are often strided).
void prefetch_row(const ops::ImageView& img, int x0, int y, const RowPlan& plan) {
  if (y < 0 || y >= img.height || plan.span_hi < plan.span_lo) return;
  const auto lines = [](const uint8_t* row, int64_t lo, int64_t hi) {
    for (int64_t i = lo & ~int64_t{63}; i <= hi; i += 64) __builtin_prefetch(row + i);
  };
  const int64_t lo = x0 + plan.span_lo, hi = x0 + plan.span_hi, cy = y >> ops::chroma_shift_y(img.format);
  const int64_t bytes = ops::sample_bytes(img.format);
  switch (img.format) {
    case ops::PixelFormat::Nv12:
    case ops::PixelFormat::P010:
      lines(img.data[0] + int64_t(y) * img.pitch[0], lo * bytes, hi * bytes + bytes - 1);
      lines(img.data[1] + cy * img.pitch[1], (lo & ~1) * bytes, (hi | 1) * bytes + bytes - 1);
      break;
    case ops::PixelFormat::Yuv420p:
    case ops::PixelFormat::Yuv420p10:
    case ops::PixelFormat::Yuv422p:
      lines(img.data[0] + int64_t(y) * img.pitch[0], lo * bytes, hi * bytes + bytes - 1);
      lines(img.data[1] + cy * img.pitch[1], (lo >> 1) * bytes, (hi >> 1) * bytes + bytes - 1);
      lines(img.data[2] + cy * img.pitch[2], (lo >> 1) * bytes, (hi >> 1) * bytes + bytes - 1);
      break;
    case ops::PixelFormat::Rgb24:
    case ops::PixelFormat::Bgr24:
      lines(img.data[0] + int64_t(y) * img.pitch[0], 3 * lo, 3 * hi + 2);
      break;
  }
}

//! Output rows [y_begin, y_end) of output `p` (control applied) of the frame read by `src`, into
//! that frame's tensor `frame`: Chain::pixel's values, a row at a time.
template <class Reader>
void run_band(const Reader& src, const ops::Chain::Params& p, const RowPlan& plan, std::byte* frame, int y_begin,
              int y_end, RowScratch& s) {
  const StoreRow store = store_for<false>(p), store_planar = store_for<true>(p);
  const int w = p.store.width;
  const int visible = plan.x.hi - plan.x.lo;   // resized columns the window shows ...
  const int first = plan.x.lo - p.off_x;       // ... from this output column on
  const auto fill_pad = [&](float* px, int n) {
    for (int i = 0; i < n; ++i) store_px(px + kLanes * i, Px{p.pad[0], p.pad[1], p.pad[2], 0.f});
  };
  std::fill(s.held.begin(), s.held.begin() + plan.cache_rows, -1);
  int last = -1;   // the crop row converted last
  const auto resampled_row = [&](int r) -> const float* {   // crop row r after the horizontal pass
    const int slot = r % plan.cache_rows;
    float* h = s.cache.data() + size_t(slot) * plan.slot_px * kLanes;
    if (s.held[slot] != r) {
      prefetch_row(src.img, p.resize.x0, p.resize.y0 + (last >= 0 && r > last ? 2 * r - last : r + 1), plan);
      last = r;
      if (plan.box > 0) {
        box_row(src.img, src.color.yuv, p.resize.x0, p.resize.y0 + r, plan, h);
      } else if (plan.direct_x) {
        convert_row(src, p.resize.x0, p.resize.y0 + r, plan, s, h);
      } else if (plan.tap_major) {
        convert_row(src, p.resize.x0, p.resize.y0 + r, plan, s, s.src.data());
        resample_planar(s.src.data(), plan, h);
      } else {
        convert_row(src, p.resize.x0, p.resize.y0 + r, plan, s, s.src.data());
        resample(s.src.data(), plan.x, h);
      }
      s.held[slot] = r;
    }
    return h;
  };
  const bool box_rows = plan.box_rows && box_vbmi_runs(plan, src.color.yuv);
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
      const int e = (ry - plan.y.lo) * plan.y.taps;
      const bool single = plan.y.taps == 1 && plan.y.weight[e] == 1.f;   // 0 + h * 1 == h: never -0 or NaN
      if (plan.stride > 0) {   // planar rows: summed planar, stored as such or moved into the line
        const int cs = plan.stride;
        if (single && visible == w) {   // no pad: store the cached row itself
          store_planar(resampled_row(plan.y.index[e]), cs, p, frame, y, s.tmp.data());
          continue;
        }
        float* sum = s.sum.data();
        if (box_rows) {
          const int next = ry + 1 < plan.y.hi ? e + plan.y.taps : -1;
          box_sum_row(src.img, src.color.yuv, p.resize.x0, p.resize.y0, plan, e, next, sum, s.cache.data());
        } else {
          std::fill(sum, sum + 3 * cs, 0.f);
          for (int t = 0; t < plan.y.taps; ++t) {   // Resize::sample's sum over rows, in its order
            const float wy = plan.y.weight[e + t];
            if (wy == 0.f) continue;   // would add exactly +0
            accumulate_row(sum, resampled_row(plan.y.index[e + t]), wy, 3 * cs);
          }
        }
        if (visible == w) {
          store_planar(sum, cs, p, frame, y, s.tmp.data());
          continue;
        }
        interleave(sum, sum + cs, sum + 2 * cs, visible, acc);
      } else if (single) {
        const float* h = resampled_row(plan.y.index[e]);
        if (visible == w) {
          store(h, 0, p, frame, y, s.tmp.data());
          continue;
        }
        std::copy_n(h, kLanes * visible, acc);
      } else {
        std::fill(acc, acc + kLanes * visible, 0.f);
        for (int t = 0; t < plan.y.taps; ++t) {   // Resize::sample's sum over rows, in its order
          const float wy = plan.y.weight[e + t];
          if (wy == 0.f) continue;   // would add exactly +0
          accumulate_row(acc, resampled_row(plan.y.index[e + t]), wy, kLanes * visible);
        }
      }
    }
    store(line, 0, p, frame, y, s.tmp.data());
  }
}

//! Where output rows [y_begin, y_end) of `p` go in the order of work: the first frame row they
//! read at setup's crop window (control may move it later; only the order depends on this), or for
//! pad rows only the frame row at the same height, so that their stores spread among computed rows.
int32_t band_position(const ops::Chain::Params& p, const RowPlan& plan, int32_t y_begin, int32_t y_end,
                      int32_t frame_height) {
  int32_t first = -1;
  for (int32_t y = y_begin; y < y_end; ++y) {
    const int32_t ry = y + p.off_y;
    if (plan.x.hi == plan.x.lo || ry < plan.y.lo || ry >= plan.y.hi) continue;
    const auto e = plan.y.index.begin() + int64_t(ry - plan.y.lo) * plan.y.taps;
    const int32_t row = p.resize.y0 + *std::min_element(e, e + plan.y.taps);
    first = first < 0 ? row : std::min(first, row);
  }
  return first >= 0 ? first : static_cast<int32_t>(int64_t(y_begin) * frame_height / p.store.height);
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
  control_.reset();
  plan_rows();
}

void CpuExecutor::setup_control(const control::ControlParams& params) {
  if (params.num_outputs != static_cast<int32_t>(params_.size()) || params.frame_w != frame_.width ||
      params.frame_h != frame_.height)
    throw ConfigError("cpu executor: control was planned for other outputs or frames than setup()");
  control_.emplace();
  control_->setup(params);
}

void CpuExecutor::plan_rows() {
  rows_.clear();
  bands_.clear();
  size_t src = 0, cache = 0, held = 0, line = 0, stride = 0;
  for (size_t k = 0; k < params_.size(); ++k) {
    const ops::Chain::Params& p = params_[k];
    const RowPlan& plan = rows_.emplace_back(make_row_plan(p, frame_.format, color_.upsample));
    src = std::max(src, plan.cols.size());
    stride = std::max(stride, size_t(plan.stride));
    cache = std::max(cache, size_t(plan.cache_rows) * size_t(plan.slot_px));
    held = std::max(held, size_t(plan.cache_rows));
    line = std::max(line, size_t(p.store.width));
    for (int32_t y = 0; y < p.store.height; y += kBandRows) {
      const int32_t end = std::min(p.store.height, y + kBandRows);
      bands_.push_back({static_cast<int32_t>(k), y, end, band_position(p, plan, y, end, frame_.height)});
    }
  }
  // Bands of all outputs in order of the source rows they start at: the rows one output's band
  // reads are still in the caches when the other outputs' bands over them run (a 1080p NV12 frame
  // is larger than a core's L2, so output after output re-read it from farther out), and runs of
  // pad rows (stores only) are spread among them.
  std::stable_sort(bands_.begin(), bands_.end(), [](const Band& a, const Band& b) { return a.source < b.source; });
  scratch_.assign(size_t(pool_.threads()), RowScratch{});
  for (RowScratch& s : scratch_) {
    for (auto* v : {&s.luma, &s.cb, &s.cr}) v->resize(src);
    s.src.resize(kLanes * src);
    s.cache.resize(kLanes * cache);
    s.held.resize(held);
    s.line.resize(kLanes * line);
    s.tmp.resize(3 * line);
    s.sum.resize(3 * stride);
  }
}

std::optional<control::ControlRecord> CpuExecutor::control_record() const {
  if (!control_ || control_->block().header.iteration == 0) return std::nullopt;
  return control_->record();
}

void CpuExecutor::process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) {
  if (outs.size() != params_.size()) throw ConfigError("cpu executor: output count differs from setup()");
  if (!control_) {
    run_rows(frames, 0, frames.size(), outs, nullptr);
    return;
  }
  for (size_t b = 0; b < frames.size(); ++b) {
    run_rows(frames, b, 1, outs, &control_->state());
    control_->measure(frames[b], color_);
    control_->stats_step();
  }
}

void CpuExecutor::run_rows(std::span<const ops::ImageView> frames, size_t first, size_t count,
                           std::span<std::byte* const> outs, const control::ControlState* state) {
  const int64_t bands = static_cast<int64_t>(bands_.size());
  ops::dispatch_format(frame_.format, [&](auto tag) {
    using Reader = ops::FrameReader<decltype(tag)::value>;
    pool_.run(bands * static_cast<int64_t>(count), [&](int64_t item, int worker) {
      const size_t b = first + static_cast<size_t>(item / bands);
      const Band& band = bands_[static_cast<size_t>(item % bands)];
      const size_t k = static_cast<size_t>(band.output);
      ops::Chain::Params p = params_[k];
      if (state) control::apply(*state, static_cast<int>(k), p);
      std::byte* const frame = outs[k] + p.frame_stride * static_cast<int64_t>(b);
      const Reader src{frames[b], color_};
      run_band(src, p, rows_[k], frame, band.y_begin, band.y_end, scratch_[static_cast<size_t>(worker)]);
    });
  });
}

std::unique_ptr<Executor> make_cpu_executor(int threads) { return std::make_unique<CpuExecutor>(threads); }

}  // namespace framefuse
