// flashrec::slurm without a running cluster: node-list expansion through Slurm's own
// scontrol (a two-line slurm.conf is enough for `scontrol show hostnames`), the split into
// active and spare nodes, drain reasons and command lines, and the subprocess runner.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "flashrec/slurm/allocation.hpp"

namespace fs = flashrec::slurm;
using Strings = std::vector<std::string>;
using namespace std::chrono_literals;

namespace {

// Sets (or unsets, with nullptr) an environment variable for one scope.
class EnvVar {
public:
    EnvVar(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) {
            old_ = old;
            had_ = true;
        }
        if (value)
            ::setenv(name, value, 1);
        else
            ::unsetenv(name);
    }
    ~EnvVar() {
        if (had_)
            ::setenv(name_.c_str(), old_.c_str(), 1);
        else
            ::unsetenv(name_.c_str());
    }
    EnvVar(const EnvVar&) = delete;
    EnvVar& operator=(const EnvVar&) = delete;

private:
    std::string name_, old_;
    bool had_ = false;
};

bool have_scontrol() { return std::system("command -v scontrol >/dev/null 2>&1") == 0; }

// A minimal slurm.conf (scontrol must find a config, or it would ask DNS), removed at exit.
class MinimalConf {
public:
    MinimalConf()
        : dir_(std::filesystem::temp_directory_path() / ("flashrec-slurm-unit-" + std::to_string(::getpid()))) {
        std::filesystem::create_directories(dir_);
        std::ofstream(dir_ / "slurm.conf") << "ClusterName=unit\nSlurmctldHost=localhost\n";
    }
    ~MinimalConf() {
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }
    MinimalConf(const MinimalConf&) = delete;
    MinimalConf& operator=(const MinimalConf&) = delete;
    std::string path() const { return (dir_ / "slurm.conf").string(); }

private:
    std::filesystem::path dir_;
};

std::string minimal_conf() {
    static MinimalConf conf;
    return conf.path();
}

std::string message_of(auto&& f) {
    try {
        f();
    } catch (const fs::SlurmError& e) {
        return e.what();
    }
    return "(no SlurmError thrown)";
}

}  // namespace

TEST_CASE("split_nodes: active first, the rest spare; too few names both numbers") {
    auto a = fs::split_nodes({"n1", "n2", "n3", "n4", "n5"}, 4, 1);
    CHECK(a.active == Strings{"n1", "n2", "n3", "n4"});
    CHECK(a.spare == Strings{"n5"});
    CHECK(a.nodes.size() == 5);

    auto extra = fs::split_nodes({"n1", "n2", "n3", "n4"}, 2, 1);
    CHECK(extra.active == Strings{"n1", "n2"});
    CHECK(extra.spare == Strings{"n3", "n4"});  // more than asked: extra spares

    auto none = fs::split_nodes({"n1"}, 1, 0);
    CHECK(none.spare.empty());

    std::string msg = message_of([] { fs::split_nodes({"n1", "n2", "n3", "n4"}, 4, 1); });
    CHECK(msg.find("has 4 node(s)") != std::string::npos);
    CHECK(msg.find("needs 5: 4 active + 1 spare") != std::string::npos);
    CHECK(msg.find("--nodes=5") != std::string::npos);
    CHECK_THROWS_AS(fs::split_nodes({"n1"}, 0, 0), fs::SlurmError);
    CHECK_THROWS_AS(fs::split_nodes({"n1"}, 1, -1), fs::SlurmError);
}

TEST_CASE("format_reason fills fields and keeps the reason safe for scontrol") {
    CHECK(fs::drain_reason(fs::default_reason_template, "node_lost", 1234, "n3", "17") == "flashrec: node_lost at step 1234");
    CHECK(fs::drain_reason("{node} of job {job}: {classification}", "node_hung", 7, "n3", "17") == "n3 of job 17: node_hung");
    CHECK(fs::format_reason("{a}-{{literal}}-{b}", {{"a", "x"}, {"b", "y"}}) == "x-{literal}-y");
    CHECK(fs::format_reason("flashrec: {c}", {{"c", "two\nlines \"quoted\""}}) ==
          "flashrec: two lines 'quoted'");
    CHECK(fs::format_reason("{c}", {{"c", std::string(500, 'x')}}).size() == 200);
    std::string msg = message_of([] { fs::format_reason("at step {stepp}", {{"step", "1"}}); });
    CHECK(msg.find("unknown field {stepp}") != std::string::npos);
    CHECK(msg.find("known: step") != std::string::npos);
    CHECK_THROWS_AS(fs::format_reason("{open", {}), fs::SlurmError);
}

TEST_CASE("drain, resume and requeue command lines") {
    CHECK(fs::drain_command("node07", "flashrec: node_lost at step 3") ==
          Strings{"scontrol", "update", "nodename=node07", "state=drain", "reason=flashrec: node_lost at step 3"});
    CHECK(fs::resume_command("node07") == Strings{"scontrol", "update", "nodename=node07", "state=resume"});
    CHECK(fs::requeue_command("4711") == Strings{"scontrol", "requeue", "4711"});
    CHECK(fs::requeue_command("4711_3") == Strings{"scontrol", "requeue", "4711_3"});
    for (const char* bad : {"", "node[1-2]", "a,b", "a b", "-x", "nodename=x"})
        CHECK_THROWS_AS(fs::drain_command(bad, "r"), fs::SlurmError);
    CHECK_THROWS_AS(fs::drain_command("node07", "  "), fs::SlurmError);
    for (const char* bad : {"", "12a", "_1", "1_", "1_2_3", "--all"})
        CHECK_THROWS_AS(fs::requeue_command(bad), fs::SlurmError);
    CHECK(fs::printable(fs::drain_command("n1", "a b")) == "scontrol update nodename=n1 state=drain 'reason=a b'");
    CHECK(fs::probe_command("4711", "node07") == Strings{"srun", "--jobid=4711", "--overlap", "--nodes=1", "--ntasks=1",
                                                         "--nodelist=node07", "--quiet", "true"});
    CHECK_THROWS_AS(fs::probe_command("4711", "node[1-2]"), fs::SlurmError);
    CHECK_THROWS_AS(fs::probe_command("--all", "node07"), fs::SlurmError);
}

TEST_CASE("kill_task_command: a step of the job on one node that kills one pid, only a process of the job") {
    const Strings argv = fs::kill_task_command("4711", "node07", 1234);
    REQUIRE(argv.size() == 13);
    CHECK(Strings(argv.begin(), argv.begin() + 8) == Strings{"srun", "--jobid=4711", "--overlap", "--nodes=1", "--ntasks=1",
                                                            "--nodelist=node07", "--quiet", "/bin/sh"});
    CHECK(argv[11] == "1234");
    CHECK(argv[12] == "4711");
    CHECK_THROWS_AS(fs::kill_task_command("4711", "node[1-2]", 1234), fs::SlurmError);
    CHECK_THROWS_AS(fs::kill_task_command("4711", "node07", 1), fs::SlurmError);
    CHECK_THROWS_AS(fs::kill_task_command("--all", "node07", 1234), fs::SlurmError);

    // The script srun runs there, run here (what srun adds is Slurm's; the decision is the script's):
    // a process with the job's SLURM_JOB_ID is killed, one of another job is left alone, a pid that
    // is gone says so.
    const auto script = [&](int pid, const std::string& job) {
        const Strings a = fs::kill_task_command(job, "node07", pid);
        return fs::run_command(Strings(a.begin() + 7, a.end()), 5s).exit_code;
    };
    const auto start_sleeper = [](const char* job_id) {
        const pid_t child = ::fork();
        if (child == 0) {
            ::setenv("SLURM_JOB_ID", job_id, 1);
            ::execlp("sleep", "sleep", "30", static_cast<char*>(nullptr));
            ::_exit(127);
        }
        std::this_thread::sleep_for(200ms);  // past the exec: its environment is sleep's
        return child;
    };
    const pid_t ours = start_sleeper("4711"), theirs = start_sleeper("4712");
    CHECK(script(theirs, "4711") == fs::kTaskNotOfJob);
    CHECK(script(ours, "4711") == fs::kTaskKilled);
    int status = 0;
    REQUIRE(::waitpid(ours, &status, 0) == ours);
    CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    CHECK(script(ours, "4711") == fs::kTaskGone);  // reaped: no such process
    ::kill(theirs, SIGKILL);
    ::waitpid(theirs, &status, 0);
}

TEST_CASE("unreachable_nodes: a node whose probe fails or does not end in time, a bounded number at once") {
    // A fake srun (the part under test is the launcher's use of it, not Slurm): n2 fails as
    // srun does for a node whose slurmd is gone, n3 never answers, the others start `true`.
    // Each records how many fake sruns live beside it (itself included) while it runs.
    const auto dir = std::filesystem::temp_directory_path() / ("flashrec-fake-srun." + std::to_string(::getpid()));
    const auto live = dir / "live";
    std::filesystem::create_directories(live);
    {
        std::ofstream fake(dir / "srun");
        fake << "#!/bin/sh\n"
                "touch " << live.string() << "/$$\n"
                "ls " << live.string() << " | wc -l >> " << (dir / "counts").string() << "\n"
                "sleep 0.2\n"
                "rm -f " << live.string() << "/$$\n"
                "case \"$5\" in --nodelist=n2) exit 1 ;; --nodelist=n3) exec sleep 30 ;; esac\n"
                "exec \"$7\"\n";
    }
    std::filesystem::permissions(dir / "srun", std::filesystem::perms::owner_all);
    const auto most_at_once = [&] {
        std::ifstream in(dir / "counts");
        int most = 0;
        for (int n; in >> n;) most = std::max(most, n);
        std::filesystem::remove(dir / "counts");
        return most;
    };
    const std::string path = dir.string() + ":" + std::getenv("PATH");
    const std::string conf = minimal_conf();
    EnvVar c("SLURM_CONF", conf.c_str()), p("PATH", path.c_str());
    CHECK(fs::unreachable_nodes("7", {"n1", "n2", "n3", "n4"}, 1500ms) == Strings{"n2", "n3"});
    CHECK(fs::unreachable_nodes("7", {"n1", "n4"}, 5s).empty());
    // Seven nodes, two at a time: every one probed, in the order given, never three at once.
    std::filesystem::remove(dir / "counts");
    const Strings seven{"n1", "n2", "n5", "n6", "n7", "n8", "n9"};
    CHECK(fs::unreachable_nodes("7", seven, 5s, 2) == Strings{"n2"});
    CHECK(most_at_once() <= 2);
    CHECK(fs::unreachable_nodes("7", seven, 5s, 1) == Strings{"n2"});
    CHECK(most_at_once() == 1);
    std::filesystem::remove_all(dir);
    // No srun at all is an error, not every node lost.
    EnvVar bare("PATH", "/nonexistent");
    CHECK_THROWS_AS(fs::unreachable_nodes("7", {"n1"}, 5s), fs::SlurmError);
}

TEST_CASE("in_allocation and read_allocation follow the environment") {
    EnvVar id("SLURM_JOB_ID", nullptr), jobid("SLURM_JOBID", nullptr), list("SLURM_JOB_NODELIST", nullptr),
        list2("SLURM_NODELIST", nullptr);
    CHECK_FALSE(fs::in_allocation());
    std::string msg = message_of([] { fs::read_allocation(1, 0); });
    CHECK(msg.find("not inside a Slurm allocation") != std::string::npos);

    if (!have_scontrol()) {
        MESSAGE("scontrol not installed: skipping the parts that expand node lists");
        return;
    }
    const std::string conf = minimal_conf();
    EnvVar c("SLURM_CONF", conf.c_str()), i("SLURM_JOB_ID", "77"), l("SLURM_JOB_NODELIST", "fr[1-3,5]"),
        n("SLURMD_NODENAME", "fr1"), r("SLURM_RESTART_COUNT", "2"), name("SLURM_JOB_NAME", "llm");
    CHECK(fs::in_allocation());
    auto a = fs::read_allocation(3, 1);
    CHECK(a.job_id == "77");
    CHECK(a.job_name == "llm");
    CHECK(a.nodelist == "fr[1-3,5]");
    CHECK(a.active == Strings{"fr1", "fr2", "fr3"});
    CHECK(a.spare == Strings{"fr5"});
    CHECK(a.this_node == "fr1");
    CHECK(a.restart_count == 2);
    msg = message_of([] { fs::read_allocation(4, 2); });
    CHECK(msg.find("has 4 node(s), but flashrec needs 6: 4 active + 2 spare") != std::string::npos);
}

TEST_CASE("expand_nodelist uses scontrol and refuses to run without a Slurm config") {
    if (!have_scontrol()) {
        MESSAGE("scontrol not installed: skipped");
        return;
    }
    {
        const std::string conf = minimal_conf();
        EnvVar c("SLURM_CONF", conf.c_str());
        CHECK(fs::expand_nodelist("gpu[01-03,10],login") == Strings{"gpu01", "gpu02", "gpu03", "gpu10", "login"});
        CHECK(fs::expand_nodelist("  ").empty());
        CHECK_THROWS_AS(fs::expand_nodelist("-h"), fs::SlurmError);
        CHECK_THROWS_AS(fs::expand_nodelist("a;b"), fs::SlurmError);
    }
    {
        EnvVar c("SLURM_CONF", "/nonexistent/slurm.conf");
        CHECK(message_of([] { fs::expand_nodelist("a[1-2]"); }).find("SLURM_CONF=/nonexistent/slurm.conf") !=
              std::string::npos);
    }
    // Only where no default config exists (else Slurm would rightly use it).
    if (!std::filesystem::exists("/etc/slurm/slurm.conf") &&
        !std::filesystem::exists("/run/slurm/conf/slurm.conf")) {
        EnvVar c("SLURM_CONF", nullptr);
        CHECK(message_of([] { fs::expand_nodelist("a[1-2]"); }).find("SLURM_CONF is not set") !=
              std::string::npos);
    }
}

TEST_CASE("run_command: output, exit code, missing program, timeout") {
    auto r = fs::run_command({"sh", "-c", "echo out; echo err >&2; exit 3"}, 5s);
    CHECK(r.exit_code == 3);
    CHECK(r.out == "out\n");
    CHECK(r.err == "err\n");
    CHECK(message_of([] { fs::run_command({"flashrec-no-such-program"}, 5s); }).find("No such file") !=
          std::string::npos);

    // The timeout kills the whole process group, also a grandchild holding the pipes open.
    auto t0 = std::chrono::steady_clock::now();
    std::string msg = message_of([] { fs::run_command({"sh", "-c", "sleep 30 & sleep 30"}, 300ms); });
    CHECK(msg.find("did not finish within 300 ms") != std::string::npos);
    CHECK_THROWS_AS(fs::run_command({"sleep", "5"}, 100ms), fs::CommandTimedOut);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}
