#include "pipeline/decode/decode_balancer.hpp"

#include <algorithm>
#include <thread>
#include <utility>

namespace framefuse {

DecodeBalancer::Lease::Lease(Lease&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)),
      decoder_(std::exchange(o.decoder_, DecoderKind::Auto)),
      device_(o.device_),
      demand_(o.demand_) {}

DecodeBalancer::Lease& DecodeBalancer::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    owner_ = std::exchange(o.owner_, nullptr);
    decoder_ = std::exchange(o.decoder_, DecoderKind::Auto);
    device_ = o.device_;
    demand_ = o.demand_;
  }
  return *this;
}

DecodeBalancer::Lease::~Lease() { release(); }

void DecodeBalancer::Lease::release() {
  if (owner_) owner_->add(decoder_, device_, demand_, -1);
  owner_ = nullptr;
  decoder_ = DecoderKind::Auto;
}

void DecodeBalancer::Lease::move_to_cpu() {
  if (!owner_ || decoder_ == DecoderKind::Cpu) return;
  owner_->add(decoder_, device_, demand_, -1);
  decoder_ = DecoderKind::Cpu;
  owner_->add(decoder_, device_, demand_, +1);
}

void DecodeBalancer::set_capacity(Capacity capacity) {
  std::lock_guard lock(mu_);
  capacity_ = std::move(capacity);
}

CodecCost DecodeBalancer::codec_cost(std::string_view codec, int bit_depth) const {
  std::lock_guard lock(mu_);
  return framefuse::codec_cost(capacity_.costs, codec, bit_depth);
}

void DecodeBalancer::add(DecoderKind decoder, int device, const DecodeDemand& demand, int sign) {
  std::lock_guard lock(mu_);
  const bool on_nvdec = decoder == DecoderKind::Nvdec;
  Load& l = on_nvdec ? nvdec_[device] : cpu_;
  if (demand.paced) {
    const double x = demand.load(on_nvdec);
    l.paced += sign * x;
    if (l.paced < 1e-6 * x) l.paced = 0;   // rounding left by releases
  } else {
    l.unpaced += sign;
  }
}

DecodeBalancer::Load DecodeBalancer::nvdec(int device) const {
  std::lock_guard lock(mu_);
  const auto it = nvdec_.find(device);
  Load l = it == nvdec_.end() ? Load{} : it->second;
  l.capacity = capacity_.nvdec;
  return l;
}

DecodeBalancer::Load DecodeBalancer::cpu() const {
  std::lock_guard lock(mu_);
  Load l = cpu_;
  l.capacity = capacity_.cpu;
  return l;
}

DecodeBalancer::Lease DecodeBalancer::assign(int device, const DecodeDemand& demand) {
  DecoderKind choice = DecoderKind::Nvdec;
  {
    std::lock_guard lock(mu_);
    const Load& nv = nvdec_[device];
    const double nv_cap = capacity_.nvdec, cpu_cap = capacity_.cpu;
    const CodecCost& cost = demand.cost;
    if (demand.paced) {
      const double x_nv = demand.load(true), x_cpu = demand.load(false);
      if (nv.paced + x_nv <= nv_cap) {
        choice = DecoderKind::Nvdec;
      } else if (cpu_.paced + x_cpu <= cpu_cap) {
        choice = DecoderKind::Cpu;
      } else {
        choice = (nv.paced + x_nv) / nv_cap <= (cpu_.paced + x_cpu) / cpu_cap ? DecoderKind::Nvdec : DecoderKind::Cpu;
      }
    } else {   // the rate it would decode at: its share of what is left, over its cost there
      const double nv_rate = (nv_cap - nv.paced) / (nv.unpaced + 1) / cost.nvdec;
      const double cpu_rate = (cpu_cap - cpu_.paced) / (cpu_.unpaced + 1) / cost.cpu;
      choice = nv_rate >= cpu_rate ? DecoderKind::Nvdec : DecoderKind::Cpu;   // NVDEC on a tie
    }
  }
  return hold(choice, device, demand);
}

DecodeBalancer::Lease DecodeBalancer::hold(DecoderKind decoder, int device, const DecodeDemand& demand) {
  Lease lease;
  lease.owner_ = this;
  lease.decoder_ = decoder == DecoderKind::Nvdec ? DecoderKind::Nvdec : DecoderKind::Cpu;
  lease.device_ = device;
  lease.demand_ = demand;
  add(lease.decoder_, device, demand, +1);
  return lease;
}

DecodeBalancer::Capacity decode_capacity(double nvdec_fps, double cpu_fps, const CodecCosts& costs) {
  constexpr double kCpuFpsPerThread = 100;
  if (!(cpu_fps > 0)) cpu_fps = kCpuFpsPerThread * std::max(1u, std::thread::hardware_concurrency());
  return {pixels_per_s_1080p(nvdec_fps), pixels_per_s_1080p(cpu_fps), costs};
}

DecodeDemand decode_demand(int width, int height, double fps, bool paced, CodecCost cost) {
  constexpr double kAssumedFps = 30;
  return {double(width) * double(height) * (fps > 0 ? fps : kAssumedFps), paced, cost};
}

}  // namespace framefuse
