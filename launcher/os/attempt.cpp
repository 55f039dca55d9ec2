#include "attempt.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "flashrec/errors.hpp"

namespace flashrec::launcher {

namespace {

class Spawn {
public:
    Spawn() {
        if (posix_spawn_file_actions_init(&actions_) != 0) throw Error("posix_spawn_file_actions_init failed");
        if (posix_spawnattr_init(&attr_) != 0) {
            posix_spawn_file_actions_destroy(&actions_);
            throw Error("posix_spawnattr_init failed");
        }
    }
    ~Spawn() {
        posix_spawnattr_destroy(&attr_);
        posix_spawn_file_actions_destroy(&actions_);
    }
    Spawn(const Spawn&) = delete;
    Spawn& operator=(const Spawn&) = delete;
    posix_spawn_file_actions_t actions_;
    posix_spawnattr_t attr_;
};

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
    if (this != &other) {
        reset();
        fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
}

void Fd::reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

Child::~Child() { end(); }

Child::Child(Child&& other) noexcept
    : out(std::move(other.out)),
      err(std::move(other.err)),
      pid_(std::exchange(other.pid_, -1)),
      reaped_(std::exchange(other.reaped_, false)) {}

Child& Child::operator=(Child&& other) noexcept {
    if (this != &other) {
        end();
        out = std::move(other.out);
        err = std::move(other.err);
        pid_ = std::exchange(other.pid_, -1);
        reaped_ = std::exchange(other.reaped_, false);
    }
    return *this;
}

void Child::end() {
    out.reset();
    err.reset();
    if (pid_ <= 0 || reaped_) return;
    ::kill(-pid_, SIGKILL);
    for (int i = 0; i < 100; ++i) {
        if (::waitpid(pid_, nullptr, WNOHANG) != 0) break;  // reaped, or not ours to reap
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
}

Child spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    if (argv.empty()) throw Error("spawn: empty command");
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0) throw Error(std::string("spawn: pipe: ") + std::strerror(errno));
    Fd out_read(out[0]), out_write(out[1]);
    if (::pipe2(err, O_CLOEXEC) != 0) throw Error(std::string("spawn: pipe: ") + std::strerror(errno));
    Fd err_read(err[0]), err_write(err[1]);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    Spawn s;
    posix_spawn_file_actions_addopen(&s.actions_, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&s.actions_, out_write.get(), STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&s.actions_, err_write.get(), STDERR_FILENO);
    sigset_t empty, defaults;
    sigemptyset(&empty);
    sigemptyset(&defaults);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2})
        sigaddset(&defaults, sig);
    posix_spawnattr_setflags(&s.attr_, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&s.attr_, 0);
    posix_spawnattr_setsigmask(&s.attr_, &empty);
    posix_spawnattr_setsigdefault(&s.attr_, &defaults);

    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, args[0], &s.actions_, &s.attr_, args.data(), envp.data());
    if (rc != 0) throw Error("cannot start " + argv[0] + ": " + std::strerror(rc));
    for (int fd : {out_read.get(), err_read.get()}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    return Child(pid, std::move(out_read), std::move(err_read));
}

void Attempt::reaped(int wait_status) {
    exited = true;
    status = wait_status;
    child.reaped();
}

void Attempt::read_output(bool is_err, const LineSink& sink) {
    Fd& fd = is_err ? child.err : child.out;
    LineSplitter& lines = is_err ? err_lines : out_lines;
    if (!fd.open()) return;
    const auto line_sink = [&](const std::string& line) { sink(line, is_err); };
    char chunk[65536];
    for (int reads = 0; reads < 16; ++reads) {
        const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
        if (n > 0) {
            lines.feed(std::string_view(chunk, static_cast<std::size_t>(n)), line_sink);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        lines.finish(line_sink);
        fd.reset();
        return;
    }
}

void Attempt::drain_output(std::chrono::milliseconds limit, const LineSink& sink) {
    const auto until = Clock::now() + limit;
    while ((child.out.open() || child.err.open()) && Clock::now() < until) {
        pollfd fds[2];
        nfds_t n = 0;
        if (child.out.open()) fds[n++] = {child.out.get(), POLLIN, 0};
        if (child.err.open()) fds[n++] = {child.err.get(), POLLIN, 0};
        ::poll(fds, n, 50);
        read_output(false, sink);
        read_output(true, sink);
    }
    child.out.reset();
    child.err.reset();
}

}  // namespace flashrec::launcher
