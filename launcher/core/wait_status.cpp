#include "wait_status.hpp"

#include <sys/wait.h>

#include <cstring>

namespace flashrec::launcher {

std::string describe_status(int status) {
    if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        const int sig = WTERMSIG(status);
        const char* name = ::strsignal(sig);
        return "signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : std::string());
    }
    return "status " + std::to_string(status);
}

}  // namespace flashrec::launcher
