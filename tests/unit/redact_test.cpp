#include "pipeline/util/redact.hpp"

#include <gtest/gtest.h>

namespace framefuse {
namespace {

struct RedactCase {
  const char* in;
  const char* out;
};

constexpr RedactCase kUris[] = {
    {"rtsp://user:secret@10.0.0.1/stream", "rtsp://user:***@10.0.0.1/stream"},
    {"rtsp://user@10.0.0.1/stream", "rtsp://user:***@10.0.0.1/stream"},
    {"rtsp://user:p@ss@host:554/a?b=c", "rtsp://user:***@host:554/a?b=c"},
    {"rtsp://10.0.0.1/stream", "rtsp://10.0.0.1/stream"},
    {"/var/video/cam@1.mp4", "/var/video/cam@1.mp4"},
    {"rtsp://host/path@not-userinfo", "rtsp://host/path@not-userinfo"},
    // A URI in the query with credentials of its own (found by tests/fuzz/text_fuzz.cpp).
    {"rtsp://u:p@h/x?next=rtsp://v:q@g/", "rtsp://u:***@h/x?next=rtsp://v:***@g/"},
    {"rtsp://cam/a?backup=rtsps://admin:pw@cam2", "rtsp://cam/a?backup=rtsps://admin:***@cam2"},
    {"rtsp://cam:rtsp://u:p@h/", "rtsp://cam:rtsp://u:***@h/"},
};

TEST(Redact, UriHidesPasswordOnly) {
  for (const auto& c : kUris) EXPECT_EQ(redact_uri(c.in), c.out) << c.in;
}

constexpr RedactCase kTexts[] = {
    {"Connection to rtsp://u:pw@h:554/x failed", "Connection to rtsp://u:***@h:554/x failed"},
    {"'rtsp://a:b@h/' and rtsps://c:d@k/", "'rtsp://a:***@h/' and rtsps://c:***@k/"},
    {"tcp://127.0.0.1:1?timeout=5 failed", "tcp://127.0.0.1:1?timeout=5 failed"},
    {"no url", "no url"},
    {"open rtsp://h/?r=rtsp://a:b@c failed", "open rtsp://h/?r=rtsp://a:***@c failed"},
};

TEST(Redact, TextHidesEveryCredential) {
  for (const auto& c : kTexts) EXPECT_EQ(redact_text(c.in), c.out) << c.in;
}

}  // namespace
}  // namespace framefuse
