#include "pipeline/control/control_cuda.hpp"

#include <cstring>
#include <memory>
#include <spdlog/fmt/fmt.h>

#include "pipeline/fused/fused_kernel.hpp"

namespace framefuse::control {

void CudaControl::setup(const ControlParams& params, cudaStream_t stream) {
  if (params.delay < 1 || params.delay > kMaxDelay || params.depth != params.delay + 1 || params.num_outputs < 1 ||
      params.num_outputs > kMaxOutputs)
    throw ConfigError(fmt::format("cuda control: delay {} / depth {} / {} outputs were not planned by "
                                  "make_control_params",
                                  params.delay, params.depth, params.num_outputs));
  params_ = params;

  const size_t slots_at = cuda::align_up(sizeof(FusedControl));
  memory_ = cuda::alloc_device(slots_at + sizeof(Slot) * size_t(params.depth));
  records_ = cuda::alloc_mapped(sizeof(PublishedRecord) * kRecordRing);
  std::memset(records_.as(), 0, records_.size());
  void* records = nullptr;
  cuda::check(cudaHostGetDevicePointer(&records, records_.as(), 0), "cudaHostGetDevicePointer");
  std::byte* const base = memory_.as();

  const ControlBlock initial = initial_block(params);
  const auto c = std::make_unique<FusedControl>();   // zero: counters, accumulators, mailbox, thumbnail
  c->params = params;
  c->block = initial;
  c->slots = reinterpret_cast<Slot*>(base + slots_at);
  c->records = static_cast<PublishedRecord*>(records);
  c->applied[0] = c->applied[1] = initial.state;
  for (int r = 0; r < num_regions(params); ++r)
    c->regions[0][r] = c->regions[1][r] = stats_region(params, initial.state, r);
  control_ = reinterpret_cast<FusedControl*>(base);
  slots_ = c->slots;

  cuda::check(cudaMemsetAsync(base + slots_at, 0, memory_.size() - slots_at, stream), "clear control slots");
  cuda::check(cudaMemcpyAsync(control_, c.get(), sizeof *c, cudaMemcpyHostToDevice, stream), "upload control");
  cuda::check(cudaStreamSynchronize(stream), "control setup");   // `c` is freed on return
}

void CudaControl::attach(FusedPreprocess& fused) const {
  // The finisher takes the region count from the launch (fused_kernel), one round trip earlier.
  if (fused.launch_data().num_outputs != params_.num_outputs)
    throw ConfigError(fmt::format("cuda control: the fused launch has {} outputs, the control {}",
                                  fused.launch_data().num_outputs, params_.num_outputs));
  fused.set_control(control_, control_blocks(params_));
}

void CudaControl::run(const FusedPreprocess& fused, int frames, cudaStream_t stream) const {
  if (frames < 1 || frames > fused.max_batch())
    throw ConfigError(fmt::format("cuda control: {} frames, the batch holds 1..{}", frames, fused.max_batch()));
  fused.upload(stream);
  for (int b = 0; b < frames; ++b) fused.launch(b, 1, stream);
}

void CudaControl::flush(cudaStream_t stream) const {
  if (closes_late(params_)) cuda::check(flush_fused_control(control_, stream), "close the open control iteration");
}

std::optional<ControlRecord> CudaControl::record() const {
  PublishedRecord* const ring = records_.as<PublishedRecord>();
  if (!ring) return std::nullopt;
  uint64_t newest = 0;
  ControlRecord out{};
  for (int e = 0; e < kRecordRing; ++e) {
    PublishedRecord copy;
    std::memcpy(&copy, &ring[e], sizeof copy);
    // Empty, older, or torn (being rewritten, or its writes not all landed yet).
    if (copy.seq == 0 || copy.seq <= newest || copy.check != record_check(copy.seq, copy.record)) continue;
    newest = copy.seq;
    out = copy.record;
  }
  if (newest == 0) return std::nullopt;
  return out;
}

}  // namespace framefuse::control
