// NpySink: files read back by an independent .npy parser (and by numpy when python3 has it).
#include <gtest/gtest.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/fmt/ranges.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "pipeline/error.hpp"
#include "pipeline/sinks/npy_sink.hpp"
#include "tests/support/output_plans.hpp"

namespace framefuse {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "framefuse_npy_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Bytes read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
  Bytes b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

//! A parsed .npy file, checked against the format 1.0 rules on the way.
struct Npy {
  std::string descr;
  std::vector<int64_t> shape;
  Bytes payload;
};

Npy parse_npy(const fs::path& p) {
  const Bytes b = read_file(p);
  EXPECT_GE(b.size(), 10u) << p;
  if (b.size() < 10) return {};
  const std::string head(reinterpret_cast<const char*>(b.data()), std::min<size_t>(b.size(), 65536 + 10));
  EXPECT_EQ(head.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8)) << p;
  const size_t len = uint8_t(head[8]) | size_t(uint8_t(head[9])) << 8;
  EXPECT_EQ((10 + len) % 64, 0u) << p;
  EXPECT_LE(10 + len, b.size()) << p;
  const std::string dict = head.substr(10, len);
  EXPECT_EQ(dict.back(), '\n') << p;
  std::smatch m;
  static const std::regex re(R"(^\{'descr': '([<|>][a-z][0-9])', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \} *\n$)");
  EXPECT_TRUE(std::regex_match(dict, m, re)) << p << ": " << dict;
  Npy n;
  if (m.empty()) return n;
  n.descr = m[1];
  const std::string dims = m[2];
  static const std::regex num("[0-9]+");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it)
    n.shape.push_back(std::stoll(it->str()));
  if (n.shape.size() == 1) {
    EXPECT_EQ(dims.back(), ',') << "1-d shapes are written (n,)";
  }
  n.payload.assign(b.begin() + 10 + len, b.end());
  return n;
}

Bytes random_payload(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(1, 255);
  Bytes b(n);
  for (auto& x : b) x = std::byte(d(rng));
  return b;
}

//! Two outputs of a 64x48 frame: 3-channel CHW 8x6 and gray HWC 5x4, both of `dtype`.
std::vector<OutputPlan> make_plans(ops::DType dtype) { return test::two_output_plans(dtype, dtype); }

struct SinkCase {
  ops::DType dtype;
  const char* descr;
  int32_t frames_per_file;
};

const SinkCase kSinkCases[] = {
    {ops::DType::F32, "<f4", 1}, {ops::DType::F16, "<f2", 1}, {ops::DType::U8, "|u1", 1},
    {ops::DType::F32, "<f4", 3}, {ops::DType::F16, "<f2", 3}, {ops::DType::U8, "|u1", 3},
};

class NpySinkFiles : public ::testing::TestWithParam<SinkCase> {};

TEST_P(NpySinkFiles, ReadBackEqualsWhatWasWritten) {
  const SinkCase& c = GetParam();
  TempDir dir;
  const auto plans = make_plans(c.dtype);
  SinkSpec spec;
  spec.directory = (dir.path / "out").string();
  spec.frames_per_file = c.frames_per_file;
  auto sink = make_sink(spec, plans, "lobby", {DeviceKind::Cpu});

  constexpr int64_t kFirst = 10, kCount = 7;   // with 3 per file: 3 + 3 + a partial 1
  std::vector<std::vector<Bytes>> written(plans.size());
  for (int64_t f = 0; f < kCount; ++f) {
    std::vector<const std::byte*> ptrs;
    for (size_t k = 0; k < plans.size(); ++k) {
      written[k].push_back(random_payload(plans[k].bytes_per_frame, uint32_t(f * 10 + k + 1)));
      ptrs.push_back(written[k].back().data());
    }
    sink->write(kFirst + f, ptrs);
  }
  const int64_t last_first = kFirst + (kCount - 1) / c.frames_per_file * c.frames_per_file;
  const fs::path last = dir.path / "out" / "cls" / fmt::format("{:08d}.npy", last_first);
  if (c.frames_per_file > 1) {
    EXPECT_FALSE(fs::exists(last)) << "a partial file is not visible before flush";
  }
  sink->flush();
  EXPECT_TRUE(fs::exists(last));

  for (size_t k = 0; k < plans.size(); ++k) {
    const fs::path folder = dir.path / "out" / plans[k].name;
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(folder)) {
      const auto ext = e.path().extension();
      EXPECT_TRUE(ext == ".npy" || e.path().filename() == "metadata.json") << e.path();
      files += ext == ".npy";
    }
    for (int64_t f = 0; f < kCount; f += c.frames_per_file) {
      const Npy npy = parse_npy(folder / fmt::format("{:08d}.npy", kFirst + f));
      EXPECT_EQ(npy.descr, c.descr);
      const int64_t n = std::min<int64_t>(c.frames_per_file, kCount - f);
      std::vector<int64_t> shape = plans[k].shape;
      if (c.frames_per_file > 1) shape.insert(shape.begin(), n);
      EXPECT_EQ(npy.shape, shape) << "file of frame " << kFirst + f;
      Bytes expected;
      for (int64_t i = f; i < f + n; ++i) expected.insert(expected.end(), written[k][i].begin(), written[k][i].end());
      EXPECT_TRUE(npy.payload == expected) << "payload of file " << kFirst + f << " output " << plans[k].name;
      ++files;
    }
    EXPECT_EQ(files, 2 * size_t((kCount + c.frames_per_file - 1) / c.frames_per_file)) << "no other files";
    const auto meta = read_file(folder / "metadata.json");
    const std::string json(reinterpret_cast<const char*>(meta.data()), meta.size());
    EXPECT_NE(json.find(fmt::format("\"shape\": [{}]", fmt::join(plans[k].shape, ", "))), std::string::npos) << json;
  }

  // numpy, where a python here has it, must read the same arrays (its bytes dumped next to each file).
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    if (std::system(fmt::format("{} -c 'import numpy' >/dev/null 2>&1", candidate).c_str()) == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "no python3 with numpy here: numpy's reading not checked";
  const std::string script = fmt::format(
      "import numpy, pathlib\n"
      "for p in pathlib.Path('{}').rglob('*.npy'):\n"
      "    a = numpy.load(p)\n"
      "    assert a.dtype == numpy.dtype('{}'), (p, a.dtype)\n"
      "    p.with_suffix('.shape').write_text(','.join(map(str, a.shape)))\n"
      "    p.with_suffix('.raw').write_bytes(a.tobytes())\n",
      (dir.path / "out").string(), c.descr);
  ASSERT_EQ(std::system(fmt::format("{} -c \"{}\"", python, script).c_str()), 0);
  for (size_t k = 0; k < plans.size(); ++k) {
    for (int64_t f = 0; f < kCount; f += c.frames_per_file) {
      const fs::path base = dir.path / "out" / plans[k].name / fmt::format("{:08d}", kFirst + f);
      const Npy npy = parse_npy(fs::path(base).replace_extension(".npy"));
      EXPECT_TRUE(read_file(fs::path(base).replace_extension(".raw")) == npy.payload);
      const auto shape = read_file(fs::path(base).replace_extension(".shape"));
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(shape.data()), shape.size()), fmt::format("{}", fmt::join(npy.shape, ",")));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, NpySinkFiles, ::testing::ValuesIn(kSinkCases), [](const auto& info) {
  return fmt::format("{}_x{}", info.param.descr[2] == '4' ? "f32" : info.param.descr[2] == '2' ? "f16" : "u8",
                     info.param.frames_per_file);
});

TEST(NpySink, DestructorCompletesAPartialStackedFile) {
  TempDir dir;
  const auto plans = make_plans(ops::DType::U8);
  {
    NpySink sink((dir.path / "out").string(), plans, 4, "lobby");
    const Bytes a = random_payload(plans[0].bytes_per_frame, 1), b = random_payload(plans[1].bytes_per_frame, 2);
    const std::byte* ptrs[] = {a.data(), b.data()};
    sink.write(0, ptrs);
    sink.write(1, ptrs);
  }
  const Npy npy = parse_npy(dir.path / "out" / "gray" / "00000000.npy");
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{2, 4, 5, 1}));
  EXPECT_EQ(npy.payload.size(), 2 * plans[1].bytes_per_frame);
}

TEST(NpySink, NullSinkWritesNothing) {
  TempDir dir;
  const auto plans = make_plans(ops::DType::F32);
  SinkSpec spec;
  spec.kind = SinkKind::Null;
  spec.directory = (dir.path / "out").string();
  auto sink = make_sink(spec, plans, "bench", {DeviceKind::Cpu});
  const Bytes a = random_payload(plans[0].bytes_per_frame, 1), b = random_payload(plans[1].bytes_per_frame, 2);
  const std::byte* ptrs[] = {a.data(), b.data()};
  sink->write(0, ptrs);
  sink->flush();
  EXPECT_FALSE(fs::exists(dir.path / "out"));
  EXPECT_FALSE(reads_host_outputs(spec)) << "its pipelines need not download their outputs";
  spec.kind = SinkKind::Npy;
  EXPECT_TRUE(reads_host_outputs(spec));
}

TEST(NpySink, BadSpecsAreConfigErrorsNamingThePipeline) {
  TempDir dir;
  auto plans = make_plans(ops::DType::F32);
  const std::string out = (dir.path / "out").string();
  auto message = [&](const std::string& directory, const std::vector<OutputPlan>& p, int32_t n) -> std::string {
    try {
      NpySink sink(directory, p, n, "lobby");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no ConfigError)";
  };
  EXPECT_EQ(message(out, plans, 0), "pipeline 'lobby' sink: frames_per_file must be >= 1, got 0");
  EXPECT_EQ(message("", plans, 1), "pipeline 'lobby' sink: npy sink needs a directory");
  auto twins = plans;
  twins[1].name = "cls";
  EXPECT_EQ(message(out, twins, 1), "pipeline 'lobby' sink: two outputs are named 'cls'");
  auto escape = plans;
  escape[0].name = "../up";
  EXPECT_EQ(message(out, escape, 1), "pipeline 'lobby' sink: output name '../up' cannot be a folder name");
}

TEST(NpySink, AFileThatCannotBeCompletedLeavesNoPartialFileBehind) {
  TempDir dir;
  const auto plans = make_plans(ops::DType::U8);
  NpySink sink((dir.path / "out").string(), plans, 1, "lobby");
  fs::create_directories(dir.path / "out" / "cls" / "00000000.npy");   // the rename onto it fails
  const Bytes a = random_payload(plans[0].bytes_per_frame, 1), b = random_payload(plans[1].bytes_per_frame, 2);
  const std::byte* ptrs[] = {a.data(), b.data()};
  try {
    sink.write(0, ptrs);
    FAIL() << "no SinkError";
  } catch (const SinkError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot rename"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir.path / "out" / "cls" / "00000000.npy.partial"));
}

TEST(NpySink, FolderThatCannotBeCreatedIsASinkErrorNamingIt) {
  TempDir dir;
  std::ofstream(dir.path / "blocker") << "a file where a folder should be";
  const std::string out = (dir.path / "blocker" / "out").string();
  try {
    NpySink sink(out, make_plans(ops::DType::F32), 1, "lobby");
    FAIL() << "no SinkError";
  } catch (const SinkError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(fmt::format("pipeline 'lobby' sink: cannot create folder '{}/cls': ", out), 0), 0u) << msg;
  }
}

}  // namespace
}  // namespace framefuse
