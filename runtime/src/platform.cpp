#include "flashrec/runtime/platform.hpp"

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "flashrec/errors.hpp"
#include "flashrec/flashrec.hpp"
#include "flashrec/ft/checksum.hpp"

namespace flashrec::runtime::platform {

namespace {

struct Field {
    std::string_view name;
    std::string Fingerprint::*member;
};
constexpr Field kFields[] = {{"cpu_model", &Fingerprint::cpu_model},
                             {"cpu_flags", &Fingerprint::cpu_flags},
                             {"gpu_model", &Fingerprint::gpu_model},
                             {"flashrec_build", &Fingerprint::flashrec_build},
                             {"trainer_build", &Fingerprint::trainer_build}};

std::string trim(std::string_view s) {
    const auto first = s.find_first_not_of(" \t");
    if (first == std::string_view::npos) return {};
    const auto last = s.find_last_not_of(" \t\r");
    return std::string(s.substr(first, last - first + 1));
}

// One line per field: newlines in a value (none expected) would split it.
std::string clean(std::string value) {
    std::replace(value.begin(), value.end(), '\n', ' ');
    std::replace(value.begin(), value.end(), '\0', ' ');
    return value;
}

// --- GNU build ids of the loaded objects, from their PT_NOTE segments in memory ---

struct BuildIdQuery {
    const void* address = nullptr;  // the object that contains it; nullptr: the executable
    bool first = true;
    std::string id;
};

std::string note_build_id(const dl_phdr_info* info) {
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_NOTE) continue;
        const auto* p = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
        const auto* end = p + ph.p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            ElfW(Nhdr) note;
            std::memcpy(&note, p, sizeof note);
            const auto* name = p + sizeof note;
            const auto* desc = name + ((note.n_namesz + 3) & ~3u);
            if (desc + note.n_descsz > end) break;
            if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
                static constexpr char kHex[] = "0123456789abcdef";
                std::string hex;
                for (unsigned k = 0; k < note.n_descsz; ++k) {
                    hex += kHex[desc[k] >> 4];
                    hex += kHex[desc[k] & 15];
                }
                return hex;
            }
            p = desc + ((note.n_descsz + 3) & ~3u);
        }
    }
    return {};
}

int on_object(dl_phdr_info* info, std::size_t, void* data) {
    auto& q = *static_cast<BuildIdQuery*>(data);
    const bool first = q.first;
    q.first = false;
    if (!q.address) {  // the executable is the first object listed
        if (!first) return 0;
        q.id = note_build_id(info);
        return 1;
    }
    const auto a = reinterpret_cast<ElfW(Addr)>(q.address);
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        const ElfW(Addr) start = info->dlpi_addr + ph.p_vaddr;
        if (ph.p_type == PT_LOAD && a >= start && a < start + ph.p_memsz) {
            q.id = note_build_id(info);
            return 1;
        }
    }
    return 0;
}

std::string build_id(const void* address) {
    BuildIdQuery q;
    q.address = address;
    dl_iterate_phdr(&on_object, &q);
    return q.id;
}

std::string file_hash(const char* path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return "unknown";
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return "xxh3:" + ft::checksum_hex(ft::checksum(bytes.data(), bytes.size()));
}

}  // namespace

void encode(const Fingerprint& f, std::span<std::byte> out) {
    std::fill(out.begin(), out.end(), std::byte{0});
    std::string text;
    for (const auto& field : kFields) text += std::string(field.name) + "=" + clean(f.*field.member) + "\n";
    // Cut at a line boundary: a value cut short still decodes (as what fits).
    if (text.size() > out.size()) {
        text.resize(out.size());
        text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    }
    std::memcpy(out.data(), text.data(), text.size());
}

std::optional<Fingerprint> decode(std::span<const std::byte> in) {
    std::string text(reinterpret_cast<const char*>(in.data()), in.size());
    text.resize(std::min(text.size(), text.find('\0')));
    if (text.empty()) return std::nullopt;
    Fingerprint f;
    std::istringstream lines(text);
    std::string line;
    bool any = false;
    while (std::getline(lines, line)) {
        const auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        for (const auto& field : kFields)
            if (std::string_view(line).substr(0, eq) == field.name) {
                f.*field.member = line.substr(eq + 1);
                any = true;
            }
    }
    if (!any) return std::nullopt;
    return f;
}

std::vector<Difference> compare(const Fingerprint& writer, const Fingerprint& here) {
    std::vector<Difference> out;
    for (const auto& field : kFields)
        if (writer.*field.member != here.*field.member)
            out.push_back({std::string(field.name), writer.*field.member, here.*field.member});
    return out;
}

CpuInfo parse_cpuinfo(std::string_view text) {
    CpuInfo info;
    std::size_t pos = 0;
    while (pos < text.size()) {
        auto nl = text.find('\n', pos);
        if (nl == std::string_view::npos) nl = text.size();
        const std::string_view line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.empty() && (!info.model.empty() || !info.flags.empty())) break;  // end of the first processor
        const auto colon = line.find(':');
        if (colon == std::string_view::npos) continue;
        const std::string key = trim(line.substr(0, colon));
        const std::string value = trim(line.substr(colon + 1));
        if (key == "model name" && info.model.empty()) info.model = value;
        else if ((key == "flags" || key == "Features") && info.flags.empty()) info.flags = value;
    }
    return info;
}

std::string flags_hash(std::string_view flags) { return ft::checksum_hex(ft::checksum(flags.data(), flags.size())); }

std::optional<std::string> fake_cpu_flags(const char* value, bool replacement, bool relaunched) {
    if (!value || !*value) return std::nullopt;
    const std::string_view v(value);
    const auto colon = v.find(':');
    const std::string_view scope = v.substr(0, colon);
    if (colon == std::string_view::npos || (scope != "all" && scope != "replacements" && scope != "relaunched"))
        throw Error(std::string(kFakeCpuFlagsEnv) + "='" + value +
                    "': expected <all|replacements|relaunched>:<flags>");
    if ((scope == "replacements" && !replacement) || (scope == "relaunched" && !relaunched)) return std::nullopt;
    return std::string(v.substr(colon + 1));
}

Fingerprint probe(const std::string& gpu_model, bool replacement, bool relaunched) {
    std::ifstream in("/proc/cpuinfo");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CpuInfo cpu = parse_cpuinfo(text);
    if (auto fake = fake_cpu_flags(std::getenv(kFakeCpuFlagsEnv), replacement, relaunched)) cpu.flags = *fake;
    Fingerprint f;
    f.cpu_model = cpu.model.empty() ? "unknown" : cpu.model;
    f.cpu_flags = flags_hash(cpu.flags);
    f.gpu_model = gpu_model.empty() ? "none" : gpu_model;
    static const char anchor = 0;  // any object of this library: its build id is flashrec's
    const std::string own = build_id(&anchor);
    f.flashrec_build = std::string(flashrec::version()) + " " + (own.empty() ? "no-build-id" : own);
    const std::string exe = build_id(nullptr);
    f.trainer_build = exe.empty() ? file_hash("/proc/self/exe") : exe;
    return f;
}

}  // namespace flashrec::runtime::platform
