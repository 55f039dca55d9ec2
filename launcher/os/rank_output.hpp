// The ranks' output as the launcher sees it: bytes from mpirun's pipes cut into lines, and the
// one foreign text it reads (PRRTE's report of a lost daemon). flashrec's own lines are for
// people and are only forwarded: what the launcher acts on comes as typed records
// (ft/records.hpp). Pure code over strings.
#pragma once
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace flashrec::launcher {

// Cuts a stream into lines, each passed on with its '\n'. A line that grows past `max_line`
// without a newline (a runaway writer) is passed on as it is.
class LineSplitter {
public:
    using Sink = std::function<void(const std::string& line)>;
    LineSplitter() = default;
    explicit LineSplitter(std::size_t max_line) : max_line_(max_line) {}
    void feed(std::string_view bytes, const Sink& sink);
    // The stream ended: what is left, as a line of its own (a '\n' added).
    void finish(const Sink& sink);

private:
    std::size_t max_line_ = std::size_t{1} << 20;
    std::string buffer_;
};

// PRRTE names the node whose daemon it lost ("Remote daemon: … on node N"), then ends the whole
// job: the node's name, or nullopt for any other line.
std::optional<std::string> prrte_lost_daemon_node(const std::string& line);

}  // namespace flashrec::launcher
