// An attempt's child and pipes (attempt.hpp): a real short child's output cut into lines, its
// exit status, its pipes closed at the end of its output, and a child dropped unreaped killed
// and reaped.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "attempt.hpp"

extern char** environ;

using namespace flashrec::launcher;

namespace {

std::vector<std::string> this_environment() {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    return env;
}

bool fd_is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1 || errno != EBADF; }

}  // namespace

TEST_CASE("a short child's output, exit status, closed pipes and reaping") {
    Attempt a;
    a.child = spawn_child({"/bin/sh", "-c", "echo hi; echo oops >&2; printf tail; exit 3"}, this_environment());
    const pid_t pid = a.child.pid();
    const int out_fd = a.child.out.get(), err_fd = a.child.err.get();
    REQUIRE(pid > 0);
    CHECK(a.output_open(false));
    CHECK(a.output_open(true));
    std::vector<std::pair<std::string, bool>> lines;
    // No time limit of its own: the child ends, its pipes reach their end, the loop ends.
    while (a.output_open(false) || a.output_open(true)) {
        a.drain_output(std::chrono::milliseconds(60000),
                       [&](const std::string& line, bool is_err) { lines.emplace_back(line, is_err); });
    }
    CHECK_FALSE(fd_is_open(out_fd));
    CHECK_FALSE(fd_is_open(err_fd));
    // Lines keep their newline; a last line without one is handed on with one added.
    const std::vector<std::pair<std::string, bool>> want = {{"hi\n", false}, {"tail\n", false}, {"oops\n", true}};
    std::vector<std::pair<std::string, bool>> out, err;
    for (const auto& l : lines) (l.second ? err : out).push_back(l);
    CHECK(out == std::vector<std::pair<std::string, bool>>{want[0], want[1]});
    CHECK(err == std::vector<std::pair<std::string, bool>>{want[2]});

    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    a.reaped(status);
    CHECK(a.exited);
    CHECK(WIFEXITED(a.status));
    CHECK(WEXITSTATUS(a.status) == 3);
    CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);  // nothing left to reap
}

TEST_CASE("a child dropped unreaped is killed and reaped, its pipes closed") {
    pid_t pid = -1;
    int out_fd = -1;
    {
        Child child = spawn_child({"/bin/sleep", "600"}, this_environment());
        pid = child.pid();
        out_fd = child.out.get();
        Child moved = std::move(child);  // the owner changes; the child does not end
        CHECK(child.pid() == -1);
        CHECK(::kill(pid, 0) == 0);
    }
    CHECK_FALSE(fd_is_open(out_fd));
    CHECK(::kill(pid, 0) == -1);  // gone, not a zombie: reaped
    CHECK(errno == ESRCH);
}

TEST_CASE("a program that cannot be started is a clear error") {
    CHECK_THROWS_WITH(spawn_child({"/nonexistent/flashrec-no-such-program"}, this_environment()),
                      doctest::Contains("cannot start /nonexistent/flashrec-no-such-program"));
}
