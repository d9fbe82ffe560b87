#pragma once
//! The daemon's HTTP endpoint (Boost.Beast, kept inside http_server.cpp). One I/O thread serves
//! every connection; JPEG previews are encoded on a separate worker so scrapes never wait on them.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "daemon/http/status_source.hpp"

namespace framefuse::daemon {

struct HttpServerOptions {
  std::string bind = "127.0.0.1";                  //!< address or host name to listen on
  uint16_t port = 9400;                            //!< 0 = ephemeral (see HttpServer::port())
  //! Connections served at once; a further one closes the connection idle longest (keep-alive,
  //! between requests), or with none idle gets 503 and is closed.
  int max_connections = 64;
  std::chrono::milliseconds idle_timeout{30000};   //!< a connection idle this long between requests is closed
  size_t max_header_bytes = 8192;                  //!< request line + headers; larger gets 431
};

//! RAII: the constructor binds and starts serving; the destructor stops and joins. `source` must
//! outlive the server.
class HttpServer {
 public:
  //! Throws std::runtime_error naming bind:port when the address cannot be bound.
  HttpServer(HttpServerOptions opts, StatusSource& source);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  //! The bound port (the kernel's choice when opts.port was 0).
  uint16_t port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace framefuse::daemon
