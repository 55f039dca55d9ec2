// What this process tells flashrec-launch (docs/control-plane.md): the heartbeat with the step's
// progress, typed records (also written to stderr as "flashrec-event:" lines for runs without a
// launcher), the record it leaves with, and the deterministic end (deterministic_end.hpp). Under
// plain mpirun there is no control plane: records go to stderr only. A part of Runtime::Impl.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "flashrec/ft/control_plane.hpp"
#include "flashrec/ft/exit_notices.hpp"
#include "flashrec/runtime/deterministic_end.hpp"

namespace flashrec::runtime {

class LauncherLink {
public:
    explicit LauncherLink(std::function<void(const std::string&)> log);

    // (Re)registers with the launcher's control plane as `who` (a role key or "spare:<id>");
    // `notices`: where a peer loss the launcher reports goes (trap 1); `parked`: a hot spare.
    void connect(const std::string& who, int world_rank, std::chrono::milliseconds period,
                 ft::ExitNotices* notices, bool parked);
    // BYE: this process leaves on purpose (the launcher does not count it lost).
    void disconnect() { heartbeat_.reset(); }
    bool connected() const { return heartbeat_ != nullptr; }

    // To the launcher only (no stderr line): a step's loss, a rejected snapshot copy.
    void send_event(const nlohmann::json& record);
    // A typed record (ft/records.hpp) for the launcher, and as a "flashrec-event:" line on
    // stderr; `before_exit`: wait (bounded) until it is written.
    void emit(const nlohmann::json& record, bool before_exit = false);
    // The record this process leaves with (role_finished, ending_job), on stderr and to the
    // launcher, which acknowledges it (bounded wait): true when it did, or when there is none.
    bool emit_last(const nlohmann::json& record);

    ft::StepProgress progress;  // read by the heartbeat thread

private:
    std::function<void(const std::string&)> log_;
    std::unique_ptr<ft::HeartbeatClient> heartbeat_;

public:
    // Declared after the heartbeat (destroyed before it): it can still send while an error unwinds.
    DeterministicEnd deterministic_end;
};

}  // namespace flashrec::runtime
