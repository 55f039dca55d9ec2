#include "flashrec/runtime/spare_health.hpp"

#include <sys/statvfs.h>

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>

#include "flashrec/errors.hpp"

namespace flashrec::runtime::spare_health {

std::optional<std::int64_t> fake_shm_room(const char* value, int hot_spare_index, bool spawned) {
    if (!value || !*value) return std::nullopt;
    const std::string_view v(value);
    const auto colon = v.rfind(':');
    const std::string_view scope = colon == std::string_view::npos ? std::string_view() : v.substr(0, colon);
    const std::string_view number = colon == std::string_view::npos ? v : v.substr(colon + 1);
    std::int64_t bytes = -1;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), bytes);
    int index = -1;
    bool scope_ok = scope == "all" || scope == "spawned";
    if (scope.starts_with("spare:")) {
        const std::string_view i = scope.substr(6);
        const auto [iend, iec] = std::from_chars(i.data(), i.data() + i.size(), index);
        scope_ok = iec == std::errc() && iend == i.data() + i.size() && index >= 0;
    }
    if (!scope_ok || ec != std::errc() || end != number.data() + number.size() || bytes < 0)
        throw Error(std::string(kFakeShmEnv) + "='" + value + "': expected <all|spawned|spare:<i>>:<bytes>");
    if (scope == "spawned" && !spawned) return std::nullopt;
    if (index >= 0 && (spawned || index != hot_spare_index)) return std::nullopt;
    return bytes;
}

std::int64_t shm_room(std::size_t reserved, int hot_spare_index, bool spawned) {
    if (auto fake = fake_shm_room(std::getenv(kFakeShmEnv), hot_spare_index, spawned)) return *fake;
    struct statvfs fs {};
    if (::statvfs("/dev/shm", &fs) != 0) return -1;  // not checked: admitted on the other checks
    return static_cast<std::int64_t>(fs.f_bavail) * static_cast<std::int64_t>(fs.f_frsize) +
           static_cast<std::int64_t>(reserved);
}

}  // namespace flashrec::runtime::spare_health
