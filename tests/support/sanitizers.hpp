#pragma once
//! How many times slower code runs under the sanitizer this test was built with, for wall-time
//! bounds that catch a hang or a wait on the wrong thing while real work still has to run (ThreadSanitizer
//! ~5-15x, more on a loaded 2-core host; AddressSanitizer ~2-3x). Not for speed targets: those are benchmarks.
namespace framefuse::test {

#if defined(__SANITIZE_THREAD__)
inline constexpr double kSanitizerSlowdown = 10;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr double kSanitizerSlowdown = 3;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr double kSanitizerSlowdown = 10;
#elif __has_feature(address_sanitizer)
inline constexpr double kSanitizerSlowdown = 3;
#else
inline constexpr double kSanitizerSlowdown = 1;
#endif
#else
inline constexpr double kSanitizerSlowdown = 1;
#endif

}  // namespace framefuse::test
