#include "daemon/http/http_server.hpp"

#include <utility>   // before Asio: Boost 1.74 relies on it being there

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <limits>
#include <list>
#include <memory>
#include <optional>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <stdexcept>
#include <thread>

#include "daemon/http/routes.hpp"
#include "daemon/version.hpp"

namespace framefuse::daemon {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr uint64_t kMaxBodyBytes = 64 * 1024;                 //!< only GET/HEAD are served: bodies are noise
constexpr std::chrono::seconds kLingerTimeout{2};             //!< drain time after our last response
constexpr std::chrono::milliseconds kAcceptRetry{100};        //!< back-off after accept fails (EMFILE)
constexpr std::chrono::seconds kRequestTimeout{10};           //!< a request's rest, once its first byte came
constexpr int kMaxSlowQueued = 8;                             //!< previews waiting for the worker; more: 503
constexpr int kMaxRefusing = 16;                              //!< 503s being sent at once; more: plain close
constexpr std::string_view kBusyResponse =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 21\r\n"
    "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections\n";

class Session;

//! What sessions share; outlives every session (sessions die with `ioc` or `slow_pool`).
struct ServerState {
  ServerState(HttpServerOptions o, StatusSource& source) : opts(std::move(o)), router(source) {}
  const HttpServerOptions opts;
  const Router router;
  std::atomic<int> connections{0};   //!< sessions serving requests (refusals not counted)
  std::atomic<int> refusing{0};      //!< sessions sending a 503 before they close
  std::atomic<int> slow_queued{0};   //!< slow requests queued or running on slow_pool
  std::list<std::weak_ptr<Session>> sessions;   //!< oldest first; the I/O thread's only
  net::io_context ioc{1};
  net::thread_pool slow_pool{1};   //!< previews; declared after ioc so its queued work dies first
};

struct RequestLine {
  std::string method, target;
  unsigned version = 11;
  bool keep_alive = false, head = false;
};

//! One connection: wait for a request, read it, answer it, repeat while keep-alive; every step on
//! the I/O thread except slow routes, whose answer is computed on the slow pool and written back
//! here. Between requests a connection is idle: it may stay so for idle_timeout, and it is the
//! first closed when a new connection needs its place (Impl::accept); once a request's first byte
//! came, the rest must come within kRequestTimeout.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, ServerState& state, bool refusing)
      : state_(state), stream_(std::move(socket)), refusing_(refusing) {
    ++(refusing_ ? state_.refusing : state_.connections);
  }
  ~Session() { --(refusing_ ? state_.refusing : state_.connections); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  //! Waits for the next request: idle until its first byte (bytes a client pipelined are there).
  void read() {
    if (buffer_.size() > 0) return read_request();
    idle_ = true;
    idle_since_ = std::chrono::steady_clock::now();
    stream_.expires_after(state_.opts.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->idle_ = false;
      if (ec) return;   // idle too long, closed by the peer, or evicted
      self->buffer_.commit(n);
      self->read_request();
    });
  }

  //! Over the connection limit: a 503, then a lingering close (closing with the request unread
  //! would reset the connection before the client read the answer).
  void refuse() {
    stream_.expires_after(kLingerTimeout);
    net::async_write(stream_, net::buffer(kBusyResponse.data(), kBusyResponse.size()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (!ec) self->linger_close();
                     });
  }

  //! Whether waiting for a request (not reading, answering or writing one), and since when.
  bool idle() const { return idle_; }
  std::chrono::steady_clock::time_point idle_since() const { return idle_since_; }

  //! Closes an idle connection to make room for a new one; its pending wait ends (aborted).
  void evict() {
    idle_ = false;   // not picked twice
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
  }

 private:
  void read_request() {
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(
        std::min<size_t>(state_.opts.max_header_bytes, std::numeric_limits<uint32_t>::max())));
    parser_->body_limit(kMaxBodyBytes);
    stream_.expires_after(std::min<std::chrono::steady_clock::duration>(state_.opts.idle_timeout, kRequestTimeout));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (ec == http::error::header_limit) return fail(http::status::request_header_fields_too_large, "request header too large\n");
    if (ec == http::error::body_limit) return fail(http::status::payload_too_large, "request body too large\n");
    if (ec == http::error::end_of_stream || ec == http::error::partial_message) return;   // peer closed
    if (ec && ec.category() == http::make_error_code(http::error::bad_target).category())
      return fail(http::status::bad_request, fmt::format("malformed request: {}\n", ec.message()));
    if (ec) return;   // timeout (tcp_stream already closed the socket) or a socket error

    const auto& req = parser_->get();
    RequestLine line{std::string(req.method_string()), std::string(req.target()), req.version(), req.keep_alive(),
                     req.method() == http::verb::head};
    if (!Router::is_slow(line.target)) {
      HttpResponse res = state_.router.handle(line.method, line.target);
      return write(std::move(res), line);
    }
    if (state_.slow_queued.fetch_add(1) >= kMaxSlowQueued) {   // previews pile up: answer at once
      --state_.slow_queued;
      HttpResponse busy{503, "text/plain; charset=utf-8", "busy: too many previews queued\n", {{"Retry-After", "1"}}};
      return write(std::move(busy), line);
    }
    net::post(state_.slow_pool, [self = shared_from_this(), line = std::move(line)]() mutable {
      HttpResponse res = self->state_.router.handle(line.method, line.target);
      --self->state_.slow_queued;
      net::post(self->stream_.get_executor(), [self, line = std::move(line), res = std::move(res)]() mutable {
        self->write(std::move(res), line);
      });
    });
  }

  void write(HttpResponse r, const RequestLine& req) {
    auto res = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(r.status), req.version);
    res->set(http::field::server, fmt::format("framefused/{}", kVersion));
    res->set(http::field::content_type, r.content_type);
    res->set(http::field::cache_control, "no-store");
    for (const auto& [name, value] : r.headers) res->set(name, value);
    res->keep_alive(req.keep_alive);
    const size_t length = r.body.size();
    if (!req.head) res->body() = std::move(r.body);
    res->content_length(length);   // HEAD: the length GET would have sent, no body
    send(std::move(res));
  }

  //! Answers a request that cannot be read to its end, then closes.
  void fail(http::status status, std::string body) {
    HttpResponse r;
    r.status = static_cast<int>(status);
    r.body = std::move(body);
    write(std::move(r), RequestLine{});
  }

  void send(std::shared_ptr<http::response<http::string_body>> res) {
    stream_.expires_after(state_.opts.idle_timeout);
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return;
      if (res->need_eof()) return self->linger_close();
      self->read();
    });
  }

  //! Half-closes and discards what the peer still sends, so that closing with unread input (an
  //! oversized header) does not reset the connection before the peer has read our answer.
  void linger_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTimeout);
    drain();
  }

  void drain() {
    buffer_.consume(buffer_.size());
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) self->drain();
    });
  }

  ServerState& state_;
  beast::tcp_stream stream_;
  const bool refusing_;
  bool idle_ = false;
  std::chrono::steady_clock::time_point idle_since_{};
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

struct HttpServer::Impl : ServerState {
  using ServerState::ServerState;

  void listen() {
    const auto error = [&](const beast::error_code& ec) {
      return std::runtime_error(fmt::format("http: cannot listen on {}:{}: {}", opts.bind, opts.port, ec.message()));
    };
    beast::error_code ec;
    tcp::resolver resolver(ioc);
    const auto results = resolver.resolve(opts.bind, std::to_string(opts.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec) throw error(ec);
    const tcp::endpoint endpoint = results.begin()->endpoint();
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
    if (ec) throw error(ec);
    port = acceptor.local_endpoint().port();
  }

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (ec) {
        spdlog::warn("http: accept failed: {}", ec.message());
        accept_retry.expires_after(kAcceptRetry);
        accept_retry.async_wait([this](beast::error_code e) {
          if (!e) accept();
        });
        return;
      }
      try {
        serve(std::move(socket));
      } catch (const std::exception& e) {   // out of memory, say: this connection is lost, not the acceptor
        spdlog::warn("http: cannot serve a connection: {}", e.what());
      }
      accept();
    });
  }

  //! A new connection: served when under the limit or when an idle connection makes room for it
  //! (the one idle longest is closed), else answered 503 (or, past kMaxRefusing of those, closed).
  void serve(tcp::socket socket) {
    if (connections.load() >= opts.max_connections && !evict_idle()) {
      if (refusing.load() >= kMaxRefusing) {
        beast::error_code ignored;
        socket.close(ignored);
        return;
      }
      spdlog::debug("http: refusing a connection, {} already open", connections.load());
      std::make_shared<Session>(std::move(socket), *this, true)->refuse();
      return;
    }
    auto session = std::make_shared<Session>(std::move(socket), *this, false);
    sessions.push_back(session);
    session->read();
  }

  //! Closes the connection idle longest, if any; forgets sessions that are gone.
  bool evict_idle() {
    std::shared_ptr<Session> oldest;
    for (auto it = sessions.begin(); it != sessions.end();) {
      std::shared_ptr<Session> s = it->lock();
      if (!s) {
        it = sessions.erase(it);
        continue;
      }
      if (s->idle() && (!oldest || s->idle_since() < oldest->idle_since())) oldest = s;
      ++it;
    }
    if (!oldest) return false;
    oldest->evict();
    return true;
  }

  void run() {
    while (true) {
      try {
        ioc.run();
        return;
      } catch (const std::exception& e) {   // handlers do not throw; this is the last line of defence
        spdlog::error("http: {}", e.what());
      }
    }
  }

  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  uint16_t port = 0;
  std::thread io_thread;
};

HttpServer::HttpServer(HttpServerOptions opts, StatusSource& source) {
  if (opts.max_connections < 1 || opts.max_header_bytes < 64 || opts.idle_timeout.count() <= 0)
    throw std::invalid_argument(fmt::format(
        "http: max_connections ({}) must be >= 1, max_header_bytes ({}) >= 64, idle_timeout ({} ms) > 0",
        opts.max_connections, opts.max_header_bytes, opts.idle_timeout.count()));
  impl_ = std::make_unique<Impl>(std::move(opts), source);
  impl_->listen();
  impl_->accept();
  impl_->io_thread = std::thread([impl = impl_.get()] { impl->run(); });
  spdlog::debug("http: listening on {}:{}", impl_->opts.bind, impl_->port);
}

HttpServer::~HttpServer() {
  impl_->slow_pool.stop();
  impl_->slow_pool.join();
  impl_->ioc.stop();
  impl_->io_thread.join();
}

uint16_t HttpServer::port() const { return impl_->port; }

}  // namespace framefuse::daemon
