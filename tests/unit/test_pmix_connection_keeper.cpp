// The PMIx connection keeper (ft/pmix_connection_keeper.hpp), without Slurm: this test process
// stands in for slurmstepd's PMIx server (a fake: a TCP listener on loopback, and a sleeping child
// whose pid the URI names as the server's process). A forked "rank" connects to it and starts
// the keeper; the test checks what the server sees: the rank's own messages reach the rank while
// it lives, the connection stays open after the rank died, and it closes once the server's
// process is gone, with the keeper reaped (this process is a subreaper, so nothing is left).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "flashrec/errors.hpp"
#include "flashrec/ft/pmix_connection_keeper.hpp"

namespace ft = flashrec::ft;

namespace {

const char* lookup(const std::map<std::string, std::string>& vars, const char* name) {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
}

struct Listener {
    int fd = -1;
    int port = 0;
    Listener() {
        fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
        REQUIRE(::listen(fd, 4) == 0);
        socklen_t len = sizeof addr;
        REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
        port = ntohs(addr.sin_port);
    }
    ~Listener() { ::close(fd); }
};

int connect_to(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? fd : -1;
}

// The connection as the server sees it, without waiting: "open" (nothing to read), "closed"
// (end of file) or "data".
std::string server_sees(int conn) {
    char byte = 0;
    const ssize_t n = ::recv(conn, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n == 0) return "closed";
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return "open";
    return n > 0 ? "data" : "error";
}

std::set<int> open_fds_of(pid_t pid) {
    std::set<int> fds;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
        fds.insert(std::stoi(entry.path().filename().string()));
    return fds;
}

void write_all(int fd, const void* data, size_t size) { REQUIRE(::write(fd, data, size) == static_cast<ssize_t>(size)); }

template <typename T>
T read_one(int fd) {
    T value{};
    REQUIRE(::read(fd, &value, sizeof value) == static_cast<ssize_t>(sizeof value));
    return value;
}

}  // namespace

TEST_CASE("the PMIx servers named by the environment") {
    std::map<std::string, std::string> vars = {
        {"PMIX_SERVER_URI41", "pmix-server.1835;tcp4://127.0.0.1:37215"},
        {"PMIX_SERVER_URI4", "pmix-server.1835;tcp4://127.0.0.1:37215"},  // the same server again
        {"PMIX_SERVER_URI3", "pmix-server.1835;tcp6://[::1]:40001"},
        {"PMIX_SERVER_URI21", "pmix-server.1835;usock:/tmp/pmix"},  // not TCP
        {"PMIX_SERVER_URI2", "no-pid;tcp4://127.0.0.1:99"},        // no pid
    };
    const auto servers = ft::pmix_servers([&](const char* name) { return lookup(vars, name); });
    REQUIRE(servers.size() == 2);
    CHECK(servers[0] == ft::PmixServerAddress{1835, 37215});
    CHECK(servers[1] == ft::PmixServerAddress{1835, 40001});
    vars = {{"PMIX_SERVER_URI41", "pmix-server.12;tcp4://127.0.0.1:port"}};
    CHECK(ft::pmix_servers([&](const char* name) { return lookup(vars, name); }).empty());
    CHECK(ft::pmix_servers([](const char*) { return nullptr; }).empty());
}

TEST_CASE("keep_pmix_connection refuses, saying why, where it cannot keep the connection") {
    const auto refusal = [] {
        try {
            (void)ft::keep_pmix_connection();
        } catch (const flashrec::Error& e) {
            return std::string(e.what());
        }
        return std::string("no refusal");
    };
    ::unsetenv("OMPI_MCA_async_mpi_finalize");
    CHECK(refusal().find("OMPI_MCA_async_mpi_finalize is ''") != std::string::npos);
    ::setenv("OMPI_MCA_async_mpi_finalize", "true", 1);
    ::unsetenv("PMIX_SERVER_URI41");
    CHECK(refusal().find("no PMIx server over TCP in the environment") != std::string::npos);
    Listener nobody_connected;
    const std::string uri = "pmix-server.1;tcp4://127.0.0.1:" + std::to_string(nobody_connected.port);
    ::setenv("PMIX_SERVER_URI41", uri.c_str(), 1);
    CHECK(refusal().find("no socket of this process connects to the PMIx server's port") != std::string::npos);
    ::unsetenv("PMIX_SERVER_URI41");
}

TEST_CASE("a dead rank's connection stays open until the server's process is gone") {
    REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);  // the keeper is reparented here, to be reaped
    ::alarm(120);                                     // never hang the suite
    Listener server;
    // The stand-in for slurmstepd: the process the keeper watches.
    const pid_t server_process = ::fork();
    REQUIRE(server_process >= 0);
    if (server_process == 0) {
        ::pause();
        ::_exit(0);
    }
    int to_rank[2], from_rank[2];
    REQUIRE(::pipe(to_rank) == 0);
    REQUIRE(::pipe(from_rank) == 0);
    const pid_t rank = ::fork();
    REQUIRE(rank >= 0);
    if (rank == 0) {
        const std::string uri =
            "pmix-server." + std::to_string(server_process) + ";tcp4://127.0.0.1:" + std::to_string(server.port);
        ::setenv("PMIX_SERVER_URI41", uri.c_str(), 1);
        ::setenv("OMPI_MCA_async_mpi_finalize", "true", 1);
        const int conn = connect_to(server.port);
        pid_t keeper = -1;
        try {
            if (conn >= 0) keeper = ft::keep_pmix_connection().keeper;
        } catch (const std::exception&) {
        }
        (void)!::write(from_rank[1], &keeper, sizeof keeper);
        // While the rank lives, what the server sends is the rank's, not the keeper's.
        char got = 0;
        const bool read_it = ::read(conn, &got, 1) == 1 && got == 'p';
        (void)!::write(from_rank[1], &read_it, sizeof read_it);
        char die = 0;
        (void)!::read(to_rank[0], &die, 1);
        ::_exit(0);
    }
    const int conn = ::accept(server.fd, nullptr, nullptr);
    REQUIRE(conn >= 0);
    const auto keeper = read_one<pid_t>(from_rank[0]);
    REQUIRE(keeper > 0);
    write_all(conn, "p", 1);
    CHECK(read_one<bool>(from_rank[0]));

    write_all(to_rank[1], "x", 1);  // the rank ends
    int status = 0;
    REQUIRE(::waitpid(rank, &status, 0) == rank);
    // The keeper notices the rank's end (its pipe's end of file) and closes that pipe: then it
    // holds the server's socket and /dev/null as stdio, nothing else.
    std::set<int> fds;
    for (int i = 0; i < 1000 && (fds = open_fds_of(keeper)) != std::set<int>{0, 1, 2, 3}; ++i) ::usleep(10'000);
    CHECK(fds == std::set<int>{0, 1, 2, 3});
    CHECK(::waitpid(keeper, &status, WNOHANG) == 0);
    CHECK(server_sees(conn) == "open");

    ::kill(server_process, SIGKILL);  // the step's slurmstepd ends
    REQUIRE(::waitpid(server_process, &status, 0) == server_process);
    REQUIRE(::waitpid(keeper, &status, 0) == keeper);
    CHECK(WIFEXITED(status));
    pollfd p{conn, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 10'000) == 1);
    CHECK(server_sees(conn) == "closed");
    ::close(conn);
    ::alarm(0);
}
