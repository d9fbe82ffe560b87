//! The Executor seam's asynchronous calls as every backend without its own (the CPU executor)
//! gets them: submit() keeps one batch, complete() processes it, strictly one at a time; outputs
//! are process()'s and the frames' owners are dropped by complete().
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "pipeline/exec/cpu_executor.hpp"
#include "pipeline/workloads.hpp"
#include "tests/support/test_images.hpp"

namespace framefuse::test {
namespace {

TEST(ExecutorAsync, DefaultSubmitCompleteIsProcessOneBatchAtATime) {
  const HostImage a = random_image(ops::PixelFormat::Nv12, 320, 180, 71u);
  const HostImage b = random_image(ops::PixelFormat::Nv12, 320, 180, 72u);
  const FrameInfo info = frame_info(a, ops::ColorMatrix::Bt709, ops::ColorRange::Limited);
  std::vector<OutputPlan> plans;
  for (const auto& s : {workloads::classify_spec(), workloads::thumbnail_spec()})
    plans.push_back(make_output_plan(s, info, "async/" + s.name));
  CpuExecutor exec(1);
  exec.setup(info, make_color_params(ColorSpec{}, info), plans, 2);
  EXPECT_EQ(exec.max_in_flight(), 1);
  EXPECT_EQ(exec.in_flight(), 0);

  const std::vector<ops::ImageView> views{a.view(), b.view()};
  auto want = poisoned_outputs(plans, 2);
  exec.process(views, pointers(want));

  const std::vector<FrameMemory> memory(2, FrameMemory::Host);
  std::weak_ptr<const void> held;
  {
    const std::vector<std::shared_ptr<const void>> owners{std::make_shared<int>(1), std::make_shared<int>(2)};
    held = owners[1];
    exec.submit(views, memory, owners);
  }
  EXPECT_EQ(exec.in_flight(), 1);
  EXPECT_FALSE(held.expired()) << "the owner of a frame in flight was dropped";
  EXPECT_THROW(exec.submit(views, memory, {}), DeviceError) << "a second batch in flight";
  auto got = poisoned_outputs(plans, 2);
  const Completion done = exec.complete(pointers(got));
  EXPECT_FALSE(done.device_seconds.has_value());
  EXPECT_EQ(exec.in_flight(), 0);
  EXPECT_TRUE(held.expired());
  for (size_t k = 0; k < plans.size(); ++k) EXPECT_EQ(got[k], want[k]) << "output " << plans[k].name;
  EXPECT_THROW(exec.complete(pointers(got)), DeviceError) << "nothing in flight";
}

}  // namespace
}  // namespace framefuse::test
