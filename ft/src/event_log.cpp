#include "flashrec/ft/event_log.hpp"

#include "flashrec/errors.hpp"

#include <ctime>
#include <cstdio>
#include <ostream>
#include <stdexcept>

namespace flashrec::ft {

namespace {

// Never throws on invalid UTF-8 (a hostname, a message from a rank): such bytes are replaced.
std::string to_json_text(const nlohmann::json& value) {
    return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string iso8601_utc(std::chrono::system_clock::time_point when) {
    using namespace std::chrono;
    const auto since_epoch = duration_cast<milliseconds>(when.time_since_epoch());
    auto seconds = duration_cast<std::chrono::seconds>(since_epoch);
    auto millis = since_epoch - seconds;
    if (millis.count() < 0) {  // times before 1970 round towards the past
        millis += std::chrono::seconds(1);
        seconds -= std::chrono::seconds(1);
    }
    const std::time_t whole = static_cast<std::time_t>(seconds.count());
    std::tm utc{};
    gmtime_r(&whole, &utc);
    char text[96];  // room for any int the format could print
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                  utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(millis.count()));
    return text;
}

EventLog::EventLog(const std::filesystem::path& path) : file_(path, std::ios::app), out_(&file_) {
    if (!file_) throw Error("event log: cannot open '" + path.string() + "' for appending");
}

EventLog::EventLog(std::ostream& stream) : out_(&stream) {}

void EventLog::log(const nlohmann::json& record) {
    const auto name = record.is_object() ? record.find("event") : record.end();
    if (!record.is_object() || name == record.end() || !name->is_string())
        throw std::invalid_argument("event log: a record must be a JSON object with a string \"event\"");
    write_line(name->get_ref<const std::string&>(), record);
}

void EventLog::log_event(std::string_view event, const nlohmann::json& fields) {
    if (!fields.is_object() && !fields.is_null())
        throw std::invalid_argument("event log: the fields of an event must be a JSON object");
    write_line(event, fields);
}

void EventLog::write_line(std::string_view event, const nlohmann::json& fields) {
    // Built by hand so that "ts" and "event" lead the line whatever the other keys are.
    std::string rest = ",\"event\":" + to_json_text(std::string(event));
    if (fields.is_object()) {
        for (const auto& [key, value] : fields.items()) {
            if (key == "ts" || key == "event") continue;
            rest += ',';
            rest += to_json_text(key);
            rest += ':';
            rest += to_json_text(value);
        }
    }
    rest += "}\n";
    // The time is taken under the lock so that the lines of the file are in time order.
    const std::lock_guard lock(mutex_);
    *out_ << "{\"ts\":\"" << iso8601_utc(std::chrono::system_clock::now()) << '"' << rest << std::flush;
}

}  // namespace flashrec::ft
