#include "flashrec/ft/records.hpp"

#include <cmath>

namespace flashrec::ft::records {

using json = nlohmann::json;

RecordError::RecordError(std::string event, std::string field, const std::string& problem)
    : Error("record '" + event + "'" + (field.empty() ? std::string() : ", field '" + field + "'") + ": " + problem),
      event_(std::move(event)),
      field_(std::move(field)) {}

namespace {

// Reads one record's fields, each checked for presence and type; the first problem throws.
class Reader {
public:
    Reader(const json& j, const char* event) : j_(j), event_(event) {
        if (!j.is_object()) throw RecordError(event_, "", "not a JSON object");
        const auto v = j.find("v");
        if (v == j.end()) throw RecordError(event_, "v", "missing (the record version)");
        if (!v->is_number_integer() || v->get<std::int64_t>() != kVersion)
            throw RecordError(event_, "v", "version " + v->dump() + " is not the one this flashrec reads (" +
                                               std::to_string(kVersion) + ")");
    }
    const json& at(const char* field) const {
        const auto it = j_.find(field);
        if (it == j_.end()) throw RecordError(event_, field, "missing");
        return *it;
    }
    bool has(const char* field) const { return j_.contains(field) && !j_.at(field).is_null(); }
    std::int64_t integer(const char* field) const {
        const json& f = at(field);
        if (!f.is_number_integer()) throw RecordError(event_, field, "expected an integer, got " + f.dump());
        return f.get<std::int64_t>();
    }
    int int32(const char* field) const {
        const std::int64_t v = integer(field);
        if (v < INT32_MIN || v > INT32_MAX) throw RecordError(event_, field, "out of range: " + std::to_string(v));
        return static_cast<int>(v);
    }
    double number(const char* field) const {
        const json& f = at(field);
        if (!f.is_number()) throw RecordError(event_, field, "expected a number, got " + f.dump());
        return f.get<double>();
    }
    // A field added after the record's first version: absent in older records.
    std::int64_t integer_or(const char* field, std::int64_t absent) const {
        return has(field) ? integer(field) : absent;
    }
    std::optional<double> optional_number(const char* field) const {
        return has(field) ? std::optional<double>(number(field)) : std::nullopt;
    }
    bool boolean(const char* field) const {
        const json& f = at(field);
        if (!f.is_boolean()) throw RecordError(event_, field, "expected true or false, got " + f.dump());
        return f.get<bool>();
    }
    std::string string(const char* field) const {
        const json& f = at(field);
        if (!f.is_string()) throw RecordError(event_, field, "expected a string, got " + f.dump());
        return f.get<std::string>();
    }
    std::vector<std::string> strings(const char* field) const {
        const json& f = at(field);
        if (!f.is_array()) throw RecordError(event_, field, "expected an array of strings, got " + f.dump());
        std::vector<std::string> out;
        for (const auto& e : f) {
            if (!e.is_string()) throw RecordError(event_, field, "expected an array of strings, got " + f.dump());
            out.push_back(e.get<std::string>());
        }
        return out;
    }
    PhasesMs phases(const json& f, const std::string& field) const {
        if (!f.is_object()) throw RecordError(event_, field, "expected an object of phase: ms, got " + f.dump());
        PhasesMs out;
        for (const auto& [name, ms] : f.items()) {
            if (!ms.is_number()) throw RecordError(event_, field + "." + name, "expected a number, got " + ms.dump());
            out[name] = ms.get<double>();
        }
        return out;
    }
    PhasesMs phases(const char* field) const { return phases(at(field), field); }

private:
    const json& j_;
    std::string event_;
};

json head(const char* event) { return json{{"event", event}, {"v", kVersion}}; }

}  // namespace

json Step::to_json() const {
    json j = head(kEvent);
    j["step"] = step;
    j["loss"] = loss && std::isfinite(*loss) ? json(*loss) : json(nullptr);
    return j;
}
Step Step::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.integer("step"), r.optional_number("loss")};
}

json FaultInjected::to_json() const {
    json j = head(kEvent);
    j.update({{"fault", fault}, {"pid", pid}, {"unix_us", unix_us}, {"action", action}, {"step", step}, {"phase", phase}});
    if (action == "exit") j["exit_code"] = exit_code;
    return j;
}
FaultInjected FaultInjected::from_json(const json& j) {
    const Reader r(j, kEvent);
    FaultInjected f;
    f.fault = r.string("fault");
    f.pid = r.int32("pid");
    f.unix_us = r.integer("unix_us");
    f.action = r.string("action");
    if (f.action != "kill" && f.action != "exit" && f.action != "stop")
        throw RecordError(kEvent, "action", "expected kill, exit or stop, got '" + f.action + "'");
    if (f.action == "exit") f.exit_code = r.int32("exit_code");
    f.step = r.integer("step");
    f.phase = r.string("phase");
    return f;
}

json CheckpointPublished::to_json() const {
    json j = head(kEvent);
    j.update({{"step", step}, {"path", path}, {"files", files}, {"bytes", bytes}, {"seconds", seconds}});
    return j;
}
CheckpointPublished CheckpointPublished::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.integer("step"), r.string("path"), r.integer("files"), r.integer("bytes"), r.number("seconds")};
}

json CheckpointResumed::to_json() const {
    json j = head(kEvent);
    j.update({{"step", step}, {"dir", dir}});
    return j;
}
CheckpointResumed CheckpointResumed::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.integer("step"), r.string("dir")};
}

json EndingJob::to_json() const {
    json j = head(kEvent);
    j.update({{"exit_code", exit_code}, {"pid", pid}, {"why", why.substr(0, 2000)}});
    return j;
}
EndingJob EndingJob::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.int32("exit_code"), r.int32("pid"), r.string("why")};
}

json RoleFinished::to_json() const {
    json j = head(kEvent);
    j.update({{"role", role}, {"pid", pid}, {"steps", steps}, {"checksum", checksum}});
    return j;
}
RoleFinished RoleFinished::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.string("role"), r.int32("pid"), r.integer("steps"), r.string("checksum")};
}

json MpiErrorSeen::to_json() const {
    json j = head(kEvent);
    j.update({{"pid", pid}, {"error_class", error_class}, {"operation", operation}});
    return j;
}
MpiErrorSeen MpiErrorSeen::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.int32("pid"), r.int32("error_class"), r.string("operation")};
}

json SpareReleased::to_json() const {
    json j = head(kEvent);
    j["pid"] = pid;
    return j;
}
SpareReleased SpareReleased::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.int32("pid")};
}

json Recovery::to_json() const {
    json j = head(kEvent);
    json by_role = json::object();
    for (const auto& [role, phases] : phases_ms_by_role) by_role[role] = phases;
    j.update({{"tier", tier},
              {"epoch", epoch},
              {"failed_roles", failed_roles},
              {"replacement", replacement},
              {"recovery_version", recovery_version},
              {"resume_step", resume_step},
              {"steps_replayed", steps_replayed},
              {"bytes_restored_per_replacement", bytes_restored_per_replacement},
              {"phases_ms", phases_ms},
              {"total_ms", total_ms},
              {"phases_ms_by_role", by_role},
              {"phases_ms_max", phases_ms_max},
              {"slowest_role", slowest_role},
              {"phases_ms_slowest", phases_ms_slowest},
              {"failure_noticed_unix_us", failure_noticed_unix_us},
              {"back_in_loop_unix_us", back_in_loop_unix_us},
              {"first_step_ms", first_step_ms},
              {"slots_made_ahead", slots_made_ahead}});
    if (notice_to_loop_ms) j["notice_to_loop_ms"] = *notice_to_loop_ms;
    j["protection_every"] = protection_every;
    if (replay_ms) j["replay_ms"] = *replay_ms;
    return j;
}
Recovery Recovery::from_json(const json& j) {
    const Reader r(j, kEvent);
    Recovery x;
    x.tier = r.int32("tier");
    x.epoch = r.int32("epoch");
    x.failed_roles = r.strings("failed_roles");
    x.replacement = r.string("replacement");
    x.recovery_version = r.integer("recovery_version");
    x.resume_step = r.integer("resume_step");
    x.steps_replayed = r.integer("steps_replayed");
    x.bytes_restored_per_replacement = r.integer("bytes_restored_per_replacement");
    x.phases_ms = r.phases("phases_ms");
    x.total_ms = r.number("total_ms");
    const json& by_role = r.at("phases_ms_by_role");
    if (!by_role.is_object())
        throw RecordError(kEvent, "phases_ms_by_role", "expected an object of role: phases, got " + by_role.dump());
    for (const auto& [role, phases] : by_role.items())
        x.phases_ms_by_role[role] = r.phases(phases, "phases_ms_by_role." + role);
    x.phases_ms_max = r.phases("phases_ms_max");
    x.slowest_role = r.string("slowest_role");
    x.phases_ms_slowest = r.phases("phases_ms_slowest");
    x.failure_noticed_unix_us = r.integer("failure_noticed_unix_us");
    x.back_in_loop_unix_us = r.integer("back_in_loop_unix_us");
    x.first_step_ms = r.number("first_step_ms");
    x.slots_made_ahead = r.integer("slots_made_ahead");
    x.notice_to_loop_ms = r.optional_number("notice_to_loop_ms");
    x.protection_every = r.integer_or("protection_every", 1);
    x.replay_ms = r.optional_number("replay_ms");
    return x;
}

json JobStats::to_json() const {
    json j = head(kEvent);
    j.update({{"role", role},
              {"steps", steps},
              {"median_step_ms", median_step_ms},
              {"median_exposed_wait_ms", median_exposed_wait_ms},
              {"total_exposed_wait_ms", total_exposed_wait_ms},
              {"protection", protection},
              {"state_bytes", state_bytes},
              {"shm_bytes", shm_bytes},
              {"snapshot_ms", snapshot_ms},
              {"snapshot_copied_bytes", snapshot_copied_bytes},
              {"snapshot_sent_bytes", snapshot_sent_bytes},
              {"snapshots", snapshots},
              {"snapshot_mean_ms", snapshot_mean_ms},
              {"snapshot_cpu_ms", snapshot_cpu_ms},
              {"snapshot_copy_GBps", snapshot_copy_GBps},
              {"snapshot_copy_cpu_GBps", snapshot_copy_cpu_GBps},
              {"snapshot_d2h_GBps", snapshot_d2h_GBps},
              {"replication_GBps", replication_GBps},
              {"replication_oncpu_GBps", replication_oncpu_GBps},
              {"sender_touched_per_byte", sender_touched_per_byte},
              {"sender_touched_incl_send_per_byte", sender_touched_incl_send_per_byte},
              {"holder_touched_per_byte", holder_touched_per_byte},
              {"hashed_in_cache_per_byte", hashed_in_cache_per_byte},
              {"hashed_at_source_per_byte", hashed_at_source_per_byte},
              {"protection_every", protection_every},
              {"protection_auto", protection_auto}});
    if (protected_step_ms) j["protected_step_ms"] = *protected_step_ms;
    if (unprotected_step_ms) j["unprotected_step_ms"] = *unprotected_step_ms;
    if (mean_step_ms) j["mean_step_ms"] = *mean_step_ms;
    return j;
}
JobStats JobStats::from_json(const json& j) {
    const Reader r(j, kEvent);
    JobStats s;
    s.role = r.string("role");
    s.steps = r.integer("steps");
    s.median_step_ms = r.number("median_step_ms");
    s.median_exposed_wait_ms = r.number("median_exposed_wait_ms");
    s.total_exposed_wait_ms = r.number("total_exposed_wait_ms");
    s.protection = r.boolean("protection");
    s.state_bytes = r.integer("state_bytes");
    s.shm_bytes = r.integer("shm_bytes");
    s.snapshot_ms = r.number("snapshot_ms");
    s.snapshot_copied_bytes = r.integer("snapshot_copied_bytes");
    s.snapshot_sent_bytes = r.integer("snapshot_sent_bytes");
    s.snapshots = r.integer("snapshots");
    s.snapshot_mean_ms = r.number("snapshot_mean_ms");
    s.snapshot_cpu_ms = r.number("snapshot_cpu_ms");
    s.snapshot_copy_GBps = r.number("snapshot_copy_GBps");
    s.snapshot_copy_cpu_GBps = r.number("snapshot_copy_cpu_GBps");
    s.snapshot_d2h_GBps = r.number("snapshot_d2h_GBps");
    s.replication_GBps = r.number("replication_GBps");
    s.replication_oncpu_GBps = r.number("replication_oncpu_GBps");
    s.sender_touched_per_byte = r.number("sender_touched_per_byte");
    s.sender_touched_incl_send_per_byte = r.number("sender_touched_incl_send_per_byte");
    s.holder_touched_per_byte = r.number("holder_touched_per_byte");
    s.hashed_in_cache_per_byte = r.number("hashed_in_cache_per_byte");
    s.hashed_at_source_per_byte = r.optional_number("hashed_at_source_per_byte").value_or(0.0);  // older records
    s.protection_every = r.integer_or("protection_every", 1);
    s.protection_auto = r.has("protection_auto") && r.boolean("protection_auto");
    s.protected_step_ms = r.optional_number("protected_step_ms");
    s.unprotected_step_ms = r.optional_number("unprotected_step_ms");
    s.mean_step_ms = r.optional_number("mean_step_ms");
    return s;
}

json ProtectionInterval::to_json() const {
    json j = head(kEvent);
    j.update({{"step", step},
              {"every", every},
              {"previous", previous},
              {"exposed_ms", exposed_ms},
              {"overhead", overhead},
              {"budget", budget},
              {"max_every", max_every},
              {"reason", reason}});
    if (step_ms) j["step_ms"] = *step_ms;
    if (protected_step_ms) j["protected_step_ms"] = *protected_step_ms;
    return j;
}
ProtectionInterval ProtectionInterval::from_json(const json& j) {
    const Reader r(j, kEvent);
    ProtectionInterval x;
    x.step = r.integer("step");
    x.every = r.integer("every");
    x.previous = r.integer("previous");
    x.step_ms = r.optional_number("step_ms");
    x.protected_step_ms = r.optional_number("protected_step_ms");
    x.exposed_ms = r.number("exposed_ms");
    x.overhead = r.number("overhead");
    x.budget = r.number("budget");
    x.max_every = r.integer("max_every");
    x.reason = r.string("reason");
    return x;
}

json ReplayDiverged::to_json() const {
    json j = head(kEvent);
    j.update({{"role", role},
              {"store", store},
              {"step", step},
              {"restored_version", restored_version},
              {"buffer", buffer},
              {"before", before},
              {"replayed", replayed}});
    return j;
}
ReplayDiverged ReplayDiverged::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.string("role"),   r.string("store"),  r.integer("step"),   r.integer("restored_version"),
            r.string("buffer"), r.string("before"), r.string("replayed")};
}

json ReplayProbe::to_json() const {
    json j = head(kEvent);
    j.update({{"from", from},
              {"to", to},
              {"steps", steps},
              {"passed", passed},
              {"restore_ms", restore_ms},
              {"replay_ms", replay_ms}});
    return j;
}
ReplayProbe ReplayProbe::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.integer("from"), r.integer("to"), r.integer("steps"), r.boolean("passed"), r.number("restore_ms"),
            r.number("replay_ms")};
}

json PlatformMismatch::to_json() const {
    json j = head(kEvent);
    json diffs = json::array();
    for (const auto& d : differences) diffs.push_back({{"field", d.field}, {"writer", d.writer}, {"here", d.here}});
    j.update({{"role", role},
              {"pid", pid},
              {"restore", restore},
              {"version", version},
              {"flashrec_version", flashrec_version},
              {"differences", diffs},
              {"refused", refused}});
    return j;
}
PlatformMismatch PlatformMismatch::from_json(const json& j) {
    const Reader r(j, kEvent);
    PlatformMismatch m;
    m.role = r.string("role");
    m.pid = r.int32("pid");
    m.restore = r.string("restore");
    m.version = r.integer("version");
    m.flashrec_version = r.string("flashrec_version");
    const json& diffs = r.at("differences");
    if (!diffs.is_array()) throw RecordError(kEvent, "differences", "expected an array, got " + diffs.dump());
    for (const auto& d : diffs) {
        if (!d.is_object()) throw RecordError(kEvent, "differences", "expected objects, got " + d.dump());
        json entry = d;
        entry["v"] = kVersion;  // read with the record's own reader
        const Reader f(entry, kEvent);
        m.differences.push_back({f.string("field"), f.string("writer"), f.string("here")});
    }
    m.refused = r.boolean("refused");
    return m;
}

json SpareRejected::to_json() const {
    json j = head(kEvent);
    j.update({{"spare", spare}, {"node", node}, {"reason", reason}, {"epoch", epoch}});
    return j;
}
SpareRejected SpareRejected::from_json(const json& j) {
    const Reader r(j, kEvent);
    return {r.string("spare"), r.string("node"), r.string("reason"), r.integer("epoch")};
}

namespace {
template <typename R>
bool check_if(const json& record, std::string_view name) {
    if (name != R::kEvent) return false;
    (void)R::from_json(record);
    return true;
}
}  // namespace

bool is_typed(std::string_view e) {
    return e == Step::kEvent || e == FaultInjected::kEvent || e == CheckpointPublished::kEvent ||
           e == CheckpointResumed::kEvent || e == EndingJob::kEvent || e == RoleFinished::kEvent || e == MpiErrorSeen::kEvent || e == SpareReleased::kEvent ||
           e == Recovery::kEvent || e == JobStats::kEvent || e == ReplayDiverged::kEvent ||
           e == ReplayProbe::kEvent || e == PlatformMismatch::kEvent || e == SpareRejected::kEvent || e == ProtectionInterval::kEvent;
}

void validate(const json& record) {
    if (!record.is_object()) throw RecordError("?", "", "not a JSON object");
    const auto e = record.find("event");
    if (e == record.end() || !e->is_string()) throw RecordError("?", "event", "missing or not a string");
    const std::string name = e->get<std::string>();
    (void)(check_if<Step>(record, name) || check_if<FaultInjected>(record, name) ||
           check_if<CheckpointPublished>(record, name) || check_if<CheckpointResumed>(record, name) ||
           check_if<EndingJob>(record, name) || check_if<RoleFinished>(record, name) ||
           check_if<MpiErrorSeen>(record, name) || check_if<SpareReleased>(record, name) ||
           check_if<Recovery>(record, name) || check_if<JobStats>(record, name) ||
           check_if<ReplayDiverged>(record, name) || check_if<ReplayProbe>(record, name) ||
           check_if<PlatformMismatch>(record, name) ||
           check_if<SpareRejected>(record, name) || check_if<ProtectionInterval>(record, name));
}

std::string event_line(const json& record) {
    return std::string(kLinePrefix) + record.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace flashrec::ft::records
