#include "launcher_link.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>

#include "flashrec/errors.hpp"
#include "flashrec/ft/checksum.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/records.hpp"
#include "flashrec/runtime/interval.hpp"

namespace flashrec::runtime {

LauncherLink::LauncherLink(std::function<void(const std::string&)> log)
    : log_(std::move(log)), deterministic_end([this](const std::string& why) {
          (void)emit_last(ft::records::EndingJob{ft::kExitDeterministicError, static_cast<std::int32_t>(::getpid()), why, {}}
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

void LauncherLink::emit_job_stats(const std::string& role, const IntervalAuto& interval,
                                  const config::Protection& protection, std::size_t state_bytes,
                                  const SnapshotFigures& snapshots) {
    const ft::SnapshotTiming& snapshot = snapshots.last;
    const ft::SnapshotTiming& totals = snapshots.totals;
    double waited = 0;
    for (double w : interval.exposed_wait_ms()) waited += w;
    const auto per = [&](double sum) { return snapshots.count ? sum / static_cast<double>(snapshots.count) : 0.0; };
    const auto rate = [](std::size_t bytes, double seconds) {
        return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
    };
    const auto ratio = [](std::size_t a, std::size_t b) {
        return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
    };
    ft::records::JobStats r;
    r.role = role;
    r.steps = static_cast<std::int64_t>(interval.step_ms().size());
    r.median_step_ms = median(interval.step_ms());
    r.median_exposed_wait_ms = median(interval.exposed_wait_ms());
    r.total_exposed_wait_ms = waited;
    r.protection = protection.enabled;
    r.state_bytes = static_cast<std::int64_t>(state_bytes);
    r.shm_bytes = static_cast<std::int64_t>(snapshots.shm_bytes);
    r.snapshot_ms = snapshot.seconds * 1e3;
    r.snapshot_copied_bytes = static_cast<std::int64_t>(snapshot.copied_bytes);
    r.snapshot_sent_bytes = static_cast<std::int64_t>(snapshot.sent_bytes);
    // Over every snapshot of this run (the sums in SnapshotTiming's terms).
    r.snapshots = static_cast<std::int64_t>(snapshots.count);
    r.snapshot_mean_ms = per(totals.seconds * 1e3);
    r.snapshot_cpu_ms = per(totals.cpu_seconds * 1e3);
    r.snapshot_copy_GBps = rate(totals.copied_bytes, totals.copy_seconds);
    r.snapshot_copy_cpu_GBps = rate(totals.copied_bytes, totals.copy_cpu_seconds);
    r.snapshot_d2h_GBps = rate(totals.d2h_bytes, totals.d2h_seconds);  // device copier only
    r.replication_GBps = rate(totals.sent_bytes, totals.replication_seconds);
    // Without the time the (nice) protection thread waited for a core during it.
    r.replication_oncpu_GBps =
        rate(totals.sent_bytes, totals.replication_seconds - totals.replication_run_delay_seconds);
    // The pipeline's passes (copy, hash), then with the transport's read of what was sent.
    r.sender_touched_per_byte = ratio(totals.sender_touched_bytes, totals.copied_bytes);
    r.sender_touched_incl_send_per_byte =
        ratio(totals.sender_touched_bytes + totals.sent_bytes, totals.copied_bytes);
    r.holder_touched_per_byte = ratio(totals.holder_touched_bytes, totals.received_bytes);
    r.hashed_in_cache_per_byte = ratio(totals.hashed_in_cache_bytes, totals.copied_bytes);
    r.hashed_at_source_per_byte = ratio(totals.hashed_at_source_bytes, totals.copied_bytes);
    r.protection_every = interval.every_now();
    r.protection_auto = protection.every_auto();
    if (!interval.protected_ms().empty()) r.protected_step_ms = median(interval.protected_ms());
    if (!interval.unprotected_ms().empty()) r.unprotected_step_ms = median(interval.unprotected_ms());
    if (interval.step_ms().size() > 1) {
        double sum = 0;
        for (std::size_t i = 1; i < interval.step_ms().size(); ++i) sum += interval.step_ms()[i];
        r.mean_step_ms = sum / static_cast<double>(interval.step_ms().size() - 1);
    }
    emit(r.to_json());
}

std::optional<bool> LauncherLink::finish_job(const JobEnd& job) {
    if (!end_) return std::nullopt;
    const auto deadline = [&] { return std::chrono::steady_clock::now() + job.phase_deadline; };
    const std::int64_t last = job.steps - 1;
    job.faults.at(last, config::Phase::finish);
    // No role sends role_finished before every role is done with the trainer's code after the
    // loop (its state_checksum() allgather, a save): a role that dies once its record was
    // acknowledged then takes nothing from a slower peer still waiting for its data (that peer
    // would fail, send no record, and the finished job would be relaunched). An agreement
    // returns to anyone only once every live role entered it, and survives a death after that.
    bool everyone_came = true;
    try {
        (void)job.work.agree(1, deadline());
    } catch (const Error& e) {
        log_(std::string("a role failed before the end of the job (") + e.what() + "); the snapshot segments stay");
        everyone_came = false;
    }
    // Without a launcher nobody judges the end (emit_last is true): the job is over.
    const bool acknowledged =
        emit_last(ft::records::RoleFinished{job.role, static_cast<std::int32_t>(getpid()), job.steps,
                                            ft::checksum_hex(end_->state_checksum)}
                      .to_json());
    job.faults.at(last, config::Phase::finalize);
    // The segments go once every role's record is with the launcher: then it judges the job
    // finished whatever happens next. One decision for all (an agreement survives failures). It
    // is over the live roles only: a role known dead, whose record may never have come, makes it
    // 0 (else a death before role_finished left the warm relaunch no segments: exit 76).
    int everyone = 0;
    try {
        everyone = acknowledged && everyone_came && job.work.failed_ranks().empty() ? 1 : 0;
        everyone = job.work.agree(everyone, deadline());
    } catch (const Error& e) {
        log_(std::string("the end-of-job agreement failed (") + e.what() + "); the snapshot segments stay");
        everyone = 0;
    }
    return everyone != 0;
}

}  // namespace flashrec::runtime
