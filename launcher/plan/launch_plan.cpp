#include "launch_plan.hpp"

#include <dlfcn.h>
#include <mpi.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <ostream>
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <cstdio>
#include <regex>
#include <signal.h>
#include <sstream>
#include <thread>

#include "flashrec/runtime/interval_choice.hpp"
#include "flashrec/errors.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/checkpoint.hpp"
#include "flashrec/runtime/topology.hpp"
#include "attempt.hpp"
#include "processes.hpp"
#include "timeouts.hpp"

#ifndef FLASHREC_DEFAULT_MPIRUN
#define FLASHREC_DEFAULT_MPIRUN "fr-mpirun"
#endif

extern char** environ;

namespace flashrec::launcher {

namespace fs = std::filesystem;

// The local IPv4 address this machine uses to reach `host` (the route's source address), or ""
// if the name does not resolve or there is no route. Sends nothing: connect() on a UDP socket
// only picks the route.
std::string address_towards(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0 || !found) return "";
    std::string address;
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    socklen_t length = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
        address = text;
    if (fd >= 0) ::close(fd);
    ::freeaddrinfo(found);
    return address;
}

// The IPv4 subnet ("10.200.0.0/24") of the local interface that holds `address`, or "".
std::string subnet_of(const std::string& address) {
    in_addr wanted{};
    if (::inet_pton(AF_INET, address.c_str(), &wanted) != 1) return "";
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) return "";
    std::string subnet;
    for (const ifaddrs* i = list; i && subnet.empty(); i = i->ifa_next) {
        if (!i->ifa_addr || !i->ifa_netmask || i->ifa_addr->sa_family != AF_INET) continue;
        const auto ip = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
        const auto mask = reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr;
        if (ip != wanted.s_addr) continue;
        in_addr net{ip & mask};
        char text[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, &net, text, sizeof text);
        subnet = std::string(text) + "/" + std::to_string(__builtin_popcount(ntohl(mask)));
    }
    ::freeifaddrs(list);
    return subnet;
}

std::string local_hostname() {
    std::array<char, 256> buffer{};
    if (::gethostname(buffer.data(), buffer.size() - 1) != 0) return "localhost";
    return buffer.data();
}

namespace {

// The line of `section.key` in the YAML file, for messages; 0 if it cannot be found.
int line_of(const std::string& path, const std::string& section, const std::string& key) {
    try {
        const YAML::Node root = YAML::LoadFile(path);
        const YAML::Node s = root[section];
        if (!s) return 0;
        if (key.empty()) return s.Mark().line + 1;
        const YAML::Node k = s[key];
        return k ? k.Mark().line + 1 : s.Mark().line + 1;
    } catch (const std::exception&) {
        return 0;
    }
}

bool executable_file(const fs::path& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

fs::path resolve_program(const config::Config& cfg, const fs::path& config_path) {
    const std::string& program = cfg.launch.program;
    if (program.empty())
        throw ConfigError(cfg.path, line_of(cfg.path, "launch", ""), "launch.program",
                          "must be set for flashrec-launch (the trainer binary, relative to " +
                              config_path.parent_path().string() + ")");
    const fs::path given(program);
    const fs::path candidate = given.is_absolute() ? given : config_path.parent_path() / given;
    if (executable_file(candidate)) return fs::weakly_canonical(candidate);
    // A bare name that is not next to train.yaml: look in PATH, as a shell would.
    if (program.find('/') == std::string::npos)
        if (const char* path = std::getenv("PATH")) {
            std::stringstream dirs(path);
            std::string dir;
            while (std::getline(dirs, dir, ':'))
                if (!dir.empty() && executable_file(fs::path(dir) / program))
                    return fs::weakly_canonical(fs::path(dir) / program);
        }
    std::error_code ec;
    const char* why = !fs::exists(candidate, ec) ? "does not exist"
                      : fs::is_directory(candidate, ec) ? "is a directory"
                                                        : "is not executable";
    throw ConfigError(cfg.path, line_of(cfg.path, "launch", "program"), "launch.program",
                      "'" + program + "' " + why + ": " + candidate.string() +
                          (program.find('/') == std::string::npos ? " (nor found in PATH)" : ""));
}

std::string read_all(int fd, std::chrono::milliseconds limit) {
    std::string out;
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
        char buf[4096];
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) out.append(buf, static_cast<std::size_t>(n));
        else if (n == 0 || (errno != EAGAIN && errno != EINTR)) break;
    }
    return out;
}

}  // namespace

std::optional<std::int64_t> newest_checkpoint(const config::Config& cfg, std::string& why) {
    if (cfg.checkpoint.dir.empty()) {
        why = "checkpoint.dir is not set in " + cfg.path;
        return std::nullopt;
    }
    try {
        // The same choice the ranks make when they resume (runtime::Checkpointer::newest_complete).
        const topology::Shape shape{cfg.job.dp, cfg.job.tp, cfg.job.pp};
        std::vector<std::string> roles;
        for (int r = 0; r < shape.size(); ++r) roles.push_back(topology::role_key(topology::coord_of(shape, r)));
        const ft::CheckpointChoice choice = ft::CheckpointReader::newest_for_job(
            cfg.checkpoint.dir, cfg.job.name, shape.dp, shape.tp, shape.pp, roles, ft::Verification::checksums);
        if (!choice.refused.empty()) std::fprintf(stderr, "flashrec-launch: checkpoint: %s\n", choice.explanation().c_str());
        if (!choice.chosen) {
            why = choice.refused.empty() ? "no complete checkpoint in " + cfg.checkpoint.dir : choice.explanation();
            return std::nullopt;
        }
        return choice.chosen->step;
    } catch (const std::exception& e) {
        why = e.what();
        return std::nullopt;
    }
}

const char* built_nccl_version() { return FLASHREC_BUILT_NCCL; }

std::string mpi_prefix() {
    if (const char* set = std::getenv(ft::env::kMpiPrefix); set && *set) return set;
    // The Open MPI this launcher (and the trainer built beside it) links: <prefix>/lib/libmpi.so.
    Dl_info info{};
    if (::dladdr(reinterpret_cast<void*>(&MPI_Init), &info) == 0 || !info.dli_fname) return {};
    const std::filesystem::path lib = std::filesystem::weakly_canonical(info.dli_fname);
    return lib.parent_path().filename() == "lib" ? lib.parent_path().parent_path().string() : std::string();
}

std::string mpirun_wrapper() {
    if (const char* env = std::getenv(ft::env::kMpirun); env && *env) return env;
    // An installed launcher has the installed wrapper beside it (cmake/FlashrecInstall.cmake);
    // the build tree's has none there and uses the source tree's.
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path beside = self.parent_path() / "fr-mpirun";
        if (::access(beside.c_str(), X_OK) == 0) return beside.string();
    }
    return FLASHREC_DEFAULT_MPIRUN;
}

LaunchPlan make_launch_plan(const PlanRequest& request) {
    LaunchPlan plan;
    plan.cfg = config::load(request.config_path);
    plan.cfg.mpi = config::with_environment(plan.cfg.mpi, [](const char* name) { return std::getenv(name); });
    std::error_code ec;
    plan.config_path = fs::absolute(request.config_path, ec);
    if (ec) plan.config_path = request.config_path;
    plan.config_path = plan.config_path.lexically_normal();
    for (const auto& spec : request.faults) {
        const std::string where = "--fault";
        const config::Fault fault = config::parse_fault(spec, where);
        config::validate_fault(fault, plan.cfg.job, where, plan.cfg.protection);
        plan.faults.push_back(spec);
    }
    plan.program = resolve_program(plan.cfg, plan.config_path);
    plan.wrapper = mpirun_wrapper();
    std::string events = request.events;
    if (events.empty()) events = plan.cfg.logging.events;
    if (events.empty()) events = plan.cfg.job.name + ".events.jsonl";
    plan.events_path = fs::absolute(events, ec).lexically_normal();
    plan.local_host = local_hostname();
    // FLASHREC_SLURM=0: run on this machine even inside an allocation.
    const char* use_slurm = std::getenv(ft::env::kSlurm);
    if (slurm::in_allocation() && !(use_slurm && std::string(use_slurm) == "0"))
        plan.allocation = slurm::read_allocation(plan.cfg.job.nodes, plan.cfg.job.spare_nodes);
    if (plan.allocation && !std::getenv(ft::env::kBtlIf))
        // MPI between nodes needs the network the nodes reach each other on (fr-mpirun's
        // default, lo, only works on one machine): the subnet of the route to another node.
        for (const auto& node : plan.allocation->nodes)
            if (short_name(node) != short_name(plan.local_host)) {
                plan.btl_if = subnet_of(address_towards(node));
                break;
            }
    plan.layout = make_layout(plan.cfg, plan.local_host, plan.allocation ? &*plan.allocation : nullptr);
    if (plan.layout.slurm &&
        config::direct_launch_chosen(plan.cfg)) {
        std::string why;
        auto variables = plan.wrapper_variables();
        if (!plan.btl_if.empty()) variables.emplace_back(ft::env::kBtlIf, plan.btl_if);
        const auto flags = wrapper_flags(plan.wrapper, why, variables);
        if (!flags) throw Error("slurm.launch: " + plan.cfg.slurm.launch + ": direct launch cannot read the MPI flags from " + plan.wrapper + ": " + why);
        plan.direct.emplace(*flags, plan.hostfile_path().string(), mpi_prefix());
    }
    return plan;
}

std::optional<std::vector<std::string>> wrapper_flags(const std::string& wrapper, std::string& why,
                                                     const std::vector<std::pair<std::string, std::string>>& variables) {
    char dir_template[] = "/tmp/flashrec-probe.XXXXXX";
    const char* dir = ::mkdtemp(dir_template);
    if (!dir) {
        why = std::string("mkdtemp: ") + std::strerror(errno);
        return std::nullopt;
    }
    const fs::path root(dir);
    const fs::path fake = root / "bin" / "mpirun";
    std::error_code ec;
    fs::create_directories(fake.parent_path(), ec);
    {
        std::ofstream script(fake);
        script << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n";
    }
    ::chmod(fake.c_str(), 0755);
    std::vector<std::string> env;
    const std::string prefix_var = std::string(ft::env::kMpiPrefix) + "=";
    const auto replaced = [&](std::string_view entry) {
        if (entry.rfind(prefix_var, 0) == 0) return true;
        for (const auto& [name, value] : variables)
            if (entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=')
                return true;
        return false;
    };
    for (char** e = environ; *e; ++e)
        if (!replaced(*e)) env.emplace_back(*e);
    env.push_back(prefix_var + root.string());
    for (const auto& [name, value] : variables) env.push_back(name + "=" + value);
    static constexpr const char* kEnd = "--flashrec-probe-end";
    std::optional<std::vector<std::string>> flags;
    try {
        Child child = spawn_child({wrapper, kEnd}, env);
        const std::string out = read_all(child.out.get(), std::chrono::seconds(5));
        child.out.reset();
        child.err.reset();
        int status = 0;
        for (int i = 0; i < 500 && ::waitpid(child.pid(), &status, WNOHANG) == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (::waitpid(child.pid(), &status, WNOHANG) == 0) {
            ::kill(-child.pid(), SIGKILL);
            ::waitpid(child.pid(), &status, 0);
        }
        child.reaped();
        std::vector<std::string> words;
        std::stringstream lines(out);
        std::string line;
        while (std::getline(lines, line)) words.push_back(line);
        if (!words.empty() && words.back() == kEnd) {
            words.pop_back();
            flags = std::move(words);
        } else {
            why = wrapper + " did not run the stand-in mpirun (" + describe_status(status) + ")";
        }
    } catch (const std::exception& e) {
        why = e.what();
    }
    fs::remove_all(root, ec);
    return flags;
}

std::string interval_text(const config::Protection& p) {
    if (p.every_auto()) {
        char budget[32];
        std::snprintf(budget, sizeof budget, "%g %%", p.overhead_budget * 100);
        return "snapshot every k steps, k = 1, 2, 4 ... " + std::to_string(p.max_every) +
               " chosen while the job runs (protection.every = auto: the smallest k whose exposed cost per step "
               "stays within " + budget + " of the step; a repair replays up to k)";
    }
    if (p.every == 1) return "snapshot every step";
    return "snapshot every " + std::to_string(p.every) + " steps (protection.every; a repair replays up to " +
           std::to_string(p.every) + ")";
}

// Before the job runs neither the step time nor a snapshot's cost is known: the estimate is in
// those units, and says so (the summary gives it in ms from what the job measured).
std::string failure_cost_estimate(const config::Protection& p) {
    const auto line = [](std::int64_t k) {
        const auto c = runtime::failure_cost({k, 1.0, 1.0, 0.0});
        char text[256];
        std::snprintf(text, sizeof text,
                      "k = %lld: restore + %.1f steps replayed (%lld at worst); protection costs %.3g of a "
                      "snapshot's exposed time per step",
                      static_cast<long long>(k), c.expected_replayed_steps,
                      static_cast<long long>(c.worst_replayed_steps), c.overhead_ms_per_step);
        return std::string(text);
    };
    std::string out = "failure cost   estimate per failure, ";
    if (p.every_auto())
        out += "from " + line(1) + "\n               to " + line(p.max_every);
    else
        out += line(p.every);
    return out + "\n               (assumes a failure at a uniformly random step; step and snapshot times are not "
                 "known before the job runs: the summary gives the cost in ms from what it measured)\n";
}

std::string replay_check_text(const config::Protection& p) {
    if (!p.probes_replay()) return {};
    const std::int64_t steps = p.every_auto() ? runtime::auto_start_every(p.max_every) : p.every;
    return "replay check   at start: the first " + std::to_string(steps) + " steps run twice, and a trainer whose replay is not "
           "bitwise exact is refused (exit 78; protection.replay_check: off skips it)\n";
}

void print_dry_run(const LaunchPlan& plan, bool resume, std::ostream& out) {
    const auto& cfg = plan.cfg;
    const auto& job = cfg.job;
    const auto& layout = plan.layout;
    out << "flashrec-launch: dry run of " << plan.config_path.string() << " (nothing is started)\n\n";
    out << "job          " << job.name << ": " << job.steps << " steps, seed " << job.seed << "\n";
    out << "shape        dp " << job.dp << " x tp " << job.tp << " x pp " << job.pp << " = "
        << job.world_size() << " active rank" << (job.world_size() == 1 ? "" : "s") << ", placement "
        << job.placement << "\n";
    out << "nodes        " << job.nodes << " x " << job.ranks_per_node << " rank"
        << (job.ranks_per_node == 1 ? "" : "s")
        << (layout.slurm           ? " (Slurm job " + plan.allocation->job_id + ", nodes " + plan.allocation->nodelist + ")"
            : layout.virtual_nodes ? " (virtual nodes on this machine, " + plan.local_host + ")"
                                   : " (this machine, " + plan.local_host + ")")
        << "\n";
    out << "hot spares   " << job.hot_spares << "\n";
    out << "spare nodes  " << job.spare_nodes << "\n";
    out << "processes    " << plan.process_count()
        << (plan.direct ? " (srun --ntasks " : " (mpirun -n ") << plan.process_count() << ")\n\n";
    out << "layout\n  rank  node          role\n";
    char row[256];
    for (const auto& p : layout.processes) {
        std::snprintf(row, sizeof row, "  %-5d %-13s %s%s\n", p.rank, p.node.c_str(), p.role.c_str(),
                      p.spare ? "  (hot spare)" : "");
        out << row;
    }
    for (const auto& n : layout.reserve_nodes) {
        std::snprintf(row, sizeof row, "  %-5s %-13s %s\n", "-", n.c_str(), "(spare node: reserved, empty)");
        out << row;
    }
    LaunchKind kind;
    kind.resume = resume;
    kind.faults = plan.faults;
    if (layout.slurm) {
        out << "\nlaunch mode    " << (plan.direct ? "srun (direct launch, no mpirun)" : "mpirun (PRRTE)")
            << " (slurm.launch: " << cfg.slurm.launch
            << (cfg.slurm.launch == "auto" ? (plan.direct ? ": no spawned spares, no launch.mpirun_args"
                                                          : ": mpirun, for recovery.spawn or launch.mpirun_args")
                                           : "")
            << ")\n";
        out << "\nhostfile (" << plan.hostfile_path().string()
            << (plan.direct ? ", SLURM_HOSTFILE for srun --distribution arbitrary" : ", --map-by seq")
            << ": line i is rank i's node)\n  "
            << std::regex_replace(layout.hostfile(), std::regex("\n(?!$)"), "\n  ");
    }
    out << "\ncommand\n  " << shell_join(plan.command(kind, layout)) << "\n";
    LaunchKind again = kind;
    again.relaunch = true;
    again.resume = false;
    out << "warm relaunch (tier 2) runs\n  " << ft::env::kRelaunch << "=1 " << shell_join(plan.command(again, layout)) << "\n";
    std::string why;
    const auto flags = wrapper_flags(plan.wrapper, why, plan.wrapper_variables());
    if (plan.direct)
        // srun gets none of them: they are the tasks' OMPI_MCA_* variables below.
        out << "MPI flags (read from " << plan.wrapper << "; direct launch: srun gets none, the tasks get them as "
            << "the OMPI_MCA_* variables below)\n  ";
    else
        out << "mpirun flags (" << plan.wrapper << " adds them)\n  ";
    out << (flags ? shell_join(*flags) : "(could not be read: " + why + ")") << "\n";
    out << "environment of the ranks\n"
        << "  " << ft::env::kControl << "=" << cfg.detection.bind << ":"
        << (cfg.detection.port ? std::to_string(cfg.detection.port) : "<port chosen at launch>") << "\n"
        << "  " << ft::env::kToken << "=<32 hex digits, new for every launch>\n"
        << "  " << ft::env::kLaunchId << "=<16 hex digits, tags the job's processes>\n";
    for (const auto& [name, value] : plan.rank_variables(kind, layout)) out << "  " << name << "=" << value << "\n";
    out << "\n";
    if (!plan.btl_if.empty())
        out << "MPI network    " << ft::env::kBtlIf << "=" << plan.btl_if << " (unset: the subnet of the route to another node)\n";
    out << "MPI transport  " << cfg.mpi.transport << (cfg.mpi.transport == "auto" ? " = shm" : "")
        << (cfg.mpi.transport == "tcp" ? std::string()
            : cfg.mpi.detector          ? ", in-band detector every " + std::to_string(cfg.mpi.detector_period_ms) +
                                              " ms, timeout " + std::to_string(cfg.mpi.detector_timeout_ms) + " ms"
                                        : ", exits reported by PRRTE's notices (mpi.detector off)")
        << " (mpi.transport; " << ft::env::kTransport << " overrides; the " << (plan.direct ? "MPI" : "mpirun")
        << " flags above)\n";
    out << "NCCL           " << (*built_nccl_version() ? built_nccl_version() : "none (built without CUDA)")
        << " (the version this flashrec was built against; docs/gpu.md, \"Which NCCL\")\n";
    out << "control plane  " << cfg.detection.bind << ":" << cfg.detection.port << ", heartbeat "
        << cfg.detection.heartbeat_ms << " ms, hang timeout " << cfg.detection.hang_timeout_ms << " ms\n";
    out << "metrics        "
        << (cfg.detection.metrics ? "on, port " + std::to_string(cfg.detection.metrics_port) : std::string("off"))
        << "\n";
    out << "event log      " << plan.events_path.string() << "\n";
    out << "protection     "
        << (cfg.protection.enabled
                ? interval_text(cfg.protection) + ", " + std::to_string(cfg.protection.replicas) +
                      " ring replica(s), " + cfg.protection.placement
                : std::string("off"))
        << "\n";
    if (cfg.protection.enabled) out << failure_cost_estimate(cfg.protection) << replay_check_text(cfg.protection);
    out << "recovery       in-job (tier 1) with " << job.hot_spares << " hot spare(s)"
        << (cfg.recovery.spawn ? " then spawn" : "") << "; up to " << cfg.recovery.warm_relaunches
        << " warm relaunch(es) (tier 2); HDF5 fallback (tier 3): "
        << (cfg.checkpoint.dir.empty() ? std::string("none (checkpoint.dir not set)")
                                       : cfg.checkpoint.dir + ", every " + std::to_string(cfg.checkpoint.every_steps) +
                                             " steps")
        << "\n";
    out << "\n" << format_timeout_table(timeout_table(cfg));
    if (!plan.faults.empty() || !cfg.faults.empty()) {
        out << "faults        ";
        for (const auto& f : cfg.faults) out << " " << f.text;
        for (const auto& f : plan.faults) out << " " << f;
        out << "\n";
    }
}

}  // namespace flashrec::launcher
