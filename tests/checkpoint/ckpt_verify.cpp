// Inspects a checkpoint.dir for the checkpoint tests (tests/checkpoint/checkpoint_tests.py):
//
//   ckpt_verify <root>
//
// One line per entry of <root>:
//   complete <step> ok <files> <bytes>      step-<N>/ whose manifest and every file verify (checksums)
//   complete <step> BAD <reason>            step-<N>/ that a reader would refuse
//   staging <name> <files...>               .step-<N>.tmp-<attempt>/ (incomplete; readers ignore it)
//   other <name>
// Exit status 0 when every complete checkpoint verifies, 1 otherwise, 2 on usage errors.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "flashrec/ft/checkpoint.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: ckpt_verify <checkpoint dir>\n");
        return 2;
    }
    const fs::path root = argv[1];
    std::vector<fs::path> entries;
    std::error_code error;
    for (const auto& e : fs::directory_iterator(root, error)) entries.push_back(e.path());
    if (error) {
        std::printf("no directory %s: %s\n", root.c_str(), error.message().c_str());
        return 0;
    }
    std::sort(entries.begin(), entries.end());
    std::vector<std::int64_t> complete;
    for (const auto& s : flashrec::ft::CheckpointReader::list_complete(root)) complete.push_back(s.step);
    int bad = 0;
    for (const fs::path& path : entries) {
        const std::string name = path.filename().string();
        if (name.rfind("step-", 0) == 0) {
            try {
                const auto reader = flashrec::ft::CheckpointReader::open(path);
                reader.verify({}, flashrec::ft::Verification::checksums);
                std::uint64_t bytes = 0;
                for (const auto& f : reader.manifest().files) bytes += f.file_bytes;
                std::printf("complete %lld ok %zu %llu\n", static_cast<long long>(reader.manifest().info.step),
                            reader.manifest().files.size(), static_cast<unsigned long long>(bytes));
            } catch (const std::exception& e) {
                ++bad;
                std::printf("complete %s BAD %s\n", name.c_str() + 5, e.what());
            }
        } else if (name.rfind(".step-", 0) == 0) {
            std::string files;
            std::vector<std::string> names;
            for (const auto& f : fs::directory_iterator(path, error)) names.push_back(f.path().filename().string());
            std::sort(names.begin(), names.end());
            for (const auto& n : names) files += " " + n;
            std::printf("staging %s%s\n", name.c_str(), files.c_str());
        } else {
            std::printf("other %s\n", name.c_str());
        }
    }
    return bad == 0 ? 0 : 1;
}
