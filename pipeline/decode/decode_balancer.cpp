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
  capacity_ = capacity;
}

void DecodeBalancer::add(DecoderKind decoder, int device, const DecodeDemand& demand, int sign) {
  std::lock_guard lock(mu_);
  Load& l = decoder == DecoderKind::Nvdec ? nvdec_[device] : cpu_;
  if (demand.paced) {
    l.paced += sign * demand.pixels_per_s;
    if (l.paced < 1e-6 * demand.pixels_per_s) l.paced = 0;   // rounding left by releases
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
    if (demand.paced) {
      const double x = demand.pixels_per_s;
      if (nv.paced + x <= nv_cap) {
        choice = DecoderKind::Nvdec;
      } else if (cpu_.paced + x <= cpu_cap) {
        choice = DecoderKind::Cpu;
      } else {
        choice = (nv.paced + x) / nv_cap <= (cpu_.paced + x) / cpu_cap ? DecoderKind::Nvdec : DecoderKind::Cpu;
      }
    } else {
      const double nv_share = (nv_cap - nv.paced) / (nv.unpaced + 1);
      const double cpu_share = (cpu_cap - cpu_.paced) / (cpu_.unpaced + 1);
      choice = nv_share >= cpu_share ? DecoderKind::Nvdec : DecoderKind::Cpu;   // NVDEC on a tie
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

DecodeBalancer::Capacity decode_capacity(double nvdec_fps, double cpu_fps) {
  constexpr double kCpuFpsPerThread = 100;
  if (!(cpu_fps > 0)) cpu_fps = kCpuFpsPerThread * std::max(1u, std::thread::hardware_concurrency());
  return {pixels_per_s_1080p(nvdec_fps), pixels_per_s_1080p(cpu_fps)};
}

DecodeDemand decode_demand(int width, int height, double fps, bool paced) {
  constexpr double kAssumedFps = 30;
  return {double(width) * double(height) * (fps > 0 ? fps : kAssumedFps), paced};
}

}  // namespace framefuse
