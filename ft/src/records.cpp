#include "flashrec/ft/records.hpp"

#include "flashrec/ft/record_fields.hpp"

#include <cmath>
#include <tuple>
#include <type_traits>

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
    const std::string& event() const { return event_; }

private:
    const json& j_;
    std::string event_;
};

json head(const char* event) { return json{{"event", event}, {"v", kVersion}}; }

// ------------------------------------------------------------------------------------------
// Each record's fields, described once: the table below is what to_json writes and what
// from_json reads and checks, field by field in the table's order.

// (Presence, FieldSpec, Table and the writer: record_fields.hpp, shared with the launcher's records.)

}  // namespace

template <>
struct Table<Step> {
    static constexpr auto fields = std::tuple{FieldSpec{"step", &Step::step}, FieldSpec{"loss", &Step::loss, kNullable}};
};
// exit_code only with action "exit": FaultInjected::to_json/from_json.
template <>
struct Table<FaultInjected> {
    static constexpr auto fields =
        std::tuple{FieldSpec{"fault", &FaultInjected::fault}, FieldSpec{"pid", &FaultInjected::pid},
                   FieldSpec{"unix_us", &FaultInjected::unix_us}, FieldSpec{"action", &FaultInjected::action},
                   FieldSpec{"step", &FaultInjected::step}, FieldSpec{"phase", &FaultInjected::phase}};
};
template <>
struct Table<CheckpointPublished> {
    static constexpr auto fields = std::tuple{
        FieldSpec{"step", &CheckpointPublished::step}, FieldSpec{"path", &CheckpointPublished::path},
        FieldSpec{"files", &CheckpointPublished::files}, FieldSpec{"bytes", &CheckpointPublished::bytes},
        FieldSpec{"seconds", &CheckpointPublished::seconds}};
};
template <>
struct Table<CheckpointResumed> {
    static constexpr auto fields =
        std::tuple{FieldSpec{"step", &CheckpointResumed::step}, FieldSpec{"dir", &CheckpointResumed::dir}};
};
template <>
struct Table<EndingJob> {
    static constexpr auto fields = std::tuple{FieldSpec{"exit_code", &EndingJob::exit_code},
                                              FieldSpec{"pid", &EndingJob::pid}, FieldSpec{"why", &EndingJob::why},
                                              FieldSpec{"lost_roles", &EndingJob::lost_roles}};
};
template <>
struct Table<RoleFinished> {
    static constexpr auto fields =
        std::tuple{FieldSpec{"role", &RoleFinished::role}, FieldSpec{"pid", &RoleFinished::pid},
                   FieldSpec{"steps", &RoleFinished::steps}, FieldSpec{"checksum", &RoleFinished::checksum}};
};
template <>
struct Table<MpiErrorSeen> {
    static constexpr auto fields =
        std::tuple{FieldSpec{"pid", &MpiErrorSeen::pid}, FieldSpec{"error_class", &MpiErrorSeen::error_class},
                   FieldSpec{"operation", &MpiErrorSeen::operation}};
};
template <>
struct Table<SpareReleased> {
    static constexpr auto fields = std::tuple{FieldSpec{"pid", &SpareReleased::pid}};
};
template <>
struct Table<Recovery> {
    using R = Recovery;
    static constexpr auto fields = std::tuple{
        FieldSpec{"tier", &R::tier},
        FieldSpec{"epoch", &R::epoch},
        FieldSpec{"failed_roles", &R::failed_roles},
        FieldSpec{"replacement", &R::replacement},
        FieldSpec{"recovery_version", &R::recovery_version},
        FieldSpec{"resume_step", &R::resume_step},
        FieldSpec{"steps_replayed", &R::steps_replayed},
        FieldSpec{"bytes_restored_per_replacement", &R::bytes_restored_per_replacement},
        FieldSpec{"phases_ms", &R::phases_ms},
        FieldSpec{"total_ms", &R::total_ms},
        FieldSpec{"phases_ms_by_role", &R::phases_ms_by_role},
        FieldSpec{"phases_ms_max", &R::phases_ms_max},
        FieldSpec{"slowest_role", &R::slowest_role},
        FieldSpec{"phases_ms_slowest", &R::phases_ms_slowest},
        FieldSpec{"failure_noticed_unix_us", &R::failure_noticed_unix_us},
        FieldSpec{"back_in_loop_unix_us", &R::back_in_loop_unix_us},
        FieldSpec{"first_step_ms", &R::first_step_ms},
        FieldSpec{"slots_made_ahead", &R::slots_made_ahead},
        FieldSpec{"notice_to_loop_ms", &R::notice_to_loop_ms, kOptional},
        FieldSpec{"protection_every", &R::protection_every, kOptional},
        FieldSpec{"replay_ms", &R::replay_ms, kOptional}};
};
template <>
struct Table<JobStats> {
    using R = JobStats;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role},
        FieldSpec{"steps", &R::steps},
        FieldSpec{"median_step_ms", &R::median_step_ms},
        FieldSpec{"median_exposed_wait_ms", &R::median_exposed_wait_ms},
        FieldSpec{"total_exposed_wait_ms", &R::total_exposed_wait_ms},
        FieldSpec{"protection", &R::protection},
        FieldSpec{"state_bytes", &R::state_bytes},
        FieldSpec{"shm_bytes", &R::shm_bytes},
        FieldSpec{"snapshot_ms", &R::snapshot_ms},
        FieldSpec{"snapshot_copied_bytes", &R::snapshot_copied_bytes},
        FieldSpec{"snapshot_sent_bytes", &R::snapshot_sent_bytes},
        FieldSpec{"snapshots", &R::snapshots},
        FieldSpec{"snapshot_mean_ms", &R::snapshot_mean_ms},
        FieldSpec{"snapshot_cpu_ms", &R::snapshot_cpu_ms},
        FieldSpec{"snapshot_copy_GBps", &R::snapshot_copy_GBps},
        FieldSpec{"snapshot_copy_cpu_GBps", &R::snapshot_copy_cpu_GBps},
        FieldSpec{"snapshot_d2h_GBps", &R::snapshot_d2h_GBps},
        FieldSpec{"replication_GBps", &R::replication_GBps},
        FieldSpec{"replication_oncpu_GBps", &R::replication_oncpu_GBps},
        FieldSpec{"sender_touched_per_byte", &R::sender_touched_per_byte},
        FieldSpec{"sender_touched_incl_send_per_byte", &R::sender_touched_incl_send_per_byte},
        FieldSpec{"holder_touched_per_byte", &R::holder_touched_per_byte},
        FieldSpec{"hashed_in_cache_per_byte", &R::hashed_in_cache_per_byte},
        FieldSpec{"hashed_at_source_per_byte", &R::hashed_at_source_per_byte, kOptional},
        FieldSpec{"protection_every", &R::protection_every, kOptional},
        FieldSpec{"protection_auto", &R::protection_auto, kOptional},
        FieldSpec{"protected_step_ms", &R::protected_step_ms, kOptional},
        FieldSpec{"unprotected_step_ms", &R::unprotected_step_ms, kOptional},
        FieldSpec{"mean_step_ms", &R::mean_step_ms, kOptional}};
};
template <>
struct Table<ProtectionInterval> {
    using R = ProtectionInterval;
    static constexpr auto fields = std::tuple{
        FieldSpec{"step", &R::step},          FieldSpec{"every", &R::every},
        FieldSpec{"previous", &R::previous},  FieldSpec{"step_ms", &R::step_ms, kOptional},
        FieldSpec{"protected_step_ms", &R::protected_step_ms, kOptional},
        FieldSpec{"exposed_ms", &R::exposed_ms}, FieldSpec{"overhead", &R::overhead},
        FieldSpec{"budget", &R::budget},      FieldSpec{"max_every", &R::max_every},
        FieldSpec{"reason", &R::reason}};
};
template <>
struct Table<ReplayDiverged> {
    using R = ReplayDiverged;
    static constexpr auto fields =
        std::tuple{FieldSpec{"role", &R::role},     FieldSpec{"store", &R::store},
                   FieldSpec{"step", &R::step},     FieldSpec{"restored_version", &R::restored_version},
                   FieldSpec{"buffer", &R::buffer}, FieldSpec{"before", &R::before},
                   FieldSpec{"replayed", &R::replayed}};
};
template <>
struct Table<ReplayProbe> {
    using R = ReplayProbe;
    static constexpr auto fields =
        std::tuple{FieldSpec{"from", &R::from},     FieldSpec{"to", &R::to},
                   FieldSpec{"steps", &R::steps},   FieldSpec{"passed", &R::passed},
                   FieldSpec{"restore_ms", &R::restore_ms}, FieldSpec{"replay_ms", &R::replay_ms}};
};
template <>
struct Table<PlatformMismatch::Field> {
    using R = PlatformMismatch::Field;
    static constexpr auto fields =
        std::tuple{FieldSpec{"field", &R::field}, FieldSpec{"writer", &R::writer}, FieldSpec{"here", &R::here}};
};
template <>
struct Table<PlatformMismatch> {
    using R = PlatformMismatch;
    static constexpr auto fields =
        std::tuple{FieldSpec{"role", &R::role},       FieldSpec{"pid", &R::pid},
                   FieldSpec{"restore", &R::restore}, FieldSpec{"version", &R::version},
                   FieldSpec{"flashrec_version", &R::flashrec_version},
                   FieldSpec{"differences", &R::differences}, FieldSpec{"refused", &R::refused}};
};
template <>
struct Table<SpareRejected> {
    using R = SpareRejected;
    static constexpr auto fields = std::tuple{FieldSpec{"spare", &R::spare}, FieldSpec{"node", &R::node},
                                              FieldSpec{"reason", &R::reason}, FieldSpec{"epoch", &R::epoch}};
};

namespace {

// ------------------------------------------------------------------------------------------
// the reader: one per member type (the writer is record_fields.hpp's)

template <class R>
void read_fields(const Reader& r, R& record);

void read_value(const Reader& r, const char* f, std::int32_t& v) { v = r.int32(f); }
void read_value(const Reader& r, const char* f, std::int64_t& v) { v = r.integer(f); }
void read_value(const Reader& r, const char* f, double& v) { v = r.number(f); }
void read_value(const Reader& r, const char* f, bool& v) { v = r.boolean(f); }
void read_value(const Reader& r, const char* f, std::string& v) { v = r.string(f); }
void read_value(const Reader& r, const char* f, std::vector<std::string>& v) { v = r.strings(f); }
void read_value(const Reader& r, const char* f, PhasesMs& v) { v = r.phases(f); }
void read_value(const Reader& r, const char* f, std::map<std::string, PhasesMs>& v) {
    const json& by_role = r.at(f);
    if (!by_role.is_object())
        throw RecordError(r.event(), f, "expected an object of role: phases, got " + by_role.dump());
    for (const auto& [role, phases] : by_role.items()) v[role] = r.phases(phases, std::string(f) + "." + role);
}
void read_value(const Reader& r, const char* f, std::vector<PlatformMismatch::Field>& v) {
    const json& list = r.at(f);
    if (!list.is_array()) throw RecordError(r.event(), f, "expected an array, got " + list.dump());
    for (const auto& d : list) {
        if (!d.is_object()) throw RecordError(r.event(), f, "expected objects, got " + d.dump());
        json entry = d;
        entry["v"] = kVersion;  // read with the record's own reader
        PlatformMismatch::Field field;
        read_fields(Reader(entry, r.event().c_str()), field);
        v.push_back(std::move(field));
    }
}
template <class T>
void read_value(const Reader& r, const char* f, std::optional<T>& v) {
    T value{};
    read_value(r, f, value);
    v = std::move(value);
}

template <class R, class T>
void get(const Reader& r, R& record, const FieldSpec<R, T>& f) {
    if (f.presence != Presence::required && !r.has(f.name)) return;
    read_value(r, f.name, record.*f.member);
}

template <class R>
void read_fields(const Reader& r, R& record) {
    std::apply([&](const auto&... f) { (get(r, record, f), ...); }, Table<R>::fields);
}

template <class R>
json write(const R& record) {
    json j = head(R::kEvent);
    write_fields(record, j);
    return j;
}
template <class R>
R read(const json& j) {
    R record;
    read_fields(Reader(j, R::kEvent), record);
    return record;
}

// Every typed record, for is_typed and validate.
template <class... R>
struct RecordSet {
    static bool holds(std::string_view event) { return ((event == R::kEvent) || ...); }
    static void check(const json& record, std::string_view event) {
        (void)((event == R::kEvent && (static_cast<void>(R::from_json(record)), true)) || ...);
    }
};
using Typed = RecordSet<Step, FaultInjected, CheckpointPublished, CheckpointResumed, EndingJob, RoleFinished,
                        MpiErrorSeen, SpareReleased, Recovery, JobStats, ReplayDiverged, ReplayProbe, PlatformMismatch,
                        SpareRejected, ProtectionInterval>;

}  // namespace

#define FLASHREC_RECORD_FROM_TABLE(R)                         \
    json R::to_json() const { return write(*this); }          \
    R R::from_json(const json& j) { return read<R>(j); }

FLASHREC_RECORD_FROM_TABLE(Step)
FLASHREC_RECORD_FROM_TABLE(CheckpointPublished)
FLASHREC_RECORD_FROM_TABLE(CheckpointResumed)
FLASHREC_RECORD_FROM_TABLE(RoleFinished)
FLASHREC_RECORD_FROM_TABLE(MpiErrorSeen)
FLASHREC_RECORD_FROM_TABLE(SpareReleased)
FLASHREC_RECORD_FROM_TABLE(Recovery)
FLASHREC_RECORD_FROM_TABLE(JobStats)
FLASHREC_RECORD_FROM_TABLE(ProtectionInterval)
FLASHREC_RECORD_FROM_TABLE(ReplayDiverged)
FLASHREC_RECORD_FROM_TABLE(ReplayProbe)
FLASHREC_RECORD_FROM_TABLE(PlatformMismatch)
FLASHREC_RECORD_FROM_TABLE(SpareRejected)
#undef FLASHREC_RECORD_FROM_TABLE

json FaultInjected::to_json() const {
    json j = write(*this);
    if (action == "exit") j["exit_code"] = exit_code;
    return j;
}
FaultInjected FaultInjected::from_json(const json& j) {
    FaultInjected f = read<FaultInjected>(j);
    if (f.action != "kill" && f.action != "exit" && f.action != "stop")
        throw RecordError(kEvent, "action", "expected kill, exit or stop, got '" + f.action + "'");
    if (f.action == "exit") f.exit_code = Reader(j, kEvent).int32("exit_code");
    return f;
}

json EndingJob::to_json() const {
    json j = write(*this);
    j["why"] = why.substr(0, 2000);  // a reason, not a log
    return j;
}
EndingJob EndingJob::from_json(const json& j) { return read<EndingJob>(j); }

bool is_typed(std::string_view e) { return Typed::holds(e); }

void validate(const json& record) {
    if (!record.is_object()) throw RecordError("?", "", "not a JSON object");
    const auto e = record.find("event");
    if (e == record.end() || !e->is_string()) throw RecordError("?", "event", "missing or not a string");
    Typed::check(record, e->get<std::string>());
}

std::string event_line(const json& record) {
    return std::string(kLinePrefix) + record.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace flashrec::ft::records
