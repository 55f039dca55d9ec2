// train.yaml: read with yaml-cpp, then checked field by field against docs/config.md.
// Every error is a ConfigError naming the file, the 1-based line and the dotted field.
#include "flashrec/runtime/config.hpp"
#include "flashrec/runtime/interval_choice.hpp"

#include "flashrec/slurm/allocation.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "flashrec/errors.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/slurm/allocation.hpp"

namespace flashrec::config {
namespace {

constexpr std::int64_t kNoMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kNoMax = std::numeric_limits<std::int64_t>::max();

constexpr std::array<std::string_view, 13> kPhaseNames = {
    "forward",     "allreduce",        "sync",     "optimizer",  "replication", "recovery", "tp_exchange",
    "pp_exchange", "protection_start", "loop_end", "after_loop", "finish",      "finalize"};
constexpr std::array<std::string_view, 3> kActionNames = {"kill", "exit", "stop"};
constexpr std::array<std::string_view, 2> kJobPlacements = {"block", "cyclic"};
constexpr std::array<std::string_view, 2> kProtectionPlacements = {"node-aware", "ring"};
constexpr std::array<std::string_view, 2> kReplayChecks = {"start", "off"};
constexpr std::array<std::string_view, 2> kSparePolicies = {"shrink", "checkpoint-and-requeue"};
constexpr std::array<std::string_view, 3> kYieldChoices = {"auto", "true", "false"};
constexpr std::array<std::string_view, 3> kNcclRepairs = {"auto", "shrink_grow", "reinit"};
constexpr std::array<std::string_view, 3> kSlurmLaunchModes = {"mpirun", "srun", "auto"};
constexpr std::array<std::string_view, 3> kTransports = {"tcp", "shm", "auto"};

// Transports flashrec knows and refuses, and why: a ConfigError before launch, not a job that
// loses every survivor at its first failure (docs/ulfm-traps.md trap 12, docs/limitations.md).
std::optional<std::string> refused_transport(std::string_view value) {
    if (value != "ofi") return std::nullopt;
    return "is 'ofi', which Open MPI 5.0.10 cannot run fault-tolerantly: btl ofi ends the whole process on any "
           "completion-queue error, and a dead peer's unfinished sends give one (every survivor of a SIGKILL exited 1, "
           "'BTL OFI will now abort'); mtl ofi needs pml cm, which ULFM disables (docs/ulfm-traps.md trap 12). "
           "Use tcp, shm or auto";
}
constexpr std::array<std::string_view, 4> kLogLevels = {"debug", "info", "warn", "error"};

// yaml-cpp counts lines from 0 and uses -1 for "no position"; messages count from 1, 0 = none.
int line_of(const YAML::Node& node) { return node.Mark().line + 1; }

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

// What the user wrote, for the "got ..." part of a message.
std::string describe(const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Scalar:
            return in_quotes(node.Scalar());
        case YAML::NodeType::Sequence:
            return "a list";
        case YAML::NodeType::Map:
            return "a map";
        default:
            return "nothing";
    }
}

template <class Names>
std::string join(const Names& names, std::string_view separator = ", ") {
    std::string out;
    for (const auto& name : names) out += (out.empty() ? "" : std::string(separator)) + std::string(name);
    return out;
}

std::string lower(std::string_view text) {
    std::string out(text);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {  // Levenshtein, two rows
    std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) previous[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        current[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j)
            current[j] = std::min(
                {previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        std::swap(previous, current);
    }
    return previous[b.size()];
}

// " (did you mean 'x'?)" for the closest known name within edit distance 2, else "".
template <class Names>
std::string did_you_mean(std::string_view word, const Names& known, std::string_view prefix = "") {
    std::string best;
    std::size_t best_distance = 3;
    for (const auto& name : known) {
        const auto distance = edit_distance(lower(word), lower(name));
        if (distance < best_distance) best = std::string(name), best_distance = distance;
    }
    return best.empty() ? "" : " (did you mean " + in_quotes(std::string(prefix) + best) + "?)";
}

template <class Names>
std::string one_of(std::string_view got, const Names& allowed) {
    return "must be one of " + join(allowed) + "; got " + in_quotes(got) + did_you_mean(got, allowed);
}

// One setting of a section: its yaml key, where it goes, and what values it accepts.
template <class Section>
struct Field {
    const char* key;
    std::variant<int Section::*, std::int64_t Section::*, std::uint64_t Section::*, bool Section::*,
                 std::string Section::*, std::vector<std::string> Section::*, double Section::*>
        member;
    std::int64_t min = kNoMin, max = kNoMax;         // integers
    std::span<const std::string_view> choices = {};  // strings: the allowed values, when limited
    bool size = false;                               // an integer that may carry a KiB/MiB/GiB suffix
    const char* word = nullptr;                      // an integer that may also be this word ...
    std::int64_t word_value = 0;                     // ... which stands for this value
    std::optional<std::string> (*refused)(std::string_view) = nullptr;  // strings: why a known value is refused
};

const std::vector<Field<Job>>& job_fields() {
    static const std::vector<Field<Job>> fields = {
        {.key = "name", .member = &Job::name},
        {.key = "nodes", .member = &Job::nodes, .min = 1},
        {.key = "ranks_per_node", .member = &Job::ranks_per_node, .min = 1},
        {.key = "dp", .member = &Job::dp, .min = 1},
        {.key = "tp", .member = &Job::tp, .min = 1},
        {.key = "pp", .member = &Job::pp, .min = 1},
        {.key = "spare_nodes", .member = &Job::spare_nodes, .min = 0},
        {.key = "hot_spares", .member = &Job::hot_spares, .min = 0},
        {.key = "steps", .member = &Job::steps, .min = 1},
        {.key = "seed", .member = &Job::seed},
        {.key = "placement", .member = &Job::placement, .choices = kJobPlacements},
    };
    return fields;
}
const std::vector<Field<Launch>>& launch_fields() {
    static const std::vector<Field<Launch>> fields = {
        {.key = "program", .member = &Launch::program},
        {.key = "args", .member = &Launch::args},
        {.key = "mpirun_args", .member = &Launch::mpirun_args},
    };
    return fields;
}
const std::vector<Field<Protection>>& protection_fields() {
    static const std::vector<Field<Protection>> fields = {
        {.key = "enabled", .member = &Protection::enabled},
        {.key = "replicas", .member = &Protection::replicas, .min = 0},  // >= 1 when enabled
        {.key = "placement", .member = &Protection::placement, .choices = kProtectionPlacements},
        {.key = "chunk_bytes", .member = &Protection::chunk_bytes, .min = 1, .size = true},
        {.key = "thread_nice", .member = &Protection::thread_nice, .min = 0, .max = 19},
        {.key = "device_hash", .member = &Protection::device_hash},
        {.key = "every", .member = &Protection::every, .min = 1, .word = "auto", .word_value = Protection::kAuto},
        {.key = "max_every", .member = &Protection::max_every, .min = 4, .max = runtime::kMaxEveryLimit},
        {.key = "overhead_budget", .member = &Protection::overhead_budget},
        {.key = "replay_check", .member = &Protection::replay_check, .choices = kReplayChecks},
    };
    return fields;
}
const std::vector<Field<Checkpoint>>& checkpoint_fields() {
    static const std::vector<Field<Checkpoint>> fields = {
        {.key = "dir", .member = &Checkpoint::dir},
        {.key = "every_steps", .member = &Checkpoint::every_steps, .min = 0},
        {.key = "keep", .member = &Checkpoint::keep, .min = 1},
    };
    return fields;
}
const std::vector<Field<Detection>>& detection_fields() {
    static const std::vector<Field<Detection>> fields = {
        {.key = "heartbeat_ms", .member = &Detection::heartbeat_ms, .min = 1},
        {.key = "hang_timeout_ms", .member = &Detection::hang_timeout_ms, .min = 1},
        {.key = "startup_timeout_ms", .member = &Detection::startup_timeout_ms, .min = 1000},
        {.key = "bind", .member = &Detection::bind},
        {.key = "port", .member = &Detection::port, .min = 0, .max = 65535},
        {.key = "metrics", .member = &Detection::metrics},
        {.key = "metrics_port", .member = &Detection::metrics_port, .min = 0, .max = 65535},
        {.key = "pass_on_losses", .member = &Detection::pass_on_losses},
        {.key = "node_timeout_ms", .member = &Detection::node_timeout_ms, .min = 1},
    };
    return fields;
}
const std::vector<Field<Mpi>>& mpi_fields() {
    static const std::vector<Field<Mpi>> fields = {
        {.key = "transport", .member = &Mpi::transport, .choices = kTransports, .refused = refused_transport},
        {.key = "detector", .member = &Mpi::detector},
        {.key = "yield_when_idle", .member = &Mpi::yield_when_idle, .choices = kYieldChoices},
        {.key = "detector_period_ms", .member = &Mpi::detector_period_ms, .min = 1},
        {.key = "detector_timeout_ms", .member = &Mpi::detector_timeout_ms, .min = 1},
    };
    return fields;
}
const std::vector<Field<Recovery>>& recovery_fields() {
    static const std::vector<Field<Recovery>> fields = {
        {.key = "phase_deadline_ms", .member = &Recovery::phase_deadline_ms, .min = 1},
        {.key = "max_epochs", .member = &Recovery::max_epochs, .min = 1},
        {.key = "spawn", .member = &Recovery::spawn},
        {.key = "warm_relaunches", .member = &Recovery::warm_relaunches, .min = 0},
        {.key = "require_same_platform", .member = &Recovery::require_same_platform},
        {.key = "nccl_repair", .member = &Recovery::nccl_repair, .choices = kNcclRepairs},
    };
    return fields;
}
const std::vector<Field<Slurm>>& slurm_fields() {
    static const std::vector<Field<Slurm>> fields = {
        {.key = "drain_on_failure", .member = &Slurm::drain_on_failure},
        {.key = "drain_reason", .member = &Slurm::drain_reason},
        {.key = "when_spares_exhausted", .member = &Slurm::when_spares_exhausted, .choices = kSparePolicies},
        {.key = "launch", .member = &Slurm::launch, .choices = kSlurmLaunchModes},
    };
    return fields;
}
const std::vector<Field<Logging>>& logging_fields() {
    static const std::vector<Field<Logging>> fields = {
        {.key = "level", .member = &Logging::level, .choices = kLogLevels},
        {.key = "events", .member = &Logging::events},
        {.key = "progress", .member = &Logging::progress},
    };
    return fields;
}

template <class Section>
std::vector<std::string> keys_of(const std::vector<Field<Section>>& fields) {
    std::vector<std::string> keys;
    for (const auto& field : fields) keys.emplace_back(field.key);
    return keys;
}

const std::vector<std::string> kSections = {"job",       "launch",   "trainer", "protection", "checkpoint",
                                            "detection", "mpi",      "recovery", "slurm",      "logging",
                                            "faults"};
const std::vector<std::string> kFaultKeys = {"role", "step", "phase", "action"};

// Every section's keys, to say where a misplaced key belongs.
const std::map<std::string, std::vector<std::string>>& section_keys() {
    static const std::map<std::string, std::vector<std::string>> keys = {
        {"job", keys_of(job_fields())},
        {"launch", keys_of(launch_fields())},
        {"protection", keys_of(protection_fields())},
        {"checkpoint", keys_of(checkpoint_fields())},
        {"detection", keys_of(detection_fields())},
        {"mpi", keys_of(mpi_fields())},
        {"recovery", keys_of(recovery_fields())},
        {"slurm", keys_of(slurm_fields())},
        {"logging", keys_of(logging_fields())},
    };
    return keys;
}

// Decimal integer, whole text; nullopt when it is not one, `out_of_range` when it overflows T.
template <class T>
std::optional<T> to_integer(std::string_view text, bool& out_of_range) {
    T value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    out_of_range = error == std::errc::result_out_of_range;
    if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return value;
}

// "4194304", "4MiB", "4 MiB": bytes, or a count of KiB/MiB/GiB.
std::optional<std::int64_t> to_size(std::string_view text, bool& out_of_range) {
    const auto digits_end = std::min(text.find_first_not_of("0123456789"), text.size());
    auto suffix = text.substr(digits_end);
    suffix.remove_prefix(std::min(suffix.find_first_not_of(' '), suffix.size()));
    static const std::map<std::string_view, std::int64_t> units = {{"", 1},
                                                                   {"KiB", std::int64_t{1} << 10},
                                                                   {"MiB", std::int64_t{1} << 20},
                                                                   {"GiB", std::int64_t{1} << 30}};
    const auto unit = units.find(suffix);
    auto count = to_integer<std::int64_t>(text.substr(0, digits_end), out_of_range);
    if (!count || unit == units.end()) return std::nullopt;
    if (*count > kNoMax / unit->second) {
        out_of_range = true;
        return std::nullopt;
    }
    return *count * unit->second;
}

// A wrong part of one fault spec; the caller says where the spec came from.
struct BadFault {
    std::string part;  // role, step, phase, action; empty for the spec as a whole
    std::string problem;
};

// Sets one `key=value` part of a fault; `seen` catches a part given twice.
void set_fault_part(Fault& fault, const std::string& key, const std::string& value,
                    std::vector<std::string>& seen) {
    if (std::find(kFaultKeys.begin(), kFaultKeys.end(), key) == kFaultKeys.end())
        throw BadFault{"", "unknown part " + in_quotes(key) + did_you_mean(key, kFaultKeys) + "; parts are " +
                               join(kFaultKeys)};
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) throw BadFault{key, "is given twice"};
    seen.push_back(key);
    bool out_of_range = false;
    if (key == "role") {
        const std::string shape = "must be <dp>, <dp>,<tp>,<pp> or spare:<i>, got " + in_quotes(value);
        if (value.starts_with("spare:")) {
            const auto index = to_integer<int>(std::string_view(value).substr(6), out_of_range);
            if (!index || *index < 0) throw BadFault{key, shape};
            fault.spare = true;
            fault.spare_index = *index;
            return;
        }
        std::vector<int> coordinates;
        std::stringstream parts(value);
        for (std::string part; std::getline(parts, part, ',');) {
            const auto coordinate = to_integer<int>(part, out_of_range);
            if (!coordinate || *coordinate < 0) throw BadFault{key, shape};
            coordinates.push_back(*coordinate);
        }
        if ((coordinates.size() != 1 && coordinates.size() != 3) || value.ends_with(','))
            throw BadFault{key, shape};
        fault.dp = coordinates[0];
        if (coordinates.size() == 3) {
            fault.tp = coordinates[1];
            fault.pp = coordinates[2];
        }
    } else if (key == "step") {
        const auto step = to_integer<std::int64_t>(value, out_of_range);
        if (!step || *step < 0)
            throw BadFault{key, "must be a non-negative integer, got " + in_quotes(value)};
        fault.step = *step;
    } else if (key == "phase") {
        const auto it = std::find(kPhaseNames.begin(), kPhaseNames.end(), value);
        if (it == kPhaseNames.end()) throw BadFault{key, one_of(value, kPhaseNames)};
        fault.phase = static_cast<Phase>(it - kPhaseNames.begin());
    } else {  // action: kill | stop | exit | exit=<code>
        const auto name = value.substr(0, value.find('='));
        const auto it = std::find(kActionNames.begin(), kActionNames.end(), name);
        if (it == kActionNames.end())
            throw BadFault{key, one_of(value, std::array{"kill", "exit", "exit=<code>", "stop"})};
        fault.action = static_cast<Action>(it - kActionNames.begin());
        if (name.size() < value.size()) {
            const auto code = to_integer<int>(std::string_view(value).substr(name.size() + 1), out_of_range);
            if (fault.action != Action::exit)
                throw BadFault{key, in_quotes(name) + " takes no value, got " + in_quotes(value)};
            if (!code || *code < 0 || *code > 255)
                throw BadFault{key, "exit code must be between 0 and 255, got " + in_quotes(value)};
            fault.exit_code = *code;
        }
    }
}

// "'<spec>': <part> <problem>", for errors about a fault written as one string.
std::string spec_problem(const std::string& spec, const BadFault& bad) {
    return in_quotes(spec) + ": " + (bad.part.empty() ? "" : bad.part + " ") + bad.problem;
}

void require_fault_parts(const std::vector<std::string>& seen) {
    for (const auto* part : {"role", "step"})
        if (std::find(seen.begin(), seen.end(), part) == seen.end()) throw BadFault{part, "is missing"};
}

// The --fault grammar. Parts split at ':', except that role=spare:<i> holds one itself.
Fault fault_from_spec(const std::string& spec) {
    Fault fault;
    fault.text = spec;
    if (spec.empty()) throw BadFault{"", "empty fault spec"};
    std::vector<std::string> tokens;
    std::stringstream parts(spec);
    for (std::string token; std::getline(parts, token, ':');) tokens.push_back(token);
    if (spec.ends_with(':')) tokens.emplace_back();
    std::vector<std::string> seen;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const auto equals = tokens[i].find('=');
        if (equals == std::string::npos) throw BadFault{"", in_quotes(tokens[i]) + " is not <key>=<value>"};
        const auto key = tokens[i].substr(0, equals);
        auto value = tokens[i].substr(equals + 1);
        if (key == "role" && value == "spare") {
            if (i + 1 == tokens.size() || tokens[i + 1].find('=') != std::string::npos)
                throw BadFault{"role", "spare needs an index: role=spare:<i>"};
            value += ":" + tokens[++i];
        }
        set_fault_part(fault, key, value, seen);
    }
    require_fault_parts(seen);
    return fault;
}

std::string role_text(const Fault& fault) {
    return fault.spare
               ? "spare:" + std::to_string(fault.spare_index)
               : std::to_string(fault.dp) + "," + std::to_string(fault.tp) + "," + std::to_string(fault.pp);
}

// Why a fault's role does not exist in this job, or nullopt when it does.
std::optional<std::string> role_outside(const Fault& fault, const Job& job) {
    if (fault.spare) {
        if (fault.spare_index < job.hot_spares) return std::nullopt;
        return "spare:" + std::to_string(fault.spare_index) +
               " is outside job.hot_spares = " + std::to_string(job.hot_spares) +
               (job.hot_spares > 0 ? " (valid: spare:0..spare:" + std::to_string(job.hot_spares - 1) + ")"
                                   : " (the job has no hot spares)");
    }
    const std::array<std::pair<const char*, std::pair<int, int>>, 3> axes = {
        {{"dp", {fault.dp, job.dp}}, {"tp", {fault.tp, job.tp}}, {"pp", {fault.pp, job.pp}}}};
    for (const auto& [axis, coordinate_and_size] : axes) {
        const auto [coordinate, size] = coordinate_and_size;
        if (coordinate >= size)
            return role_text(fault) + ": " + axis + " coordinate " + std::to_string(coordinate) +
                   " is outside job." + axis + " = " + std::to_string(size) + " (valid: 0.." +
                   std::to_string(size - 1) + ")";
    }
    return std::nullopt;
}

// Why a fault at a point after the last step names another step, or nullopt.
std::optional<std::string> step_outside(const Fault& fault, const Job& job) {
    if (fault.phase < Phase::loop_end || fault.step == job.steps - 1) return std::nullopt;
    return "phase " + std::string(kPhaseNames.at(static_cast<std::size_t>(fault.phase))) +
           " comes after the last step: its step must be job.steps - 1 = " + std::to_string(job.steps - 1) +
           ", got " + std::to_string(fault.step);
}

// A replication-phase fault fires while snapshot `step` is sent: with protection.every = k only
// multiples of k are, and a fault at another step would silently never fire.
// Under auto, the multiples of protection.max_every are the versions snapshotted whatever k is.
std::optional<std::string> replication_never_runs(const Fault& fault, const Protection& protection) {
    if (fault.phase != Phase::replication || fault.spare || fault.step % protection.period() == 0) return std::nullopt;
    if (protection.every_auto())
        return "phase replication fires while snapshot version <step> is replicated, and with protection.every = "
               "auto only multiples of protection.max_every = " + std::to_string(protection.max_every) +
               " are sure to be: got step " + std::to_string(fault.step);
    return "phase replication fires while snapshot version <step> is replicated, and with protection.every = " +
           std::to_string(protection.every) + " only multiples of it are: got step " + std::to_string(fault.step);
}

// Where each fault of the faults: list was written, to point at it after the job is known.
struct FaultOrigin {
    std::string field;   // faults[i] or, for the map form, faults[i].role
    std::string prefix;  // "'<spec>': role " for the string form, "" for the map form
    int line;
};

class Reader {
public:
    explicit Reader(std::string file) : file_(std::move(file)) {}

    [[noreturn]] void fail(int line, const std::string& field, const std::string& problem) const {
        throw ConfigError(file_, line, field, problem);
    }

    // The line a setting was written on; else its section's line; else 0 (no line).
    int line(const std::string& dotted) const {
        if (const auto it = lines_.find(dotted); it != lines_.end()) return it->second;
        if (const auto it = lines_.find(dotted.substr(0, dotted.find('.'))); it != lines_.end())
            return it->second;
        return 0;
    }
    bool given(const std::string& dotted) const { return lines_.contains(dotted); }

    // Calls fn(key, value, line) for each entry of a map, after rejecting non-name keys,
    // keys given twice and keys not in `known`.
    template <class Fn>
    void for_each_entry(const YAML::Node& map, const std::string& prefix,
                        const std::vector<std::string>& known, Fn&& fn) {
        for (const auto& entry : map) {
            const int at = line_of(entry.first);
            if (!entry.first.IsScalar())
                fail(at, prefix, "has a key that is not a name: " + describe(entry.first));
            const auto& key = entry.first.Scalar();
            const auto dotted = prefix.empty() ? key : prefix + "." + key;
            if (given(dotted))
                fail(at, dotted, "is given twice (first on line " + std::to_string(line(dotted)) + ")");
            if (std::find(known.begin(), known.end(), key) == known.end())
                fail(at, dotted, unknown_key(prefix, key, known));
            lines_[dotted] = at;
            fn(key, entry.second, at);
        }
    }

    template <class Section>
    void read_section(const YAML::Node& node, const std::string& section, Section& out,
                      const std::vector<Field<Section>>& fields) {
        if (node.IsNull()) return;  // "checkpoint:" with nothing under it: all defaults
        if (!node.IsMap()) fail(line(section), section, "must be a map of settings, got " + describe(node));
        for_each_entry(
            node, section, keys_of(fields), [&](const std::string& key, const YAML::Node& value, int at) {
                const auto& field =
                    *std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.key == key; });
                std::visit(
                    [&](auto member) { read_value(out.*member, field, value, section + "." + key, at); },
                    field.member);
            });
    }

    std::vector<FaultOrigin> read_faults(const YAML::Node& node, std::vector<Fault>& faults) {
        std::vector<FaultOrigin> origins;
        if (node.IsNull()) return origins;
        if (!node.IsSequence())
            fail(line("faults"), "faults", "must be a list of fault specs, got " + describe(node));
        for (const auto& item : node) {
            const auto field = "faults[" + std::to_string(faults.size()) + "]";
            const int at = line_of(item);
            if (item.IsScalar()) {
                try {
                    faults.push_back(fault_from_spec(item.Scalar()));
                } catch (const BadFault& bad) {
                    fail(at, field, spec_problem(item.Scalar(), bad));
                }
                origins.push_back({field, in_quotes(item.Scalar()) + ": role ", at});
            } else if (item.IsMap()) {
                faults.push_back(fault_from_map(item, field, at));
                origins.push_back({field + ".role", "", line(field + ".role")});
            } else {
                fail(at, field,
                     "must be a fault spec string or a map of role, step, phase, action; got " +
                         describe(item));
            }
        }
        return origins;
    }

private:
    // The map form of a fault: the same parts as keys; errors point at the key's line.
    Fault fault_from_map(const YAML::Node& map, const std::string& field, int at) {
        Fault fault;
        std::vector<std::string> seen;
        for_each_entry(map, field, kFaultKeys,
                       [&](const std::string& key, const YAML::Node& value, int key_line) {
                           if (!value.IsScalar())
                               fail(key_line, field + "." + key, "must be a scalar, got " + describe(value));
                           try {
                               set_fault_part(fault, key, value.Scalar(), seen);
                           } catch (const BadFault& bad) {
                               fail(key_line, field + "." + bad.part, bad.problem);
                           }
                       });
        try {
            require_fault_parts(seen);
        } catch (const BadFault& bad) {
            fail(at, field + "." + bad.part, bad.problem);
        }
        fault.text = "role=" + role_text(fault) + ":step=" + std::to_string(fault.step) +
                     ":phase=" + to_string(fault.phase) + ":action=" + to_string(fault.action) +
                     (fault.action == Action::exit ? "=" + std::to_string(fault.exit_code) : "");
        return fault;
    }

    std::string unknown_key(const std::string& prefix, const std::string& key,
                            const std::vector<std::string>& known) const {
        const std::string what = prefix.empty() ? "is not a known section" : "is not a known key";
        if (auto hint = did_you_mean(key, known, prefix.empty() ? "" : prefix + "."); !hint.empty())
            return what + hint;
        for (const auto& [section, keys] : section_keys())
            if (section != prefix && std::find(keys.begin(), keys.end(), key) != keys.end())
                return what + " (it belongs in " + in_quotes(section) + ": " + section + "." + key + ")";
        return what + " (known: " + join(known) + ")";
    }

    template <class T, class Section>
    void read_value(T& out, const Field<Section>& field, const YAML::Node& value, const std::string& dotted,
                    int at) const {
        if constexpr (std::is_same_v<T, bool>) {
            if (!value.IsScalar() || !YAML::convert<bool>::decode(value, out))
                fail(at, dotted, "must be true or false, got " + describe(value));
        } else if constexpr (std::is_same_v<T, std::string>) {
            if (value.IsNull() && field.choices.empty()) return out.clear();  // "dir:" alone: unset
            if (!value.IsScalar()) fail(at, dotted, "must be a string, got " + describe(value));
            if (field.refused)
                if (const auto why = field.refused(value.Scalar())) fail(at, dotted, *why);
            if (!field.choices.empty() &&
                std::find(field.choices.begin(), field.choices.end(), value.Scalar()) == field.choices.end())
                fail(at, dotted, one_of(value.Scalar(), field.choices));
            out = value.Scalar();
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            out.clear();
            if (value.IsNull()) return;
            if (!value.IsSequence())
                fail(at, dotted, "must be a list of strings, e.g. [--foo, bar]; got " + describe(value));
            for (const auto& item : value) {
                if (!item.IsScalar())
                    fail(line_of(item), dotted + "[" + std::to_string(out.size()) + "]",
                         "must be a string, got " + describe(item));
                out.push_back(item.Scalar());
            }
        } else if constexpr (std::is_same_v<T, double>) {
            const std::string text = value.IsScalar() ? value.Scalar() : "";
            const char* end = text.data() + text.size();
            double parsed = 0;
            const auto [stop, error] = std::from_chars(text.data(), end, parsed);
            if (text.empty() || error != std::errc() || stop != end || !std::isfinite(parsed))
                fail(at, dotted, "must be a number, got " + describe(value));
            out = parsed;
        } else {
            if (field.word && value.IsScalar() && value.Scalar() == field.word) {
                out = static_cast<T>(field.word_value);
                return;
            }
            out = integer<T>(field, value, dotted, at);
        }
    }

    // An integer within the field's limits and T's range; messages say the limits.
    template <class T, class Section>
    T integer(const Field<Section>& field, const YAML::Node& value, const std::string& dotted, int at) const {
        const std::string text = value.IsScalar() ? value.Scalar() : "";
        constexpr auto type_min = std::numeric_limits<T>::min();
        constexpr auto type_max = std::numeric_limits<T>::max();
        const auto min = std::to_string(
            field.min == kNoMin || std::cmp_less(field.min, type_min) ? type_min : T(field.min));
        const auto max = std::to_string(
            field.max == kNoMax || std::cmp_greater(field.max, type_max) ? type_max : T(field.max));
        const auto between = "must be between " + min + " and " + max;
        bool out_of_range = false;
        std::optional<T> parsed;
        if constexpr (std::is_same_v<T, std::int64_t>)
            if (field.size && value.IsScalar()) parsed = to_size(text, out_of_range);
        if (!field.size && value.IsScalar()) parsed = to_integer<T>(text, out_of_range);
        if (out_of_range) fail(at, dotted, between + ", got " + text);
        if (!parsed) {
            const char* kind = field.size ? "a size in bytes or with a KiB/MiB/GiB suffix (e.g. 4MiB)"
                               : std::is_unsigned_v<T> ? "a non-negative integer"
                                                       : "an integer";
            fail(at, dotted, std::string("must be ") + kind + (field.word ? " or " + in_quotes(field.word) : "") +
                                 ", got " + describe(value));
        }
        // "between" when the field has both limits; else the one it broke
        if (field.min != kNoMin && std::cmp_less(*parsed, field.min))
            fail(at, dotted, (field.max != kNoMax ? between : "must be >= " + min) + ", got " + text);
        if (field.max != kNoMax && std::cmp_greater(*parsed, field.max))
            fail(at, dotted, (field.min != kNoMin ? between : "must be <= " + max) + ", got " + text);
        return *parsed;
    }

    std::string file_;
    std::map<std::string, int> lines_;  // dotted key -> the line it was written on
};

// The in-band detector declares a peer failed after detector_timeout_ms without a heartbeat: a
// timeout under two periods would declare a peer failed for one late heartbeat.
std::optional<std::string> detector_problem(const Mpi& mpi) {
    if (mpi.detector_timeout_ms >= 2 * mpi.detector_period_ms) return std::nullopt;
    return "must be >= 2 * mpi.detector_period_ms = " + std::to_string(2 * mpi.detector_period_ms) +
           " (a peer is declared failed after this long without a heartbeat; one late heartbeat must not do it), got " +
           std::to_string(mpi.detector_timeout_ms);
}

// Rules that involve more than one field, checked once every section is read.
void validate(const Config& config, const Reader& reader, const std::vector<FaultOrigin>& origins) {
    const auto check = [&](bool ok, const std::string& field, const std::string& problem) {
        if (!ok) reader.fail(reader.line(field), field, problem);
    };
    const auto default_note = [&](const std::string& field) {
        return reader.given(field) ? "" : " (the default)";
    };
    const Job& job = config.job;
    check(
        !job.name.empty() && job.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "0123456789_-") == std::string::npos &&
            job.name.size() <= 100,
        "job.name",
        "must be 1-100 letters, digits, '_' or '-' (it names shared-memory segments and files), got " +
            in_quotes(job.name));
    const std::int64_t slots = std::int64_t{job.nodes} * job.ranks_per_node;
    const std::int64_t roles = std::int64_t{job.dp} * job.tp * job.pp;
    check(slots == roles, "job.nodes",
          "* job.ranks_per_node = " + std::to_string(job.nodes) + " * " + std::to_string(job.ranks_per_node) +
              " = " + std::to_string(slots) + " must equal job.dp * job.tp * job.pp = " +
              std::to_string(job.dp) + " * " + std::to_string(job.tp) + " * " + std::to_string(job.pp) +
              " = " + std::to_string(roles) + " (one active rank per role)");

    const Protection& protection = config.protection;
    if (protection.enabled) {
        check(protection.replicas >= 1, "protection.replicas",
              "must be >= 1 when protection is enabled, got " + std::to_string(protection.replicas));
        check(job.dp == 1 || protection.replicas <= job.dp - 1, "protection.replicas",
              "must be <= job.dp - 1 = " + std::to_string(job.dp - 1) +
                  " (replicas live on other DP ranks), got " + std::to_string(protection.replicas) +
                  default_note("protection.replicas"));
    }
    check(protection.max_every > 0 && (protection.max_every & (protection.max_every - 1)) == 0,
          "protection.max_every",
          "must be a power of two (auto chooses among 1, 2, 4, ... max_every), got " +
              std::to_string(protection.max_every));
    check(protection.overhead_budget > 0 && protection.overhead_budget < 1, "protection.overhead_budget",
          "must be a fraction of the step time between 0 and 1 (0.03: 3 %), got " +
              std::to_string(protection.overhead_budget));
    const Checkpoint& checkpoint = config.checkpoint;
    // HDF5 checkpoints are written from committed snapshot versions: only multiples of every exist.
    if (protection.enabled && checkpoint.every_steps > 0 && protection.every_auto())
        check(checkpoint.every_steps % protection.max_every == 0, "checkpoint.every_steps",
              "must be a multiple of protection.max_every = " + std::to_string(protection.max_every) +
                  " with protection.every = auto (a checkpoint is written from a snapshot version, and only "
                  "multiples of protection.max_every are snapshotted whatever k auto chooses), got " +
                  std::to_string(checkpoint.every_steps));
    else if (protection.enabled && checkpoint.every_steps > 0)
        check(checkpoint.every_steps % protection.every == 0, "checkpoint.every_steps",
              "must be a multiple of protection.every = " + std::to_string(protection.every) +
                  " (a checkpoint is written from a snapshot version, and only multiples of protection.every "
                  "are snapshotted), got " + std::to_string(checkpoint.every_steps));
    if (checkpoint.every_steps > 0 && checkpoint.dir.empty()) {
        if (reader.given("checkpoint.dir"))
            check(false, "checkpoint.dir", "must not be empty when checkpoint.every_steps > 0");
        check(false, "checkpoint.every_steps",
              "is " + std::to_string(checkpoint.every_steps) + " but checkpoint.dir is not set");
    }
    const Slurm& slurm = config.slurm;
    if (slurm.when_spares_exhausted == "checkpoint-and-requeue")
        check(!checkpoint.dir.empty(), "slurm.when_spares_exhausted",
              "is checkpoint-and-requeue, which needs checkpoint.dir (where the checkpoint for the requeued job "
              "is written)");
    if (slurm.launch == "srun")
        check(!config.recovery.spawn, "slurm.launch",
              "is srun (direct launch), where MPI_Comm_spawn has no server to start a cold spare: set "
              "recovery.spawn: false (when the hot spares run out, the launcher relaunches the job instead; "
              "docs/slurm.md, \"Direct launch\")");
    try {
        (void)slurm::drain_reason(slurm.drain_reason, "node_lost", 1, "node1", "1");
    } catch (const Error& e) {
        check(false, "slurm.drain_reason", e.what());
    }
    const Detection& detection = config.detection;
    check(detection.hang_timeout_ms > detection.heartbeat_ms, "detection.hang_timeout_ms",
          "must be > detection.heartbeat_ms = " + std::to_string(detection.heartbeat_ms) + ", got " +
              std::to_string(detection.hang_timeout_ms) + default_note("detection.hang_timeout_ms"));
    check(detection.node_timeout_ms > 2 * detection.heartbeat_ms, "detection.node_timeout_ms",
          "must be > 2 x detection.heartbeat_ms = " + std::to_string(2 * detection.heartbeat_ms) +
              " (a node is lost only after its ranks missed more than one heartbeat), got " +
              std::to_string(detection.node_timeout_ms) + default_note("detection.node_timeout_ms"));
    check(!detection.bind.empty(), "detection.bind", "must not be empty (an address or host name)");
    if (const auto problem = detector_problem(config.mpi))
        check(false, "mpi.detector_timeout_ms", *problem + default_note("mpi.detector_timeout_ms"));

    for (std::size_t i = 0; i < config.faults.size(); ++i) {
        if (const auto problem = role_outside(config.faults[i], job))
            reader.fail(origins[i].line, origins[i].field, origins[i].prefix + *problem);
        if (const auto problem = step_outside(config.faults[i], job))
            reader.fail(origins[i].line, origins[i].field, in_quotes(config.faults[i].text) + ": " + *problem);
        if (const auto problem = replication_never_runs(config.faults[i], protection))
            reader.fail(origins[i].line, origins[i].field, in_quotes(config.faults[i].text) + ": " + *problem);
    }
}

}  // namespace

Config parse(const std::string& yaml_text, const std::string& path_for_messages) {
    const std::string& path = path_for_messages;
    std::vector<YAML::Node> documents;
    try {
        documents = YAML::LoadAll(yaml_text);
    } catch (const YAML::Exception& e) {
        throw ConfigError(path, e.mark.line + 1, "", "YAML syntax error: " + e.msg);
    }
    if (documents.empty() || (documents.size() == 1 && documents[0].IsNull()))
        throw ConfigError(path, 0, "", "is empty: expected a map of sections (" + join(kSections) + ")");
    if (documents.size() > 1)
        throw ConfigError(path, line_of(documents[1]), "",
                          "holds more than one YAML document ('---'); expected one");
    const YAML::Node& root = documents[0];
    if (!root.IsMap())
        throw ConfigError(path, line_of(root), "",
                          "must be a map of sections (" + join(kSections) + "), got " + describe(root));

    Config config;
    config.path = path;
    Reader reader(path);
    std::vector<FaultOrigin> fault_origins;
    reader.for_each_entry(
        root, "", kSections, [&](const std::string& section, const YAML::Node& value, int at) {
            if (section == "job")
                reader.read_section(value, section, config.job, job_fields());
            else if (section == "launch")
                reader.read_section(value, section, config.launch, launch_fields());
            else if (section == "protection")
                reader.read_section(value, section, config.protection, protection_fields());
            else if (section == "checkpoint")
                reader.read_section(value, section, config.checkpoint, checkpoint_fields());
            else if (section == "detection")
                reader.read_section(value, section, config.detection, detection_fields());
            else if (section == "mpi")
                reader.read_section(value, section, config.mpi, mpi_fields());
            else if (section == "recovery")
                reader.read_section(value, section, config.recovery, recovery_fields());
            else if (section == "slurm")
                reader.read_section(value, section, config.slurm, slurm_fields());
            else if (section == "logging")
                reader.read_section(value, section, config.logging, logging_fields());
            else if (section == "faults")
                fault_origins = reader.read_faults(value, config.faults);
            else if (!value.IsMap() && !value.IsNull())  // trainer: passed through as is
                reader.fail(at, section,
                            "must be a map (it is handed to the trainer as is), got " + describe(value));
            else
                config.trainer = value;
        });
    validate(config, reader, fault_origins);
    return config;
}

Mpi with_environment(const Mpi& mpi, const std::function<const char*(const char*)>& getenv) {
    Mpi out = mpi;
    const auto given = [&](const char* name) -> std::optional<std::string> {
        const char* value = getenv(name);
        if (!value || !*value) return std::nullopt;
        return std::string(value);
    };
    const auto fail = [](const char* name, const std::string& problem) {
        throw ConfigError("environment", 0, name, problem);
    };
    if (const auto transport = given(ft::env::kTransport)) {
        if (const auto why = refused_transport(*transport)) fail(ft::env::kTransport, *why);
        if (std::find(kTransports.begin(), kTransports.end(), *transport) == kTransports.end())
            fail(ft::env::kTransport, one_of(*transport, kTransports));
        out.transport = *transport;
    }
    if (const auto yield = given(ft::env::kYieldWhenIdle)) {
        if (std::find(kYieldChoices.begin(), kYieldChoices.end(), *yield) == kYieldChoices.end())
            fail(ft::env::kYieldWhenIdle, one_of(*yield, kYieldChoices));
        out.yield_when_idle = *yield;
    }
    const auto milliseconds = [&](const char* name, int& into) {
        const auto text = given(name);
        if (!text) return;
        bool out_of_range = false;
        const auto value = to_integer<int>(*text, out_of_range);
        if (!value || *value < 1) fail(name, "must be a whole number of milliseconds >= 1, got " + in_quotes(*text));
        into = *value;
    };
    if (const auto detector = given(ft::env::kDetector)) {
        if (*detector != "on" && *detector != "off") fail(ft::env::kDetector, "must be on or off, got " + in_quotes(*detector));
        out.detector = *detector == "on";
    }
    milliseconds(ft::env::kDetectorPeriodMs, out.detector_period_ms);
    milliseconds(ft::env::kDetectorTimeoutMs, out.detector_timeout_ms);
    if (const auto problem = detector_problem(out))
        fail(ft::env::kDetectorTimeoutMs, "(or mpi.detector_timeout_ms) " + *problem);
    return out;
}

std::vector<std::pair<std::string, std::string>> wrapper_variables(const Mpi& mpi) {
    return {{ft::env::kTransport, mpi.transport},
            {ft::env::kDetector, mpi.detector ? "on" : "off"},
            {ft::env::kDetectorPeriodMs, std::to_string(mpi.detector_period_ms)},
            {ft::env::kDetectorTimeoutMs, std::to_string(mpi.detector_timeout_ms)},
            {ft::env::kYieldWhenIdle, mpi.yield_when_idle}};
}

Config load(const std::string& path) {
    std::error_code error;
    if (!std::filesystem::exists(path, error)) throw ConfigError(path, 0, "", "cannot be read: no such file");
    if (std::filesystem::is_directory(path, error))
        throw ConfigError(path, 0, "", "cannot be read: it is a directory");
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.is_open() || in.bad())
        throw ConfigError(path, 0, "", std::string("cannot be read: ") + std::strerror(errno));
    return parse(text, path);
}

Fault parse_fault(const std::string& spec, const std::string& where) {
    try {
        return fault_from_spec(spec);
    } catch (const BadFault& bad) {
        throw ConfigError(where, 0, "fault", spec_problem(spec, bad));
    }
}

void validate_fault(const Fault& fault, const Job& job, const std::string& where, const Protection& protection) {
    if (const auto problem = role_outside(fault, job))
        throw ConfigError(where, 0, "fault", in_quotes(fault.text) + ": role " + *problem);
    if (const auto problem = step_outside(fault, job))
        throw ConfigError(where, 0, "fault", in_quotes(fault.text) + ": " + *problem);
    if (const auto problem = replication_never_runs(fault, protection))
        throw ConfigError(where, 0, "fault", in_quotes(fault.text) + ": " + *problem);
}

std::string to_string(Phase phase) { return std::string(kPhaseNames.at(static_cast<std::size_t>(phase))); }
std::string to_string(Action action) {
    return std::string(kActionNames.at(static_cast<std::size_t>(action)));
}

bool direct_launch_chosen(const Config& config) {
    if (config.slurm.launch == "srun") return true;
    return config.slurm.launch == "auto" && !config.recovery.spawn && config.launch.mpirun_args.empty();
}

}  // namespace flashrec::config
