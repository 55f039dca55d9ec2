// A process's wait status in words, for records and people. Pure.
#pragma once
#include <string>

namespace flashrec::launcher {

// "exit code 75", "signal 9 (Killed)".
std::string describe_status(int wait_status);

}  // namespace flashrec::launcher
