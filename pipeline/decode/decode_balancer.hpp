#pragma once
//! Hybrid decode: spreads the `decoder: auto` streams of CUDA pipelines over NVDEC and the host's
//! cores once NVDEC is full. Streams with a fixed decoder (`nvdec`, `cpu`, a CPU pipeline, an
//! `auto` one NVDEC could not take) are counted too, so auto streams go around them. Measured on
//! the H200 host (tests/bench/RESULTS.md, session 13): NVDEC held 512 live 1080p30 streams, while
//! a 1080p frame decoded in software costs ~10 ms of CPU (16 cores: ~1,400-1,600 fps); unpaced
//! files, whose NVDEC sessions each decode ~500-600 fps, gained 4 % from spreading 8 of them 7 + 1
//! (session 14, runs long enough that opening the decoders does not count).
//!
//! A paced stream (a camera, a `realtime` file) needs its pixel rate: width x height x frame rate.
//! It goes to NVDEC while the device's NVDEC has room for it, else to the cores while they have room,
//! else to whichever of the two it loads less, relative to its capacity. An unpaced file decodes as
//! fast as its decoder lets it: it goes where the capacity the paced streams leave, shared among
//! the unpaced streams already there and it, is larger (NVDEC on a tie).
//! Thread-safe; outlives its leases.
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>

#include "pipeline/decode/codec_cost.hpp"
#include "pipeline/spec.hpp"

namespace framefuse {

//! What a stream asks of its decoder.
struct DecodeDemand {
  double pixels_per_s = 0;   //!< paced: width x height x frame rate
  bool paced = true;         //!< false: an unpaced file, as fast as it decodes
  CodecCost cost;            //!< its codec's cost per pixel
  //! Paced: what it loads NVDEC (`nvdec`) or the cores with, pixels per second of 8-bit H.264.
  double load(bool nvdec) const { return pixels_per_s * (nvdec ? cost.nvdec : cost.cpu); }
};

class DecodeBalancer {
 public:
  //! Decode capacities in pixels per second of 8-bit H.264: `nvdec` of each CUDA device, `cpu` of
  //! the host; and what a pixel of each codec costs against them.
  struct Capacity {
    double nvdec = 0;
    double cpu = 0;
    CodecCosts costs = measured_codec_costs();
  };
  //! What one decoder carries, in pixels per second of 8-bit H.264 (a stream's pixels per second
  //! times its codec's cost there).
  struct Load {
    double paced = 0;          //!< of its paced streams
    int32_t unpaced = 0;       //!< unpaced streams
    double capacity = 0;
  };

  //! A stream's place on a decoder: counted there until the lease goes (or moves to the cores).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept;
    Lease& operator=(Lease&& o) noexcept;
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

    //! Nvdec or Cpu; Auto for an empty lease.
    DecoderKind decoder() const { return decoder_; }
    //! The stream gives NVDEC up (it could not decode it): counted on the cores from now on.
    void move_to_cpu();

   private:
    friend class DecodeBalancer;
    void release();
    DecodeBalancer* owner_ = nullptr;
    DecoderKind decoder_ = DecoderKind::Auto;
    int device_ = -1;   //!< the CUDA device of an Nvdec lease
    DecodeDemand demand_;
  };

  explicit DecodeBalancer(Capacity capacity) : capacity_(std::move(capacity)) {}
  DecodeBalancer(const DecodeBalancer&) = delete;
  DecodeBalancer& operator=(const DecodeBalancer&) = delete;

  //! The capacities and codec costs from now on (a reload); leases keep their decoders and loads.
  void set_capacity(Capacity capacity);
  //! What a stream of `codec` (FFmpeg's name) at `bit_depth` bits per sample costs, by the
  //! capacity's costs (codec_cost()).
  CodecCost codec_cost(std::string_view codec, int bit_depth) const;
  //! Chooses NVDEC of CUDA device `device` or the cores for an `auto` stream (class comment).
  Lease assign(int device, const DecodeDemand& demand);
  //! Counts a stream whose decoder is fixed: `decoder` Nvdec (on `device`) or Cpu.
  Lease hold(DecoderKind decoder, int device, const DecodeDemand& demand);
  //! What NVDEC of `device` carries now.
  Load nvdec(int device) const;
  //! What the cores carry now.
  Load cpu() const;

 private:
  void add(DecoderKind decoder, int device, const DecodeDemand& demand, int sign);

  mutable std::mutex mu_;
  Capacity capacity_;
  std::map<int, Load> nvdec_;   //!< per CUDA device (capacity unused: capacity_.nvdec)
  Load cpu_;
};

//! 1080p frames per second as pixels per second.
constexpr double pixels_per_s_1080p(double fps) { return fps * 1920.0 * 1080.0; }

//! Capacities from 1080p frames per second: `nvdec_fps` per GPU, `cpu_fps` for the cores (0: auto,
//! 100 per hardware thread: the 16 threads of the H200 host decoded 1,365-1,620 fps in software),
//! with codec costs `costs`.
DecodeBalancer::Capacity decode_capacity(double nvdec_fps, double cpu_fps,
                                         const CodecCosts& costs = measured_codec_costs());

//! What a stream of `width` x `height` at `fps` (0: unknown, 30 assumed) of a codec costing `cost`
//! asks, paced or not.
DecodeDemand decode_demand(int width, int height, double fps, bool paced, CodecCost cost = {});

}  // namespace framefuse
