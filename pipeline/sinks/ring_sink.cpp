#include "pipeline/sinks/ring_sink.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <new>
#include <spdlog/fmt/fmt.h>

#include "pipeline/error.hpp"

namespace framefuse {
namespace {

constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

//! Copies `s` into the fixed field `dst` (NUL-terminated; the caller checked it fits).
template <size_t N>
void put(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(s.size(), N - 1));
}

//! `r` as a ring's control block, for a ring of `outputs` outputs.
shm::ShmControl control_block(const control::ControlRecord& r, size_t outputs) {
  shm::ShmControl c{};
  c.valid = 1;
  c.health_flags = r.health_flags;
  c.measured_frame = r.iteration;
  c.mean_luma = r.mean_luma;
  c.variance = r.variance;
  c.motion = r.motion;
  c.black_fraction = r.black_fraction;
  c.white_fraction = r.white_fraction;
  c.scene_distance = r.scene_distance;
  c.outputs = uint32_t(std::clamp<int64_t>(r.num_outputs, 0, int64_t(outputs)));
  for (uint32_t k = 0; k < c.outputs; ++k) {
    const auto& o = r.out[k];
    c.output[k] = {o.gain, o.mean_luma, o.motion, o.x, o.y, o.w, o.h};
  }
  return c;
}

}  // namespace

bool valid_shm_name(const std::string& name) {
  if (name.empty() || name.size() > 200 || name[0] == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

RingSink::RingSink(const std::string& name, int32_t slots, std::vector<OutputPlan> plans, const std::string& pipeline,
                   shm::RingMemory memory, std::string where)
    : name_("/" + name), plans_(std::move(plans)), where_(std::move(where)) {
  if (!valid_shm_name(name))
    throw ConfigError(where_ + ": not a shared-memory name (1-200 letters, digits, '.', '_', '-'; not starting with '.')");
  if (slots < 1) throw ConfigError(fmt::format("{}: slots must be at least 1, got {}", where_, slots));
  if (plans_.empty() || plans_.size() > shm::kMaxOutputs)
    throw ConfigError(fmt::format("{}: {} outputs (a ring describes 1 to {})", where_, plans_.size(), shm::kMaxOutputs));
  // Host: the tensors follow the slot's header and control block; Cuda: they fill a device slot.
  const bool host = memory == shm::RingMemory::Host;
  const size_t align = host ? shm::kAlign : shm::kDeviceAlign;
  const size_t slot_head = sizeof(shm::ShmSlot) + sizeof(shm::ShmControl);
  shm::ShmOutput described[shm::kMaxOutputs]{};
  size_t offset = host ? slot_head : 0;
  for (size_t k = 0; k < plans_.size(); ++k) {
    const OutputPlan& plan = plans_[k];
    shm::ShmOutput& out = described[k];
    if (plan.name.size() >= sizeof out.name || plan.shape.size() > shm::kMaxDims)
      throw ConfigError(fmt::format("{}: output '{}' has a longer name or more dimensions than the ring describes",
                                    where_, plan.name));
    put(out.name, plan.name);
    put(out.dtype, ops::dtype_name(plan.params.store.dtype));
    out.ndim = uint32_t(plan.shape.size());
    std::copy(plan.shape.begin(), plan.shape.end(), out.shape);
    out.offset = offset;
    out.bytes = plan.bytes_per_frame;
    offset = align_up(offset + plan.bytes_per_frame, align);
  }
  const size_t slot_bytes = align_up(host ? offset : slot_head, 4096);
  bytes_ = shm::kShmHeaderBytes + size_t(slots) * slot_bytes;

  ::shm_unlink(name_.c_str());   // a stale ring of a writer that died: readers keep their mapping
  const int fd = ::shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  if (fd < 0) throw SinkError(fmt::format("{}: cannot create /dev/shm{}: {}", where_, name_, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) == 0) inode_ = uint64_t(st.st_ino);
  // posix_fallocate, not ftruncate: the pages are reserved now, so a full /dev/shm fails here and
  // not with SIGBUS at some later frame. They start zeroed.
  const int err = ::posix_fallocate(fd, 0, off_t(bytes_));
  void* map = err == 0 ? ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    ::shm_unlink(name_.c_str());
    throw SinkError(fmt::format("{}: cannot map {} bytes of /dev/shm{}: {}", where_, bytes_, name_,
                                std::strerror(err != 0 ? err : map_errno)));
  }
  base_ = static_cast<std::byte*>(map);
  auto* h = new (base_) shm::ShmHeader{};   // published = closed = 0
  h->version = shm::kVersion;
  h->header_bytes = shm::kShmHeaderBytes;
  h->slots = uint32_t(slots);
  h->outputs = uint32_t(plans_.size());
  h->slot_bytes = slot_bytes;
  h->writer_pid = ::getpid();
  put(h->pipeline, pipeline);
  std::copy(std::begin(described), std::end(described), h->output);
  h->memory = uint32_t(memory);
  if (!host) h->device_slot_bytes = offset;
  for (int32_t i = 0; i < slots; ++i) new (slot(uint64_t(i))) shm::ShmSlot{};
  placed_frames_.resize(size_t(slots));
  placed_outs_.reserve(plans_.size());
}

void RingSink::publish() {
  // The magic last: a reader that finds it finds the rest written.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(header().magic, shm::kMagic, sizeof header().magic);
}

RingSink::~RingSink() {
  if (!base_) return;
  flush();
  ::munmap(base_, bytes_);
  // /dev/shm is where glibc's shm_open keeps the names it makes.
  struct stat st {};
  if (::stat(("/dev/shm" + name_).c_str(), &st) == 0 && uint64_t(st.st_ino) == inode_) ::shm_unlink(name_.c_str());
}

//! Takes the next c for a frame: its slot reads "being written" from here on.
uint64_t RingSink::begin_frame() {
  const uint64_t c = written_++;
  auto* s = reinterpret_cast<shm::ShmSlot*>(slot(c));
  s->seq.store(2 * c + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);   // readers see "being written" before any byte changes
  return c;
}

std::span<std::byte* const> RingSink::place_outputs(int64_t frame_index) {
  if (header().memory != uint32_t(shm::RingMemory::Cuda)) return {};
  if (placed_ >= header().slots)
    throw SinkError(fmt::format("{}: {} frames in flight, more than the ring's {} slots", where_, placed_ + 1,
                                header().slots));
  const uint64_t c = begin_frame();
  if (placed_++ == 0) placed_first_ = c;
  placed_frames_[c % header().slots] = frame_index;
  placed_outs_.clear();
  for (size_t k = 0; k < plans_.size(); ++k) placed_outs_.push_back(device_slot(c) + header().output[k].offset);
  return placed_outs_;
}

void RingSink::write(int64_t frame_index, std::span<const std::byte* const> outputs) {
  uint64_t c = 0;
  if (placed_ > 0 && placed_frames_[placed_first_ % header().slots] == frame_index) {
    c = placed_first_++;
    --placed_;
  } else {
    c = begin_frame();
  }
  std::byte* const slot_base = slot(c);
  auto* s = reinterpret_cast<shm::ShmSlot*>(slot_base);
  put_tensors(c, outputs.first(std::min(outputs.size(), plans_.size())));
  const shm::ShmControl control = control_ && control_->first == frame_index
                                      ? control_block(control_->second, plans_.size())
                                      : shm::ShmControl{};   // valid = 0: no record came with this frame
  control_.reset();
  std::memcpy(slot_base + sizeof(shm::ShmSlot), &control, sizeof control);
  s->frame_index.store(frame_index, std::memory_order_relaxed);
  s->seq.store(2 * c + 2, std::memory_order_release);
  header().published.store(c + 1, std::memory_order_release);
}

void RingSink::write_control(int64_t frame_index, const control::ControlRecord& record) {
  control_.emplace(frame_index, record);
}

void RingSink::flush() { header().closed.store(1, std::memory_order_release); }

}  // namespace framefuse
