// flashrec-launch's control-plane controller alone, for the conformance set (conformance.py
// --control-plane): a stand-in for the launcher (none of its restart logic, named so), around
// one command. It listens, hands the command FLASHREC_CONTROL and FLASHREC_TOKEN, and does what
// the launcher's controller does with every rank's connection: a process's end (EOF or reset
// without BYE) is passed on to the others (PEER_LOST).
//   control_plane_host [--bind ADDRESS] [--log FILE] -- command [args...]
// ADDRESS: where the controller listens and what the ranks are told (default 127.0.0.1; across
// nodes an address they reach). FILE: the controller's event log (default: none kept).
// Exits with the command's status (128 + signal when it died by one).
#include "controller.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/event_log.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    std::string bind = "127.0.0.1";
    std::string log_path;
    int first = 1;
    for (; first < argc; ++first) {
        const std::string arg = argv[first];
        if (arg == "--") {
            ++first;
            break;
        }
        if ((arg == "--bind" || arg == "--log") && first + 1 < argc) {
            (arg == "--bind" ? bind : log_path) = argv[++first];
            continue;
        }
        std::fprintf(stderr, "control_plane_host: unknown argument '%s'\n", arg.c_str());
        return 2;
    }
    if (first >= argc) {
        std::fprintf(stderr, "usage: control_plane_host [--bind ADDRESS] [--log FILE] -- command [args...]\n");
        return 2;
    }
    using namespace flashrec;
    launcher::ControllerOptions options;
    options.bind_address = bind;
    const ft::wire::Token token = ft::wire::generate_token();
    options.token = token;
    options.hang_timeout = std::chrono::hours(1);  // hangs are the driver's to judge, by its timeout
    std::ostringstream discarded;
    options.event_log = log_path.empty() ? std::make_shared<ft::EventLog>(discarded) : std::make_shared<ft::EventLog>(log_path);
    launcher::Controller controller(std::move(options));
    ::setenv(ft::env::kControl, controller.endpoint().c_str(), 1);
    ::setenv(ft::env::kToken, ft::wire::token_to_hex(token).c_str(), 1);

    const pid_t child = ::fork();
    if (child < 0) {
        std::perror("control_plane_host: fork");
        return 1;
    }
    if (child == 0) {
        ::execvp(argv[first], argv + first);
        std::fprintf(stderr, "control_plane_host: cannot run %s: %s\n", argv[first], std::strerror(errno));
        ::_exit(127);
    }
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    std::printf("control_plane_host: %llu loss notices passed on\n",
                static_cast<unsigned long long>(controller.peer_lost_count()));
    std::fflush(stdout);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
