// RunTimer (run_timer.hpp): a run's device time leaves out the host's time between its launches; the device work
// between the events is inside it; a run that waits for the device inside it is refused, not timed wrong; a failed
// launch becomes a SubjectError, and any exception frees the stream at once, so the timer can be reused.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/run_timer.hpp"
#include "kernels/cuda/tests/gpu_test_support.hpp"

namespace fc::kernels::cuda {
namespace {

struct Scratch {
  void* p = nullptr;
  explicit Scratch(std::size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~Scratch() { cudaFree(p); }
};

void must(cudaError_t e) {
  if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
}

TEST(RunTimer, LeavesOutTheHostsTimeBetweenLaunches) {
  REQUIRE_GPU();
  Scratch buffer(1 << 20);
  RunTimer timer("test", nullptr);
  // Two microsecond-scale launches 30 ms apart on the host: events around an idle stream would time the 30 ms.
  const double ms = timer.time([&] {
    must(cudaMemsetAsync(buffer.p, 1, 1 << 20, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    must(cudaMemsetAsync(buffer.p, 2, 1 << 20, nullptr));
  });
  EXPECT_LT(ms, 5.0);
  EXPECT_GT(ms, 0.0);
}

TEST(RunTimer, TimesTheDevicesWorkBetweenTheEvents) {
  REQUIRE_GPU();
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  Scratch buffer(kBytes);
  RunTimer timer("test", nullptr);
  for (int i = 0; i < 3; ++i) (void)timer.time([&] { must(cudaMemsetAsync(buffer.p, 0, kBytes, nullptr)); });
  const double ms = timer.time([&] { must(cudaMemsetAsync(buffer.p, 0, kBytes, nullptr)); });
  // (1 GiB at no more than 10 TB/s, above any HBM of today: at least 0.1 ms)
  EXPECT_GT(ms, 0.1);
}

TEST(RunTimer, RefusesARunThatWaitsForTheDevice) {
  REQUIRE_GPU();
  Scratch buffer(1 << 20);
  RunTimer timer("sync-subject", nullptr, /*hold_limit_ms=*/50);
  try {
    (void)timer.time([&] {
      must(cudaMemsetAsync(buffer.p, 0, 1 << 20, nullptr));
      must(cudaStreamSynchronize(nullptr));  // (waits for the hold until it gives up)
    });
    FAIL() << "a run that synchronizes inside the timed region was timed";
  } catch (const SubjectError& e) {
    EXPECT_NE(std::string(e.what()).find("sync-subject: timed run: the device waited more than 50 ms"), std::string::npos) << e.what();
  }
  // The timer stays usable.
  EXPECT_LT(timer.time([&] { must(cudaMemsetAsync(buffer.p, 0, 1 << 20, nullptr)); }), 5.0);
}

// A run that enqueues a few milliseconds of work and then throws: when the exception arrives, the hold must have been
// released (or the wait below would take the 10 s limit) and the run's work waited for (or the stream would still be
// busy), so that the timer can be reused at once.
template <class Throw>
void expect_the_stream_idle_when_the_exception_arrives(Throw&& thrower) {
  constexpr std::size_t kBytes = std::size_t{1} << 30;
  Scratch buffer(kBytes);
  RunTimer timer("throwing-subject", nullptr, /*hold_limit_ms=*/10000);
  const auto t0 = std::chrono::steady_clock::now();
  bool thrown = false;
  try {
    (void)timer.time([&] {
      for (int i = 0; i < 8; ++i) must(cudaMemsetAsync(buffer.p, i, kBytes, nullptr));  // (several ms of device work)
      thrower();
    });
  } catch (...) {
    thrown = true;
    EXPECT_EQ(cudaStreamQuery(nullptr), cudaSuccess) << "the run's work still queued when its exception arrived";
  }
  EXPECT_TRUE(thrown);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  EXPECT_LT(timer.time([&] { must(cudaMemsetAsync(buffer.p, 0, 1 << 20, nullptr)); }), 5.0);
}

TEST(RunTimer, AFailedLaunchBecomesASubjectErrorOnceTheStreamIsIdle) {
  REQUIRE_GPU();
  RunTimer timer("failing-subject", nullptr);
  try {
    (void)timer.time([] { throw std::runtime_error("launch refused"); });
    FAIL() << "no error";
  } catch (const SubjectError& e) {
    EXPECT_EQ(std::string(e.what()), "failing-subject: timed run: launch refused");
  }
  expect_the_stream_idle_when_the_exception_arrives([] { throw std::runtime_error("launch refused"); });
}

TEST(RunTimer, AnyOtherExceptionPassesThroughOnceTheStreamIsIdle) {
  REQUIRE_GPU();
  RunTimer timer("throwing-subject", nullptr);
  EXPECT_THROW((void)timer.time([] { throw std::logic_error("not a launch failure"); }), std::logic_error);
  expect_the_stream_idle_when_the_exception_arrives([] { throw std::logic_error("not a launch failure"); });
}

// time_runs' warm-up: `warmup` runs when no seconds are asked for; with seconds, as many more runs as it takes, so the
// timed runs start no earlier than that many seconds after the first warm-up run.
TEST(TimeRuns, WarmsUpForTheRunsAndTheSecondsAsked) {
  REQUIRE_GPU();
  Scratch buffer(1 << 20);
  int calls = 0;
  EXPECT_EQ(time_runs("test", 3, 0.0, 2, [&] {
              ++calls;
              must(cudaMemsetAsync(buffer.p, 0, 1 << 20, nullptr));
            }).milliseconds.size(),
            2u);
  EXPECT_EQ(calls, 3 + 2);

  calls = 0;
  std::chrono::steady_clock::time_point first_call, last_call;
  constexpr double kSeconds = 0.2;
  const std::vector<double> ms = time_runs("test", 1, kSeconds, 2, [&] {
    if (calls == 0) first_call = std::chrono::steady_clock::now();
    ++calls;
    last_call = std::chrono::steady_clock::now();  // (the last call is a timed run, after the whole warm-up)
    must(cudaMemsetAsync(buffer.p, 0, 1 << 20, nullptr));
  }).milliseconds;
  EXPECT_EQ(ms.size(), 2u);
  EXPECT_GT(calls, 1 + 2) << "a 1 MiB memset takes microseconds: 0.2 s of warm-up needs more than one run";
  EXPECT_GE(std::chrono::duration<double>(last_call - first_call).count(), kSeconds);
}

TEST(RunTimer, RefusesAHoldLimitOutsideItsRange) {
  // (checked before any CUDA call: the message must be the limit's, not a missing device's)
  for (const double limit : {0.0, -1.0, 1e9, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      RunTimer timer("test", nullptr, limit);
      FAIL() << "hold limit " << limit << " accepted";
    } catch (const SubjectError& e) {
      EXPECT_NE(std::string(e.what()).find("test: the timer's hold limit must lie in (0, 60000] ms"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fc::kernels::cuda
