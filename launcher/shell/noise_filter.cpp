#include "noise_filter.hpp"

#include <regex>
#include <string>
#include <vector>

namespace flashrec::launcher {

bool is_known_noise(std::string_view line) {
    static const std::vector<std::regex> compiled = [] {
        std::vector<std::regex> out;
        for (const auto& p : kKnownNoise) out.emplace_back(std::string(p.regex));
        return out;
    }();
    if (line.find("[warn]") == std::string_view::npos) return false;  // every pattern has it
    const std::string text(line);
    for (const auto& rx : compiled)
        if (std::regex_search(text, rx)) return true;
    return false;
}

}  // namespace flashrec::launcher
