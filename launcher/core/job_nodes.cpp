#include "job_nodes.hpp"

namespace flashrec::launcher {

std::string NodeBook::node_of_host(const std::string& host) const {
    for (const auto& node : nodes_)
        if (short_name(node) == short_name(host)) return node;
    return "";
}

std::string NodeBook::node_of_rank(const Layout& layout, const std::string& hostname, const std::string& role) const {
    if (layout.slurm)
        if (const std::string node = node_of_host(hostname); !node.empty()) return node;
    return layout.node_of_role(role);
}

std::set<std::string> NodeBook::given_up_in(const Layout& layout) const {
    std::set<std::string> gone;
    for (const auto& p : layout.processes)
        if (given_up(p.node)) gone.insert(p.node);
    for (const auto& n : layout.reserve_nodes)
        if (given_up(n)) gone.insert(n);
    return gone;
}

}  // namespace flashrec::launcher
