#include "processes.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <set>
#include <thread>
#include <unordered_map>

#include "flashrec/errors.hpp"

namespace flashrec::launcher {

namespace {

std::vector<pid_t> all_pids() {
    std::vector<pid_t> pids;
    DIR* dir = ::opendir("/proc");
    if (!dir) return pids;
    while (const dirent* entry = ::readdir(dir)) {
        const char* name = entry->d_name;
        if (*name < '1' || *name > '9') continue;
        char* end = nullptr;
        const long value = std::strtol(name, &end, 10);
        if (*end == '\0' && value > 0) pids.push_back(static_cast<pid_t>(value));
    }
    ::closedir(dir);
    return pids;
}

bool have_children_files() {
    static const bool yes =
        ::access(("/proc/self/task/" + std::to_string(::getpid()) + "/children").c_str(), R_OK) == 0;
    return yes;
}

// Children of `pid` from /proc/<pid>/task/<tid>/children (kernels with CONFIG_PROC_CHILDREN);
// empty when `pid` is gone.
std::vector<pid_t> children_from_files(pid_t pid) {
    const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
    std::vector<pid_t> out;
    DIR* dir = ::opendir(task_dir.c_str());
    if (!dir) return out;
    while (const dirent* entry = ::readdir(dir)) {
        if (entry->d_name[0] < '1' || entry->d_name[0] > '9') continue;
        const auto text = read_proc_file(task_dir + "/" + entry->d_name + "/children");
        if (!text) continue;
        const char* p = text->c_str();
        char* end = nullptr;
        for (long v = std::strtol(p, &end, 10); end != p; v = std::strtol(p, &end, 10)) {
            if (v > 0) out.push_back(static_cast<pid_t>(v));
            p = end;
        }
    }
    ::closedir(dir);
    return out;
}

}  // namespace

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0; }

std::optional<std::string> read_fd(int fd, std::size_t max_bytes) {
    std::string text;
    char buffer[4096];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::nullopt;  // ESRCH: the process exited while we read
        if (n == 0) return text;
        text.append(buffer, static_cast<std::size_t>(n));
        if (text.size() >= max_bytes) return text;
    }
}

std::optional<std::string> read_proc_file(const std::string& path, std::size_t max_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    auto text = read_fd(fd, max_bytes);
    ::close(fd);
    return text;
}

bool process_alive(pid_t pid) {
    pid_t ppid = 0;
    char state = 0;
    return pid > 0 && read_stat(pid, ppid, state) && state != 'Z' && state != 'X';
}

void remove_session_dir(pid_t mpirun) {
    const char* tmp = std::getenv("TMPDIR");
    std::error_code ignored;
    std::filesystem::remove_all(std::filesystem::path(tmp && *tmp ? tmp : "/tmp") / ("ompi." + std::to_string(mpirun)),
                                ignored);
}

bool read_stat(pid_t pid, pid_t& ppid, char& state) {
    const auto read = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
    if (!read) return false;
    const std::string& text = *read;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    const auto close = text.rfind(')');
    if (close == std::string::npos || close + 4 >= text.size()) return false;
    state = text[close + 2];
    ppid = static_cast<pid_t>(std::strtol(text.c_str() + close + 4, nullptr, 10));
    return true;
}

std::vector<pid_t> descendants_of(pid_t root) {
    std::vector<pid_t> out;
    if (have_children_files()) {
        // Walk down from `root` through the children files: no other process is looked at.
        std::vector<pid_t> todo = children_from_files(root);
        std::set<pid_t> seen{root};
        while (!todo.empty()) {
            const pid_t p = todo.back();
            todo.pop_back();
            if (!seen.insert(p).second) continue;
            out.push_back(p);
            const auto more = children_from_files(p);
            todo.insert(todo.end(), more.begin(), more.end());
        }
        return out;
    }
    // Without children files the only way to find the tree is every process's parent pid
    // (/proc/<pid>/stat only; a process that exits meanwhile is skipped).
    std::unordered_multimap<pid_t, pid_t> children;
    for (pid_t pid : all_pids()) {
        pid_t ppid = 0;
        char state = 0;
        if (read_stat(pid, ppid, state)) children.emplace(ppid, pid);
    }
    std::vector<pid_t> todo{root};
    std::set<pid_t> seen{root};
    while (!todo.empty()) {
        const pid_t p = todo.back();
        todo.pop_back();
        const auto [first, last] = children.equal_range(p);
        for (auto it = first; it != last; ++it)
            if (seen.insert(it->second).second) {
                out.push_back(it->second);
                todo.push_back(it->second);
            }
    }
    return out;
}

bool is_descendant(pid_t pid, pid_t ancestor) {
    for (int depth = 0; depth < 64 && pid > 1; ++depth) {
        pid_t ppid = 0;
        char state = 0;
        if (!read_stat(pid, ppid, state)) return false;
        if (ppid == ancestor) return true;
        pid = ppid;
    }
    return false;
}

std::vector<pid_t> processes_with_env(std::string_view key, std::string_view value) {
    std::string wanted(key);
    wanted += '=';
    wanted += value;
    std::vector<pid_t> out;
    const pid_t self = ::getpid();
    for (pid_t pid : all_pids()) {
        if (pid == self) continue;
        const auto environ = read_proc_file("/proc/" + std::to_string(pid) + "/environ");
        if (!environ) continue;  // not ours to read, or gone
        for (std::size_t pos = 0; pos < environ->size();) {
            std::size_t end = environ->find('\0', pos);
            if (end == std::string::npos) end = environ->size();
            if (std::string_view(*environ).substr(pos, end - pos) == wanted) {
                out.push_back(pid);
                break;
            }
            pos = end + 1;
        }
    }
    return out;
}

void reap_children(const std::function<void(pid_t, int)>& reaped) {
    for (;;) {
        int status = 0;
        const pid_t pid = ::waitpid(-1, &status, WNOHANG);
        if (pid <= 0) return;
        if (reaped) reaped(pid, status);
    }
}

Teardown kill_everything(pid_t pgid, std::string_view tag_key, std::string_view tag_value,
                         std::chrono::milliseconds limit, const std::function<void(pid_t, int)>& reaped) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    Teardown result;
    std::set<pid_t> signalled;
    if (pgid > 0 && ::kill(-pgid, SIGKILL) == 0) ++result.signalled;
    const pid_t self = ::getpid();
    for (int round = 0;; ++round) {
        reap_children(reaped);
        std::set<pid_t> candidates;
        for (pid_t p : descendants_of(self)) candidates.insert(p);
        auto live_of = [](const std::set<pid_t>& pids) {
            std::vector<pid_t> out;
            for (pid_t p : pids) {
                pid_t ppid = 0;
                char state = 0;
                if (read_stat(p, ppid, state) && state != 'Z' && state != 'X') out.push_back(p);
            }
            return out;
        };
        std::vector<pid_t> live = live_of(candidates);
        // The environment scan reads every process's environ: only every 10th round, and
        // whenever the descendants are all gone (the last word before declaring success).
        if (!tag_value.empty() && (round % 10 == 0 || live.empty())) {
            for (pid_t p : processes_with_env(tag_key, tag_value)) candidates.insert(p);
            live = live_of(candidates);
        }
        if (live.empty()) {
            reap_children(reaped);
            result.complete = true;
            break;
        }
        for (pid_t p : live) {
            if (::kill(p, SIGKILL) == 0 && signalled.insert(p).second) ++result.signalled;
        }
        if (Clock::now() - start > limit) {
            result.left = live;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    result.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    return result;
}

}  // namespace flashrec::launcher
