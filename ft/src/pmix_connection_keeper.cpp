#include "flashrec/ft/pmix_connection_keeper.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "flashrec/errors.hpp"
#include "flashrec/ft/contract.hpp"

namespace flashrec::ft {

namespace {

// Where PMIx clients of every version look for their server; Slurm sets each it serves.
constexpr const char* kServerUriVariables[] = {"PMIX_SERVER_URI41", "PMIX_SERVER_URI4", "PMIX_SERVER_URI3",
                                               "PMIX_SERVER_URI21", "PMIX_SERVER_URI2"};

// The keeper's fds after exec: the PMIx socket and the read end of the pipe whose write end only
// the rank holds (it reads end-of-file once the rank is gone, however it ended).
constexpr int kKeptSocketFd = 3;
constexpr int kRankAliveFd = 4;
// Until the exec: where the keeper-to-be reports why it could not become the keeper (an errno).
// Close-on-exec, so the rank reads end of file once the exec took.
constexpr int kStartReportFd = 5;
// The keeper is /bin/sh (nothing of the rank's memory stays mapped) with argv[0] its name, for ps;
// $1 is the server's pid. It waits for the rank's end, then holds the socket without reading it
// (PMIx made it non-blocking, which a shell cannot read) until the server's process is gone.
char keeper_name[] = "flashrec-pmix-keeper";
char keeper_dash_c[] = "-c";
char keeper_script[] =
    "c=$(cat /proc/$1/comm); read -r _ <&4; exec 4<&-; "
    "while [ \"$(cat /proc/$1/comm 2>/dev/null)\" = \"$c\" ]; do sleep 1; done";
char keeper_path[] = "PATH=/usr/bin:/bin";

bool loopback_peer(int fd, int port) {
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &length) != 0) return false;
    if (peer.ss_family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in&>(peer);
        return ntohs(in.sin_port) == port && in.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    }
    if (peer.ss_family == AF_INET6) {
        const auto& in6 = reinterpret_cast<const sockaddr_in6&>(peer);
        return ntohs(in6.sin6_port) == port && IN6_IS_ADDR_LOOPBACK(&in6.sin6_addr);
    }
    return false;
}

std::vector<int> open_fds() {
    std::vector<int> fds;
    DIR* dir = ::opendir("/proc/self/fd");
    if (!dir) throw Error(std::string("cannot list /proc/self/fd: ") + std::strerror(errno));
    const int own = ::dirfd(dir);
    while (const dirent* entry = ::readdir(dir)) {
        int fd = -1;
        const char* name = entry->d_name;
        const auto [end, ec] = std::from_chars(name, name + std::strlen(name), fd);
        if (ec == std::errc() && *end == '\0' && fd != own) fds.push_back(fd);
    }
    ::closedir(dir);
    return fds;
}

// After fork, in the keeper-to-be: async-signal-safe calls only (the rank has other threads).
[[noreturn]] void become_keeper(int socket_fd, int alive_read_fd, int report_fd, char* const argv[],
                                char* const envp[]) {
    const auto give_up = [&](int fd) {
        const int error = errno;
        (void)!::write(fd, &error, sizeof error);
        ::_exit(127);
    };
    // Above every fd the rank may have, so that placing them at 3, 4 and 5 overwrites nothing needed.
    const int socket_copy = ::fcntl(socket_fd, F_DUPFD, 64);
    const int alive_copy = ::fcntl(alive_read_fd, F_DUPFD, 64);
    const int report_copy = ::fcntl(report_fd, F_DUPFD_CLOEXEC, 64);
    if (report_copy < 0) ::_exit(127);
    if (socket_copy < 0 || alive_copy < 0) give_up(report_copy);
    if (::dup2(socket_copy, kKeptSocketFd) < 0 || ::dup2(alive_copy, kRankAliveFd) < 0 ||
        ::dup3(report_copy, kStartReportFd, O_CLOEXEC) < 0)
        give_up(report_copy);
    // No stdio of the rank: slurmstepd ends a step only once every task's output has closed.
    const int null_fd = ::open("/dev/null", O_RDWR);
    if (null_fd < 0) give_up(kStartReportFd);
    for (int fd = 0; fd <= 2; ++fd) ::dup2(null_fd, fd);
    // Nothing else of the rank: its MPI sockets must close when it dies, as must the launcher's
    // control connection.
    if (::syscall(SYS_close_range, kStartReportFd + 1, ~0U, 0) != 0)
        for (int fd = kStartReportFd + 1; fd < 65536; ++fd) ::close(fd);
    // The rank's blocked signals and handlers are not the keeper's: the step's end may signal it.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
    ::execve("/bin/sh", argv, envp);
    give_up(kStartReportFd);
    ::_exit(127);  // give_up does not return
}

}  // namespace

std::vector<PmixServerAddress> pmix_servers(const std::function<const char*(const char*)>& getenv) {
    std::vector<PmixServerAddress> servers;
    const auto number = [](std::string_view text) {
        int value = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
        return ec == std::errc() && end == text.data() + text.size() && value > 0 ? value : 0;
    };
    for (const char* name : kServerUriVariables) {
        const char* value = getenv(name);
        if (!value) continue;
        // "<namespace>.<pid>;tcp4://127.0.0.1:<port>" (tcp6://[::1]:<port> alike)
        const std::string_view uri = value;
        const auto semicolon = uri.find(';');
        const auto colon = uri.rfind(':');
        if (semicolon == std::string_view::npos || colon == std::string_view::npos || colon < semicolon ||
            uri.substr(semicolon + 1, 3) != "tcp")
            continue;
        const std::string_view name_part = uri.substr(0, semicolon);
        const auto dot = name_part.rfind('.');
        const PmixServerAddress server{dot == std::string_view::npos ? 0 : number(name_part.substr(dot + 1)),
                                       number(uri.substr(colon + 1))};
        if (server.pid > 0 && server.port > 0 && server.port < 65536 &&
            std::find(servers.begin(), servers.end(), server) == servers.end())
            servers.push_back(server);
    }
    return servers;
}

KeptPmixConnection keep_pmix_connection() {
    const auto fail = [](const std::string& why) -> Error {
        return Error("direct launch: cannot keep this process's PMIx connection open past its end (a death would "
                     "make Slurm cancel the step, docs/ulfm-traps.md trap 17): " + why);
    };
    const std::string async_finalize = std::getenv(env::kAsyncMpiFinalize) ? std::getenv(env::kAsyncMpiFinalize) : "";
    if (async_finalize != "1" && async_finalize != "true")
        throw fail(std::string(env::kAsyncMpiFinalize) + " is '" + async_finalize + "', not true: MPI_Finalize's PMIx "
                   "fence would wait for a dead rank forever (tools/fr-mpirun's flags set it, and direct launch passes "
                   "them on)");
    const auto servers = pmix_servers([](const char* name) { return std::getenv(name); });
    if (servers.empty())
        throw fail("no PMIx server over TCP in the environment (PMIX_SERVER_URI41 .. URI2, \"<name>.<pid>;tcp4://...\")");

    KeptPmixConnection kept;
    for (const int fd : open_fds()) {
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        for (const auto& server : servers)
            if (loopback_peer(fd, server.port)) {
                if (kept.connection_fd >= 0)
                    throw fail("two sockets connect to the PMIx server (fds " + std::to_string(kept.connection_fd) +
                               " and " + std::to_string(fd) + ")");
                kept.connection_fd = fd;
                kept.server = server;
            }
    }
    if (kept.connection_fd < 0) {
        std::string named;
        for (const auto& server : servers) named += (named.empty() ? "" : ", ") + std::to_string(server.port);
        throw fail("no socket of this process connects to the PMIx server's port " + named + " (called before MPI_Init?)");
    }

    int alive[2];
    // The write end stays in this process until it ends (never closed on purpose: while the rank
    // lives, PMIx still uses the socket and the keeper must not read it). O_CLOEXEC: a program
    // this process executes does not keep the keeper waiting.
    if (::pipe2(alive, O_CLOEXEC) != 0) throw fail(std::string("pipe2: ") + std::strerror(errno));
    int pid_pipe[2];
    if (::pipe2(pid_pipe, O_CLOEXEC) != 0) {
        ::close(alive[0]);
        ::close(alive[1]);
        throw fail(std::string("pipe2: ") + std::strerror(errno));
    }
    // Prepared before fork: the keeper may not allocate.
    std::string server_pid = std::to_string(kept.server.pid);
    char* const argv[] = {keeper_name, keeper_dash_c, keeper_script, keeper_name, server_pid.data(), nullptr};
    char* const envp[] = {keeper_path, nullptr};

    // Two forks: the keeper is never this process's child (no zombie of it here, no SIGCHLD, and
    // nothing here that waits for any child can reap it).
    const pid_t middle = ::fork();
    if (middle < 0) throw fail(std::string("fork: ") + std::strerror(errno));
    if (middle == 0) {
        const pid_t keeper = ::fork();
        if (keeper == 0) become_keeper(kept.connection_fd, alive[0], pid_pipe[1], argv, envp);
        (void)!::write(pid_pipe[1], &keeper, sizeof keeper);
        ::_exit(keeper < 0 ? 1 : 0);
    }
    ::close(alive[0]);
    ::close(pid_pipe[1]);
    int status = 0;
    while (::waitpid(middle, &status, 0) < 0 && errno == EINTR) {
    }
    pid_t keeper = -1;
    const ssize_t got = ::read(pid_pipe[0], &keeper, sizeof keeper);
    // Then end of file once the keeper's exec took (the pipe is close-on-exec), or its errno.
    int exec_error = 0;
    ssize_t more = 0;
    while ((more = ::read(pid_pipe[0], &exec_error, sizeof exec_error)) < 0 && errno == EINTR) {
    }
    ::close(pid_pipe[0]);
    if (got != static_cast<ssize_t>(sizeof keeper) || keeper <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        ::close(alive[1]);
        throw fail("the keeper process did not start (fork failed)");
    }
    if (more > 0) {
        ::close(alive[1]);
        throw fail(std::string("the keeper could not run /bin/sh: ") + std::strerror(exec_error));
    }
    kept.keeper = keeper;
    return kept;
}

}  // namespace flashrec::ft
