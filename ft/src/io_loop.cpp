#include "flashrec/ft/io_loop.hpp"

#include <boost/asio/ip/tcp.hpp>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

// A numeric address, or the first address a name resolves to.
boost::asio::ip::address resolve_address(boost::asio::io_context& io, const std::string& host) {
    boost::system::error_code ec;
    auto address = boost::asio::ip::make_address(host, ec);
    if (!ec) return address;
    boost::asio::ip::tcp::resolver resolver(io);
    const auto results = resolver.resolve(host, "", ec);
    if (ec || results.empty())
        throw Error("control plane: cannot resolve '" + host + "': " + (ec ? ec.message() : "no address"));
    return results.begin()->endpoint().address();
}

// Runs io.run() until it returns normally: a handler's exception is reported, never fatal.
void run_io_loop(boost::asio::io_context& io, const std::function<void(std::string_view)>& report) {
    for (;;) {
        try {
            io.run();
            return;
        } catch (const std::exception& e) {
            report(e.what());
        } catch (...) {
            report("unknown exception");
        }
    }
}

}  // namespace flashrec::ft
