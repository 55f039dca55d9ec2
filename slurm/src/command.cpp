#include "flashrec/slurm/command.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace flashrec::slurm {
namespace {

using Clock = std::chrono::steady_clock;

class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }
    int get() const { return fd_; }
    void reset() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_ = -1;
};

struct Pipe {
    Fd read, write;
};

Pipe make_pipe(const std::string& what) {
    int fds[2];
    // CLOEXEC: the child's dup2 copies survive exec, these originals must not leak into it.
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw SlurmError("cannot run " + what + ": pipe2: " + std::strerror(errno));
    return Pipe{Fd(fds[0]), Fd(fds[1])};
}

// Only async-signal-safe calls between fork and exec: the launcher is multi-threaded.
[[noreturn]] void exec_child(char* const* args, int out_fd, int err_fd, int report_fd) {
    ::setpgid(0, 0);  // its own group: a timeout kills everything it started
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);  // flashrec ignores SIGPIPE; an ignored signal survives exec
    int in_fd = ::open("/dev/null", O_RDONLY);
    if (in_fd >= 0) ::dup2(in_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execvp(args[0], args);
    int e = errno;
    [[maybe_unused]] auto n = ::write(report_fd, &e, sizeof e);
    ::_exit(127);
}

int decode_status(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return -1;
}

}  // namespace

std::string printable(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) {
        if (!s.empty()) s += ' ';
        bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`;&|<>()*?[]{}") == std::string::npos;
        if (plain) {
            s += a;
            continue;
        }
        s += '\'';
        for (char c : a) {
            if (c == '\'')
                s += "'\\''";
            else
                s += c;
        }
        s += '\'';
    }
    return s;
}

CommandResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
    if (argv.empty() || argv[0].empty()) throw SlurmError("run_command: empty command line");
    const std::string what = printable(argv);
    // Everything the child needs is prepared before fork: it must not allocate.
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);

    Pipe out = make_pipe(what), err = make_pipe(what), report = make_pipe(what);
    const auto deadline = Clock::now() + timeout;
    pid_t pid = ::fork();
    if (pid < 0) throw SlurmError("cannot run " + what + ": fork: " + std::strerror(errno));
    if (pid == 0) exec_child(args.data(), out.write.get(), err.write.get(), report.write.get());
    ::setpgid(pid, pid);  // also here: whichever side runs first, the group exists for killpg
    out.write.reset();
    err.write.reset();
    report.write.reset();

    // The report pipe closes on a successful exec (CLOEXEC) or carries execvp's errno.
    int exec_errno = 0;
    ssize_t got;
    do {
        got = ::read(report.read.get(), &exec_errno, sizeof exec_errno);
    } while (got < 0 && errno == EINTR);
    if (got == static_cast<ssize_t>(sizeof exec_errno)) {
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        throw SlurmError("cannot run " + what + ": " + argv[0] + ": " + std::strerror(exec_errno) +
                         (exec_errno == ENOENT ? " (is Slurm's client installed and in PATH?)" : ""));
    }

    CommandResult result;
    bool timed_out = false;
    pollfd fds[2] = {{out.read.get(), POLLIN, 0}, {err.read.get(), POLLIN, 0}};
    std::string* sinks[2] = {&result.out, &result.err};
    int open_fds = 2;
    char buf[4096];
    while (open_fds > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (n < 0) {
            if (errno == EINTR) continue;
            ::killpg(pid, SIGKILL);
            throw SlurmError("running " + what + ": poll: " + std::strerror(errno));
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd < 0 || fds[i].revents == 0) continue;
            ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
            if (r > 0) {
                sinks[i]->append(buf, static_cast<std::size_t>(r));
            } else if (r == 0 || errno != EINTR) {
                fds[i].fd = -1;  // EOF (or a broken pipe): this stream is done
                --open_fds;
            }
        }
    }
    // Both streams closed: the child is exiting. A grandchild may still hold them open, or
    // the child may linger; the deadline bounds both.
    int status = 0;
    while (!timed_out) {
        pid_t w = ::waitpid(pid, &status, WNOHANG);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) {
            throw SlurmError("running " + what + ": waitpid: " + std::strerror(errno));
        }
        if (Clock::now() >= deadline) {
            timed_out = true;
            break;
        }
        ::usleep(2000);
    }
    if (timed_out) {
        ::killpg(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        throw CommandTimedOut(what + " did not finish within " + std::to_string(timeout.count()) +
                         " ms (killed); is slurmctld reachable?" +
                         (result.err.empty() ? "" : " stderr: " + result.err));
    }
    result.exit_code = decode_status(status);
    return result;
}

void require_slurm_config() {
    struct stat st {};
    if (const char* env = std::getenv("SLURM_CONF"); env && *env) {
        if (::stat(env, &st) != 0)
            throw SlurmError(std::string("SLURM_CONF=") + env + " does not exist (" +
                             std::strerror(errno) + ")");
        return;
    }
    for (const char* path : {"/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf"}) {
        if (::stat(path, &st) == 0) return;
    }
    throw SlurmError(
        "no Slurm configuration: SLURM_CONF is not set and neither /etc/slurm/slurm.conf nor "
        "/run/slurm/conf/slurm.conf exists. Refusing to run a Slurm client, which would look the "
        "controller up with a DNS SRV query; export SLURM_CONF=<path to slurm.conf>");
}

}  // namespace flashrec::slurm
