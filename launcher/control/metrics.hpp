// The optional Prometheus endpoint of flashrec-launch (detection.metrics): GET /metrics answers
// the text exposition format (version 0.0.4). Off by default; binds to loopback unless told
// otherwise. Its own thread; a request that does not finish within 2 s is dropped, requests are
// capped at 8 KiB, at most 16 connections are served at once.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace flashrec::launcher {

class MetricsServer {
public:
    // `render` builds the body on the server's thread: it must be thread-safe.
    // Throws flashrec::Error if it cannot listen.
    MetricsServer(const std::string& bind_address, std::uint16_t port, std::function<std::string()> render);
    ~MetricsServer();
    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;

    std::string endpoint() const;  // "address:port"

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace flashrec::launcher
