// flashrec-slurm: the Slurm building blocks of flashrec (flashrec/slurm/allocation.hpp) as a
// command, for tests, operators and job scripts. Same code the launcher calls.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "flashrec/slurm/allocation.hpp"

namespace fs = flashrec::slurm;

namespace {

constexpr const char* usage_text =
    "usage: flashrec-slurm <command> [args]\n"
    "  expand <nodelist>                      one host per line (scontrol show hostnames)\n"
    "  allocation <active_nodes> <spare_nodes> this job's nodes, split into active and spare\n"
    "  job-nodes <job_id>                     the nodes the job holds now (scontrol show job)\n"
    "  reason [--template T] key=value...     format a drain reason (default template:\n"
    "                                         \"flashrec: {classification} at step {step}\")\n"
    "  drain <node> <reason>                  scontrol update nodename=<node> state=drain reason=<reason>\n"
    "  drain <node> --classification C --step N [--template T]\n"
    "  resume <node>                          undo a drain\n"
    "  requeue <job_id>                       scontrol requeue <job_id>\n"
    "  print-drain|print-requeue ...          print the command line instead of running it\n"
    "Slurm clients need SLURM_CONF (or /etc/slurm/slurm.conf).\n";

[[noreturn]] void usage() {
    std::fputs(usage_text, stderr);
    std::exit(2);
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
    return s;
}

// "--template T key=value..." -> the formatted reason.
std::string reason_from(const std::vector<std::string>& args, std::size_t from) {
    std::string tmpl(fs::default_reason_template);
    std::map<std::string, std::string> fields;
    for (std::size_t i = from; i < args.size(); ++i) {
        const std::string& a = args[i];
        if ((a == "--template" || a == "--classification" || a == "--step") && i + 1 < args.size()) {
            if (a == "--template")
                tmpl = args[++i];
            else
                fields[a.substr(2)] = args[++i];
        } else if (auto eq = a.find('='); eq != std::string::npos && eq > 0) {
            fields[a.substr(0, eq)] = a.substr(eq + 1);
        } else {
            usage();
        }
    }
    return fs::format_reason(tmpl, fields);
}

int to_int(const std::string& s, const char* what) {
    try {
        std::size_t used = 0;
        int v = std::stoi(s, &used);
        if (used == s.size()) return v;
    } catch (const std::exception&) {
    }
    throw fs::SlurmError(std::string(what) + " must be an integer, got '" + s + "'");
}

int run(const std::vector<std::string>& a) {
    if (a.empty()) usage();
    const std::string& cmd = a[0];
    auto need = [&](std::size_t n) {
        if (a.size() < n + 1) usage();
    };
    if (cmd == "expand") {
        need(1);
        for (const auto& n : fs::expand_nodelist(a[1])) std::printf("%s\n", n.c_str());
    } else if (cmd == "allocation") {
        need(2);
        auto al = fs::read_allocation(to_int(a[1], "active_nodes"), to_int(a[2], "spare_nodes"));
        std::printf("job_id=%s\njob_name=%s\nnodelist=%s\nnodes=%s\n", al.job_id.c_str(), al.job_name.c_str(),
                    al.nodelist.c_str(), join(al.nodes).c_str());
        std::printf("active=%s\nspare=%s\nthis_node=%s\nrestart_count=%d\n", join(al.active).c_str(),
                    join(al.spare).c_str(), al.this_node.c_str(), al.restart_count);
    } else if (cmd == "job-nodes") {
        need(1);
        for (const auto& n : fs::job_nodes(a[1])) std::printf("%s\n", n.c_str());
    } else if (cmd == "reason") {
        std::printf("%s\n", reason_from(a, 1).c_str());
    } else if (cmd == "drain" || cmd == "print-drain") {
        need(2);
        std::string reason = (a[2].rfind("--", 0) == 0) ? reason_from(a, 2) : a[2];
        if (a.size() > 3 && a[2].rfind("--", 0) != 0) usage();
        if (cmd == "print-drain") {
            std::printf("%s\n", fs::printable(fs::drain_command(a[1], reason)).c_str());
        } else {
            fs::drain_node(a[1], reason);
            std::printf("drained %s: %s\n", a[1].c_str(), reason.c_str());
        }
    } else if (cmd == "resume") {
        need(1);
        auto argv = fs::resume_command(a[1]);
        fs::require_slurm_config();
        auto r = fs::run_command(argv, fs::default_timeout);
        if (r.exit_code != 0) throw fs::SlurmError(fs::printable(argv) + " failed: " + r.err);
        std::printf("resumed %s\n", a[1].c_str());
    } else if (cmd == "requeue" || cmd == "print-requeue") {
        need(1);
        if (cmd == "print-requeue") {
            std::printf("%s\n", fs::printable(fs::requeue_command(a[1])).c_str());
        } else {
            fs::requeue_job(a[1]);
            std::printf("requeued %s\n", a[1].c_str());
        }
    } else {
        usage();
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
        std::fputs(usage_text, stdout);
        return 0;
    }
    try {
        return run(args);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "flashrec-slurm: error: %s\n", e.what());
        return 1;
    }
}
