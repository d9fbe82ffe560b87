//! Choosing the backend (pipeline/exec/device.hpp) from a probe of the host's CUDA devices: auto,
//! cpu, and cuda:N refused with the reason when the host lacks it.
#include <gtest/gtest.h>

#include <string>

#include "pipeline/error.hpp"
#include "pipeline/exec/device.hpp"

namespace framefuse::test {
namespace {

TEST(Device, AutoIsTheFirstCudaDeviceWhenThereIsOneElseTheCpu) {
  const DeviceSpec want{DeviceKind::Auto, 0};
  EXPECT_EQ(resolve_device(want, {2, "NVIDIA H200"}), (DeviceSpec{DeviceKind::Cuda, 0}));
  EXPECT_EQ(resolve_device(want, {0, "no CUDA device"}), (DeviceSpec{DeviceKind::Cpu, 0}));
  EXPECT_EQ(resolve_device({DeviceKind::Cpu, 0}, {2, "NVIDIA H200"}), (DeviceSpec{DeviceKind::Cpu, 0}));
}

TEST(Device, ACudaDeviceThatIsNotThereIsRefusedWithTheReason) {
  EXPECT_EQ(resolve_device({DeviceKind::Cuda, 1}, {2, "NVIDIA H200"}), (DeviceSpec{DeviceKind::Cuda, 1}));
  for (const int index : {2, -1}) {
    try {
      resolve_device({DeviceKind::Cuda, index}, {2, "NVIDIA H200"});
      ADD_FAILURE() << "cuda:" << index << " accepted";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("cuda:" + std::to_string(index) + " requested but 2 CUDA device(s)"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(resolve_device({DeviceKind::Cuda, 0}, {0, "no CUDA-capable device is detected"}), DeviceError);
  EXPECT_EQ(to_string({DeviceKind::Cuda, 3}), "cuda:3");
  EXPECT_EQ(to_string({DeviceKind::Cpu, 0}), "cpu");
}

}  // namespace
}  // namespace framefuse::test
