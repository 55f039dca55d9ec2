#include "rank_output.hpp"

#include <regex>

namespace flashrec::launcher {

void LineSplitter::feed(std::string_view bytes, const Sink& sink) {
    buffer_.append(bytes);
    std::size_t start = 0;
    for (std::size_t nl; (nl = buffer_.find('\n', start)) != std::string::npos; start = nl + 1)
        sink(buffer_.substr(start, nl + 1 - start));
    buffer_.erase(0, start);
    if (buffer_.size() > max_line_) {
        sink(buffer_);
        buffer_.clear();
    }
}

void LineSplitter::finish(const Sink& sink) {
    if (!buffer_.empty()) sink(buffer_ + "\n");
    buffer_.clear();
}

std::optional<std::string> prrte_lost_daemon_node(const std::string& line) {
    // docs/ulfm-traps.md, "PRRTE and Slurm": PRRTE's "lost communication with a remote daemon" block.
    static const std::regex lost_daemon_rx(R"(Remote daemon: *\S+ on node (\S+))");
    std::smatch m;
    if (line.find("Remote daemon:") == std::string::npos || !std::regex_search(line, m, lost_daemon_rx))
        return std::nullopt;
    return m[1].str();
}

}  // namespace flashrec::launcher
