// The job's event log: one JSON object per line ("JSON lines"), each with "ts" (ISO-8601 UTC,
// milliseconds) and "event" first. Written by flashrec-launch; read by people and by tools.
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iosfwd>
#include <mutex>
#include <string>
#include <string_view>

namespace flashrec::ft {

// "2024-05-01T12:34:56.789Z"
std::string iso8601_utc(std::chrono::system_clock::time_point when);

class EventLog {
public:
    // Appends to `path` (created if missing). Throws flashrec::Error if it cannot be opened.
    explicit EventLog(const std::filesystem::path& path);
    // Writes to a stream the caller owns (std::clog, a test's stringstream); it must outlive this.
    explicit EventLog(std::ostream& stream);
    EventLog(const EventLog&) = delete;
    EventLog& operator=(const EventLog&) = delete;

    // Thread-safe; one line, flushed at once so a crash loses nothing already logged.
    // `record` must be a JSON object with a string "event" (std::invalid_argument otherwise);
    // a "ts" in it is replaced by the time of writing.
    void log(const nlohmann::json& record);
    // The same, with the event name apart from the other fields (null fields: none).
    void log_event(std::string_view event, const nlohmann::json& fields = nlohmann::json::object());

private:
    void write_line(std::string_view event, const nlohmann::json& fields);

    std::ofstream file_;  // unused when writing to a caller's stream
    std::ostream* out_;
    std::mutex mutex_;
};

}  // namespace flashrec::ft
