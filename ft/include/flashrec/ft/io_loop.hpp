// Boost.Asio helpers the control plane's two sides share (the rank's HeartbeatClient here, the
// launcher's Controller in launcher/).
#pragma once
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>

#include <functional>
#include <string>
#include <string_view>

namespace flashrec::ft {

// A numeric address, or the first address a name resolves to; throws flashrec::Error.
boost::asio::ip::address resolve_address(boost::asio::io_context& io, const std::string& host);
// Runs io.run() until it returns normally: a handler's exception is reported, never fatal.
void run_io_loop(boost::asio::io_context& io, const std::function<void(std::string_view)>& report);

}  // namespace flashrec::ft
