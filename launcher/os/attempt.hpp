// One attempt of the MPI job: mpirun started in its own process group with its output on pipes
// (Child, spawn_child), the lines read from them, and what the shell knows of the attempt.
// The pipes and the child are owned: nothing leaks on an error path.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "rank_output.hpp"

namespace flashrec::launcher {

// A file descriptor, closed when its owner goes. Move-only.
class Fd {
public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Fd& operator=(Fd&& other) noexcept;
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }
    bool open() const { return fd_ >= 0; }
    void reset();

private:
    int fd_ = -1;
};

// A started child: its pid (also its process group id) and the read ends (non-blocking) of its
// stdout and stderr. Move-only. Its owner reaps it (waitpid) and says so with reaped(); a child
// not reaped when its owner goes gets SIGKILL, its group with it, and is reaped if it ends
// within a second (one in uninterruptible sleep is left to the owner's reaping loop).
class Child {
public:
    Child() = default;
    Child(pid_t pid, Fd stdout_read, Fd stderr_read)
        : out(std::move(stdout_read)), err(std::move(stderr_read)), pid_(pid) {}
    ~Child();
    Child(Child&& other) noexcept;
    Child& operator=(Child&& other) noexcept;
    pid_t pid() const { return pid_; }
    void reaped() { reaped_ = true; }

    Fd out, err;

private:
    void end();
    pid_t pid_ = -1;
    bool reaped_ = false;
};

// Starts argv[0] (searched in PATH if it has no '/') with exactly `env` as its environment, in a
// new process group, stdin from /dev/null, default signal dispositions and an empty signal mask.
// Throws flashrec::Error if it cannot be started.
Child spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// One start of mpirun as the shell holds it: the child and its output. What the attempt means
// for the job (its index, kind, start) is the core's (job_view.hpp, CurrentAttempt).
struct Attempt {
    using Clock = std::chrono::steady_clock;
    using LineSink = std::function<void(const std::string& line, bool is_err)>;

    Child child;
    bool exited = false;
    int status = 0;
    LineSplitter out_lines, err_lines;

    // mpirun was reaped with this wait status.
    void reaped(int wait_status);
    bool output_open(bool is_err) const { return (is_err ? child.err : child.out).open(); }
    // Reads what is there on one of mpirun's pipes, cut into lines for `sink`; a bounded number
    // of reads per call, so that a flood of output cannot starve the caller's loop. At the end
    // of the output the last partial line goes to `sink` and the pipe is closed.
    void read_output(bool is_err, const LineSink& sink);
    // After mpirun and every rank are gone: reads what is still in the pipes until both end or
    // `limit` passed, then closes them.
    void drain_output(std::chrono::milliseconds limit, const LineSink& sink);
};

}  // namespace flashrec::launcher
