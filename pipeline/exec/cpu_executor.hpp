#pragma once
//! The fused chain on the CPU, evaluated row by row: each work item is a band of output rows of one
//! output of one frame; the bands of all outputs run in order of the source rows they read, so a
//! frame row comes from memory once for every output. Each source row a band reads is converted once
//! (FrameReader's samples and YuvToRgb, only the columns some tap reads), resampled horizontally with
//! setup-time tap tables (Resize's own taps; zero-weight taps, which add exactly +0, dropped), kept in
//! a small row cache while output rows use it, blended vertically, then windowed, ordered, normalized
//! and stored, in vectorised loops. 8-bit YUV with nearest chroma gathers its samples with byte
//! shuffles (setup-time masks; AVX-512 VBMI byte permutes straight into converted pixels); downscales
//! keep rows planar (R, G, B planes) from conversion to store; INTER_AREA at an integer factor
//! converts and box-sums in one register pass (AVX2, AVX-512, AVX-512 VBMI byte permutes, chosen at
//! run time; a portable loop elsewhere), with VBMI summing each output row's source rows in registers
//! too (chroma terms once per chroma row, the next row's bytes fetched meanwhile). The float
//! operations and their order are Resize::sample's and Chain::pixel's, so every output element is
//! bit-identical to Chain::pixel (the definition the CUDA kernel runs). With control, frames run one
//! at a time: the rows of every output (control applied), then the frame's thumbnail and the
//! statistics step (ControlEngine::measure, stats_step).
#include <condition_variable>
#include <cstdint>
#include <type_traits>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "pipeline/control/control_engine.hpp"
#include "pipeline/exec/executor.hpp"

namespace framefuse {

//! A fixed pool that runs `fn(i, worker)` for i in [0, n) and waits; the caller thread works too
//! (worker 0, pool threads 1 .. threads() - 1), so per-worker scratch needs no locking.
class ParallelFor {
 public:
  explicit ParallelFor(int threads);
  ~ParallelFor();
  ParallelFor(const ParallelFor&) = delete;
  ParallelFor& operator=(const ParallelFor&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  //! `fn` is called by reference (no copy, no allocation) and must outlive the call.
  template <class Fn>
  void run(int64_t n, Fn&& fn) {
    run_erased(n, &fn, [](void* f, int64_t i, int worker) { (*static_cast<std::remove_reference_t<Fn>*>(f))(i, worker); });
  }

 private:
  using Call = void (*)(void*, int64_t, int);
  void run_erased(int64_t n, void* fn, Call call);
  void work(std::unique_lock<std::mutex>& lock, int worker);
  std::vector<std::jthread> workers_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  void* fn_ = nullptr;
  Call call_ = nullptr;
  int64_t next_ = 0, end_ = 0, busy_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

//! How one output is evaluated by rows (tap tables, columns to convert) and one pool worker's
//! row buffers; both defined in cpu_executor.cpp, built by setup().
struct RowPlan;
struct RowScratch;

class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(int threads);
  ~CpuExecutor() override;
  std::string name() const override;
  void setup(const FrameInfo& frame, const ops::ColorParams& color, std::span<const OutputPlan> plans,
             int max_batch) override;
  void process(std::span<const ops::ImageView> frames, std::span<std::byte* const> outs) override;
  void setup_control(const control::ControlParams& params) override;
  std::optional<control::ControlRecord> control_record() const override;

 private:
  //! Output rows [y_begin, y_end) of output `output`; `source`: its place in the order of work
  //! (the first frame row they read).
  struct Band {
    int32_t output, y_begin, y_end, source;
  };

  //! Row plans, bands and per-worker scratch for every output in params_ (allocates).
  void plan_rows();
  //! Runs every row of frames [first, first + count) of every output in params_, with `state`
  //! (non-null: control) applied to each output's parameters.
  void run_rows(std::span<const ops::ImageView> frames, size_t first, size_t count, std::span<std::byte* const> outs,
                const control::ControlState* state);

  ParallelFor pool_;
  FrameInfo frame_{};
  ops::ColorParams color_{};
  std::vector<ops::Chain::Params> params_;
  std::vector<RowPlan> rows_;          //!< per entry of params_
  std::vector<Band> bands_;            //!< the work items of one frame, by source row
  std::vector<RowScratch> scratch_;    //!< per pool worker
  std::optional<control::ControlEngine> control_;
};

}  // namespace framefuse
