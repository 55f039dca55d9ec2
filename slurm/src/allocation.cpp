#include "flashrec/slurm/allocation.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <future>
#include <sstream>

namespace flashrec::slurm {
namespace {

std::string env_or(const char* name, const std::string& fallback = {}) {
    const char* v = std::getenv(name);
    return (v && *v) ? std::string(v) : fallback;
}

std::string trim(std::string_view s) {
    auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string_view::npos) return {};
    auto e = s.find_last_not_of(" \t\r\n");
    return std::string(s.substr(b, e - b + 1));
}

std::string one_line(const std::string& s) {
    std::string t = trim(s);
    for (char& c : t)
        if (c == '\n' || c == '\r') c = ' ';
    return t;
}

bool is_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// One host name as Slurm uses it in nodename=: no list syntax, nothing scontrol parses.
void check_node_name(const std::string& node) {
    bool ok = !node.empty() && node.size() <= 255 && is_alnum(node.front());
    for (char c : node) ok = ok && (is_alnum(c) || c == '-' || c == '_' || c == '.');
    if (!ok)
        throw SlurmError("invalid node name '" + node +
                         "': expected one host name of letters, digits, '-', '_', '.'");
}

void check_job_id(const std::string& job_id) {
    // 123, array task 123_4, het component 123+1.
    bool ok = !job_id.empty() && is_alnum(job_id.front());
    int separators = 0;
    for (char c : job_id) {
        if (c == '_' || c == '+')
            ++separators;
        else
            ok = ok && c >= '0' && c <= '9';
    }
    if (!ok || separators > 1 || job_id.back() == '_' || job_id.back() == '+')
        throw SlurmError("invalid Slurm job id '" + job_id + "': expected digits, e.g. 1234 or 1234_5");
}

CommandResult run_scontrol(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
    require_slurm_config();
    return run_command(argv, timeout);
}

void run_checked(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
    auto r = run_scontrol(argv, timeout);
    if (r.exit_code != 0)
        throw SlurmError(printable(argv) + " failed (exit " + std::to_string(r.exit_code) +
                         "): " + one_line(r.err.empty() ? r.out : r.err));
}

}  // namespace

bool in_allocation() {
    return !env_or("SLURM_JOB_ID", env_or("SLURM_JOBID")).empty() &&
           !env_or("SLURM_JOB_NODELIST", env_or("SLURM_NODELIST")).empty();
}

std::vector<std::string> expand_nodelist(const std::string& list, std::chrono::milliseconds timeout) {
    const std::string l = trim(list);
    if (l.empty()) return {};
    // Hostlist syntax only; a leading '-' would reach scontrol as an option.
    bool ok = is_alnum(l.front());
    for (char c : l)
        ok = ok && (is_alnum(c) || c == '-' || c == '_' || c == '.' || c == ',' || c == '[' || c == ']');
    if (!ok) throw SlurmError("invalid Slurm node list '" + list + "'");

    const std::vector<std::string> argv{"scontrol", "show", "hostnames", l};
    auto r = run_scontrol(argv, timeout);
    if (r.exit_code != 0)
        throw SlurmError("cannot expand node list '" + l + "': " + printable(argv) + " failed (exit " +
                         std::to_string(r.exit_code) + "): " + one_line(r.err));
    std::vector<std::string> nodes;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
        if (auto n = trim(line); !n.empty()) nodes.push_back(std::move(n));
    }
    if (nodes.empty())
        throw SlurmError("cannot expand node list '" + l + "': " + printable(argv) + " printed no hosts");
    return nodes;
}

Allocation split_nodes(std::vector<std::string> nodes, int active_nodes, int spare_nodes) {
    if (active_nodes < 1) throw SlurmError("active node count must be >= 1, got " + std::to_string(active_nodes));
    if (spare_nodes < 0) throw SlurmError("spare node count must be >= 0, got " + std::to_string(spare_nodes));
    const auto need = static_cast<std::size_t>(active_nodes) + static_cast<std::size_t>(spare_nodes);
    if (nodes.size() < need)
        throw SlurmError("the allocation has " + std::to_string(nodes.size()) + " node(s), but flashrec needs " +
                         std::to_string(need) + ": " + std::to_string(active_nodes) + " active + " +
                         std::to_string(spare_nodes) + " spare; submit with --nodes=" + std::to_string(need) +
                         " or lower nodes/spare_nodes in train.yaml");
    Allocation a;
    a.active.assign(nodes.begin(), nodes.begin() + active_nodes);
    a.spare.assign(nodes.begin() + active_nodes, nodes.end());
    a.nodes = std::move(nodes);
    return a;
}

Allocation read_allocation(int active_nodes, int spare_nodes) {
    const std::string job_id = env_or("SLURM_JOB_ID", env_or("SLURM_JOBID"));
    const std::string nodelist = env_or("SLURM_JOB_NODELIST", env_or("SLURM_NODELIST"));
    if (job_id.empty() || nodelist.empty())
        throw SlurmError("not inside a Slurm allocation: SLURM_JOB_ID and SLURM_JOB_NODELIST are not set "
                         "(run under sbatch/salloc, or without Slurm on one machine)");
    Allocation a = split_nodes(expand_nodelist(nodelist), active_nodes, spare_nodes);
    a.job_id = job_id;
    a.job_name = env_or("SLURM_JOB_NAME");
    a.nodelist = nodelist;
    a.this_node = env_or("SLURMD_NODENAME");
    const std::string restarts = env_or("SLURM_RESTART_COUNT", "0");
    try {
        a.restart_count = std::stoi(restarts);
    } catch (const std::exception&) {
        throw SlurmError("SLURM_RESTART_COUNT is not a number: '" + restarts + "'");
    }
    return a;
}

std::vector<std::string> job_nodes(const std::string& job_id, std::chrono::milliseconds timeout) {
    check_job_id(job_id);
    const std::vector<std::string> argv{"scontrol", "show", "job", "--oneliner", job_id};
    auto r = run_scontrol(argv, timeout);
    if (r.exit_code != 0)
        throw SlurmError(printable(argv) + " failed (exit " + std::to_string(r.exit_code) +
                         "): " + one_line(r.err));
    // "JobId=7 JobName=... NodeList=frnode[1-2,4] BatchHost=frnode1 ...": the exact key,
    // not ReqNodeList=/ExcNodeList=.
    std::istringstream in(r.out);
    for (std::string tok; in >> tok;) {
        if (tok.rfind("NodeList=", 0) == 0) {
            std::string list = tok.substr(9);
            if (list == "(null)") return {};
            return expand_nodelist(list, timeout);
        }
    }
    throw SlurmError(printable(argv) + " printed no NodeList=: " + one_line(r.out));
}

std::string format_reason(std::string_view tmpl, const std::map<std::string, std::string>& fields) {
    std::string out;
    for (std::size_t i = 0; i < tmpl.size(); ++i) {
        char c = tmpl[i];
        if (c == '{' && i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
            out += '{';
            ++i;
        } else if (c == '}' && i + 1 < tmpl.size() && tmpl[i + 1] == '}') {
            out += '}';
            ++i;
        } else if (c == '{') {
            auto close = tmpl.find('}', i);
            if (close == std::string_view::npos)
                throw SlurmError("drain reason template '" + std::string(tmpl) + "': unclosed '{'");
            std::string name(tmpl.substr(i + 1, close - i - 1));
            auto it = fields.find(name);
            if (it == fields.end()) {
                std::string known;
                for (const auto& [k, v] : fields) known += (known.empty() ? "" : ", ") + k;
                throw SlurmError("drain reason template '" + std::string(tmpl) + "': unknown field {" + name +
                                 "} (known: " + known + ")");
            }
            out += it->second;
            i = close;
        } else {
            out += c;
        }
    }
    for (char& ch : out) {
        if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = ' ';
        if (ch == '"') ch = '\'';
    }
    out = trim(out);
    if (out.size() > 200) out.resize(200);
    return out;
}

std::string drain_reason(std::string_view tmpl, const std::string& classification, long long step,
                         const std::string& node, const std::string& job_id) {
    return format_reason(tmpl, {{"classification", classification},
                                {"step", std::to_string(step)},
                                {"node", node},
                                {"job", job_id}});
}

std::vector<std::string> probe_command(const std::string& job_id, const std::string& node) {
    check_job_id(job_id);
    check_node_name(node);
    return {"srun", "--jobid=" + job_id, "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=" + node, "--quiet",
            "true"};
}

std::vector<std::string> unreachable_nodes(const std::string& job_id, const std::vector<std::string>& nodes,
                                           std::chrono::milliseconds timeout, std::size_t at_once) {
    require_slurm_config();
    std::vector<std::vector<std::string>> probes;
    for (const auto& node : nodes) probes.push_back(probe_command(job_id, node));
    // Each prober takes the next node until none is left: at most `at_once` sruns at a time.
    std::vector<char> answered(nodes.size(), 0);
    std::atomic<std::size_t> next{0};
    const auto prober = [&] {
        for (std::size_t i; (i = next.fetch_add(1)) < probes.size();) {
            try {
                answered[i] = run_command(probes[i], timeout).exit_code == 0;
            } catch (const CommandTimedOut&) {
            }
        }
    };
    std::vector<std::future<void>> probers;
    for (std::size_t k = 0; k < std::min(std::max<std::size_t>(at_once, 1), probes.size()); ++k)
        probers.push_back(std::async(std::launch::async, prober));
    for (auto& p : probers) p.get();
    std::vector<std::string> out;
    for (std::size_t i = 0; i < nodes.size(); ++i)
        if (!answered[i]) out.push_back(nodes[i]);
    return out;
}

std::vector<std::string> kill_task_command(const std::string& job_id, const std::string& node, int pid) {
    check_job_id(job_id);
    check_node_name(node);
    if (pid <= 1) throw SlurmError("killing a task on " + node + ": " + std::to_string(pid) + " is no process id of a task");
    // The environment of a process of another user cannot be read: not ours either.
    static const std::string script =
        "[ -e /proc/$1 ] || exit " + std::to_string(kTaskGone) + "\n"
        "tr '\\0' '\\n' < /proc/$1/environ 2>/dev/null | grep -qx \"SLURM_JOB_ID=$2\" || exit " +
        std::to_string(kTaskNotOfJob) + "\n"
        "kill -KILL $1 2>/dev/null && exit " + std::to_string(kTaskKilled) + "\n"
        "exit " + std::to_string(kTaskGone) + "\n";
    return {"srun", "--jobid=" + job_id, "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=" + node, "--quiet",
            "/bin/sh", "-c", script, "flashrec-kill-task", std::to_string(pid), job_id};
}

std::string_view to_string(TaskKill result) {
    switch (result) {
        case TaskKill::killed: return "killed";
        case TaskKill::gone: return "gone";
        case TaskKill::not_of_job: return "not_of_job";
        case TaskKill::unreachable: return "unreachable";
    }
    return "?";
}

TaskKill kill_task(const std::string& job_id, const std::string& node, int pid, std::chrono::milliseconds timeout) {
    const auto argv = kill_task_command(job_id, node, pid);
    require_slurm_config();
    try {
        switch (run_command(argv, timeout).exit_code) {
            case kTaskKilled: return TaskKill::killed;
            case kTaskGone: return TaskKill::gone;
            case kTaskNotOfJob: return TaskKill::not_of_job;
            default: return TaskKill::unreachable;
        }
    } catch (const CommandTimedOut&) {
        return TaskKill::unreachable;
    }
}

std::vector<std::string> drain_command(const std::string& node, const std::string& reason) {
    check_node_name(node);
    if (trim(reason).empty()) throw SlurmError("draining " + node + ": Slurm requires a reason, got an empty one");
    return {"scontrol", "update", "nodename=" + node, "state=drain", "reason=" + reason};
}

void drain_node(const std::string& node, const std::string& reason, std::chrono::milliseconds timeout) {
    run_checked(drain_command(node, reason), timeout);
}

std::vector<std::string> resume_command(const std::string& node) {
    check_node_name(node);
    return {"scontrol", "update", "nodename=" + node, "state=resume"};
}

std::vector<std::string> requeue_command(const std::string& job_id) {
    check_job_id(job_id);
    return {"scontrol", "requeue", job_id};
}

void requeue_job(const std::string& job_id, std::chrono::milliseconds timeout) {
    run_checked(requeue_command(job_id), timeout);
}

}  // namespace flashrec::slurm
