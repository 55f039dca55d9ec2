#include "metrics.hpp"

#include <utility>  // before Boost 1.74 Asio under C++20 (it uses std::exchange)

#include <boost/asio.hpp>

#include <atomic>
#include <thread>

#include "flashrec/errors.hpp"

namespace flashrec::launcher {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr std::size_t kMaxRequestBytes = 8 * 1024;
constexpr int kMaxConnections = 16;
constexpr auto kRequestTimeout = std::chrono::seconds(2);

std::string format_endpoint(const tcp::endpoint& e) {
    const std::string host = e.address().is_v6() ? "[" + e.address().to_string() + "]" : e.address().to_string();
    return host + ":" + std::to_string(e.port());
}

}  // namespace

struct MetricsServer::Impl {
    std::atomic<int> connections{0};  // first: connections still queued in `io` count down on its destruction
    std::function<std::string()> render;
    asio::io_context io;
    tcp::acceptor acceptor{io};
    tcp::endpoint bound;
    std::thread thread;

    struct Connection : std::enable_shared_from_this<Connection> {
        Connection(Impl& owner, tcp::socket s) : impl(owner), socket(std::move(s)), timer(owner.io) {}
        ~Connection() { --impl.connections; }
        Impl& impl;
        tcp::socket socket;
        asio::steady_timer timer;
        asio::streambuf request{kMaxRequestBytes};
        std::string response;

        void start() {
            auto self = shared_from_this();
            timer.expires_after(kRequestTimeout);
            timer.async_wait([self](const error_code& ec) {
                if (!ec) {
                    error_code ignored;
                    self->socket.close(ignored);
                }
            });
            asio::async_read_until(socket, request, "\r\n\r\n", [self](const error_code& ec, std::size_t) {
                if (ec) return self->finish();
                self->answer();
            });
        }

        void answer() {
            std::istream in(&request);
            std::string method, target;
            in >> method >> target;
            std::string body, status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8";
            if (method != "GET" && method != "HEAD") {
                status = "405 Method Not Allowed";
                body = "only GET\n";
                type = "text/plain";
            } else if (target == "/metrics" || target.rfind("/metrics?", 0) == 0) {
                try {
                    body = impl.render();
                } catch (const std::exception& e) {
                    status = "500 Internal Server Error";
                    body = std::string("error: ") + e.what() + "\n";
                }
            } else {
                status = "404 Not Found";
                body = "flashrec-launch serves /metrics\n";
                type = "text/plain";
            }
            response = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
            if (method != "HEAD") response += body;
            auto self = shared_from_this();
            asio::async_write(socket, asio::buffer(response), [self](const error_code&, std::size_t) { self->finish(); });
        }

        void finish() {
            timer.cancel();
            error_code ignored;
            socket.shutdown(tcp::socket::shutdown_both, ignored);
            socket.close(ignored);
        }
    };

    void accept() {
        acceptor.async_accept([this](const error_code& ec, tcp::socket socket) {
            if (ec == asio::error::operation_aborted) return;
            if (!ec) {
                if (connections.load() >= kMaxConnections) {
                    error_code ignored;
                    socket.close(ignored);
                } else {
                    ++connections;
                    std::make_shared<Connection>(*this, std::move(socket))->start();
                }
            }
            accept();
        });
    }
};

MetricsServer::MetricsServer(const std::string& bind_address, std::uint16_t port, std::function<std::string()> render)
    : impl_(std::make_unique<Impl>()) {
    impl_->render = std::move(render);
    error_code ec;
    const auto address = asio::ip::make_address(bind_address, ec);
    if (ec) throw Error("metrics: '" + bind_address + "' is not a numeric IP address");
    const tcp::endpoint wanted(address, port);
    auto& acceptor = impl_->acceptor;
    acceptor.open(wanted.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(wanted, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) impl_->bound = acceptor.local_endpoint(ec);
    if (ec) throw Error("metrics: cannot listen on " + format_endpoint(wanted) + ": " + ec.message());
    impl_->accept();
    impl_->thread = std::thread([this] {
        for (;;) {
            try {
                impl_->io.run();
                return;
            } catch (...) {  // a handler must never take the launcher down: keep serving
            }
        }
    });
}

MetricsServer::~MetricsServer() {
    impl_->io.stop();
    if (impl_->thread.joinable()) impl_->thread.join();
}

std::string MetricsServer::endpoint() const { return format_endpoint(impl_->bound); }

}  // namespace flashrec::launcher
