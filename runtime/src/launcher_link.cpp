#include "launcher_link.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/records.hpp"

namespace flashrec::runtime {

LauncherLink::LauncherLink(std::function<void(const std::string&)> log)
    : log_(std::move(log)), deterministic_end([this](const std::string& why) {
          (void)emit_last(ft::records::EndingJob{ft::kExitDeterministicError, static_cast<std::int32_t>(::getpid()), why}
                              .to_json());
      }) {}

void LauncherLink::connect(const std::string& who, int world_rank, std::chrono::milliseconds period,
                           ft::ExitNotices* notices, bool parked) {
    heartbeat_.reset();
    auto options = ft::HeartbeatClientOptions::from_environment(who, world_rank);
    if (!options) return;  // not started by flashrec-launch: no control plane
    options->period = period;
    options->on_peer_lost = [sink = notices ? notices->loss_sink() : ft::ExitNotices::LossSink{},
                             me = options->mpi_process](const ft::wire::MpiProcess& lost) {
        // The launcher declared this very process lost (its node fell silent: frozen or cut off,
        // now back). The others have repaired without it: it must not touch MPI again.
        if (me && lost.nspace == me->nspace && lost.rank == me->rank) {
            std::fprintf(stderr, "flashrec[pid %d]: the launcher declared this process lost (its node fell silent); "
                                 "ending it\n", static_cast<int>(getpid()));
            ::kill(::getpid(), SIGKILL);
        }
        if (sink) sink(lost.nspace, lost.rank);
    };
    if (parked) progress.phase.store(ft::wire::Phase::parked);
    heartbeat_ = std::make_unique<ft::HeartbeatClient>(std::move(*options), progress);
}

void LauncherLink::send_event(const nlohmann::json& record) {
    if (heartbeat_) heartbeat_->send_event(record);
}

bool LauncherLink::emit_last(const nlohmann::json& record) {
    std::fprintf(stderr, "%s\n", ft::records::event_line(record).c_str());
    std::fflush(stderr);
    if (!heartbeat_) return true;
    const bool acknowledged = heartbeat_->send_final(record, std::chrono::milliseconds(ft::kRecordAckLimitMs));
    if (!acknowledged)
        log_("flashrec-launch did not acknowledge this process's " + record.value("event", std::string("?")) +
             " record within " + std::to_string(ft::kRecordAckLimitMs) + " ms; leaving anyway");
    return acknowledged;
}

void LauncherLink::emit(const nlohmann::json& record, bool before_exit) {
    std::fprintf(stderr, "%s\n", ft::records::event_line(record).c_str());
    std::fflush(stderr);
    if (!heartbeat_) return;
    heartbeat_->send_event(record);
    if (before_exit) heartbeat_->flush(std::chrono::milliseconds(500));
}

}  // namespace flashrec::runtime
