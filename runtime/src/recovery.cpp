// In-job recovery (tier 1 of docs/ARCHITECTURE.md's "Tiers"): revoke → shrink → agree → exchange
// reports → (spawn) → plan → rebuild communicators → restore → resume at version R.
// Survivors run it from the step loop, hot spares from where they are parked, spawned
// replacements from the Runtime constructor; all of them run the same collective sequence.
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <span>
#include <string_view>
#include <thread>

#include "flashrec/ft/snapshot.hpp"
#include "runtime_impl.hpp"
#include "flashrec/runtime/spare_health.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/leaving.hpp"
#include "flashrec/spares/spares.hpp"
#include "node_local_copies.hpp"

namespace flashrec {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kEpochTag = 0xe90c;
// The recovery record's phase for the NCCL rebuild inside the first step (GPU path): part of
// "first_step", so never added to the repair's own time.
constexpr std::string_view kFirstStepNcclPhase = "first_step_nccl_init";
bool in_first_step(std::string_view phase) { return phase.starts_with("first_step"); }

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

void recovery::Timeline::begin() {
    start = last = Clock::now();
    phases.clear();
    if (nccl_release_ms > 0) phases.emplace_back("nccl_release", nccl_release_ms);
    nccl_release_ms = 0;
}

void recovery::Timeline::mark(const std::string& phase) {
    const auto now = Clock::now();
    phases.emplace_back(phase, ms_between(last, now));
    last = now;
    if (phase == "resumed")
        in_loop_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
    if (debug) std::fprintf(stderr, "flashrec[pid %d]: recovery phase %s done\n", static_cast<int>(getpid()), phase.c_str());
}

Clock::time_point Runtime::Impl::deadline() const {
    return Clock::now() + std::chrono::milliseconds(cfg.recovery.phase_deadline_ms);
}

void Runtime::Impl::end_job(const std::string& why, int exit_code, std::vector<std::string> lost_roles) {
    std::fprintf(stderr, "flashrec[pid %d]: ending the job (exit code %d): %s\n", static_cast<int>(getpid()),
                 exit_code, why.c_str());
    std::fflush(stderr);
    // The launcher acts on the exit code this process asks for (mpirun's own status says little
    // under ULFM): a typed record, written out before the process goes.
    (void)launcher.emit_last(
        ft::records::EndingJob{exit_code, static_cast<std::int32_t>(getpid()), why, std::move(lost_roles)}.to_json());
    // Parked hot spares leave too, released by every role that ends (the first release wins;
    // each goes out before its sender's connection closes). Without it a spare could take the
    // roles' exits for failures and start a repair of a job that ended on purpose: under plain
    // mpirun it spawned replacements that never finished (disruption matrix, loaded machine).
    if (membership.role_index >= 0) release_hot_spares();
    // Not MPI_Abort: under ULFM it can take survivors down in odd ways; the launcher has the
    // exit code from the record and decides (75: relaunch from node-local snapshots; other: HDF5
    // restart). Over shared memory the process ends by SIGKILL so that its peers see it go.
    ft::leave_process(exit_code);
}

void Runtime::Impl::release_hot_spares() {
    try {
        spare_pool.release_all(membership.universe);
    } catch (const Error& e) {  // a spare already gone, or a revoked communicator
        log(std::string("could not release the hot spares: ") + e.what());
    }
}

recovery::Report Runtime::Impl::report() const {
    recovery::Report r;
    r.role = membership.role_index;
    r.node = self.node_name;
    r.id = self.process_id;
    r.step = step;
    r.slot = membership.role_index >= 0 ? membership.slot_of_role.at(static_cast<size_t>(membership.role_index))
                                        : membership.own_slot;
    r.pristine = loop.pristine;
    for (const auto& b : state.buffers())
        r.has_replicated = r.has_replicated || b.kind == Redundancy::replicated;
    if (membership.role_index < 0) {
        // Its admission check (docs/recovery.md, "Spare admission"): it answers (it is in this
        // exchange), its node's /dev/shm has room for a role's slots, its GPU works if it uses one.
        r.shm_room = runtime::spare_health::shm_room(ring.stores->blank_bytes(), self.hot_spare_index, spares::was_spawned());
        if (const std::string gpu = runtime::DevicePath::check_gpu(); !gpu.empty())
            r.unhealthy = "its GPU check failed: " + gpu;
        return r;
    }
    r.shm_need = static_cast<std::int64_t>(ring.stores->store_bytes());
    auto rejected_in = [&](const std::string& key) {
        const auto it = ring.rejected_versions.find(key);
        return it == ring.rejected_versions.end() ? std::set<std::int64_t>{} : it->second;
    };
    r.own = recovery::committed_versions(cfg.job.name, ring.own_segment(), rejected_in(ring.own_segment()));
    for (int owner : ring.held_roles) {
        const std::string key = ring.held_segment(owner);
        r.held.push_back({owner, recovery::committed_versions(cfg.job.name, key, rejected_in(key))});
    }
    // Own snapshots of the other roles on this node: a dead one's are served from here when its
    // ring copy died with its holder (issue 15, case 2).
    r.local = recovery::node_local_copies(cfg.job.name, ring.store_prefix(), shape, membership.role_index,
                                          membership.node_of_role, rejected_in);
    return r;
}

std::vector<recovery::Report> Runtime::Impl::exchange_reports(const ft::Comm& comm, bool agreed_on) const {
    std::vector<recovery::Report> reports;
    std::string torn;
    try {
        const auto texts = ft::allgather_strings(comm, recovery::serialize(report()));
        for (const auto& text : texts) reports.push_back(recovery::deserialize(text));
    } catch (const Error& e) {
        // A process that died inside the exchange can leave a failed collective or a torn
        // report behind on some processes and not on others.
        torn = e.what();
        // A failure ends a collective with an error at some processes only: the others wait in
        // it for one that left for the agreement below, which they never reach (every survivor
        // of three kills at once missed the exchange deadline, ft.checkpoint.tier3 in a fresh
        // clone). Revoking releases them; only on a communicator every member passed an agree on
        // (docs/ulfm-traps.md trap 6).
        if (agreed_on) comm.revoke();
    }
    // Everyone leaves the exchange together, and only with everyone's reports: the plan (and a
    // decision to end the job) is then the same everywhere, and nobody exits while a slower
    // process is still receiving its report. Without this, processes that planned "state lost"
    // exited while an idle spare was still inside the allgather; it got a torn report, retried
    // the epoch alone and the job never ended (issue 15 chaos soak). Agree works on a comm with
    // failures; a failure during it throws ProcessFailure everywhere, which retries the epoch.
    if (!comm.agree(torn.empty() ? 1 : 0, deadline()))
        throw CommRevoked(0, 0, "exchange of recovery reports", comm.name(), comm.rank(),
                          torn.empty() ? "another process did not get every report"
                                       : "a torn or failed exchange: " + torn);
    return reports;
}

std::optional<Runtime::Impl::ResumePoint> Runtime::Impl::recover() {
    for (int attempt = 0;; ++attempt) {
        if (attempt >= cfg.recovery.max_epochs)
            end_job("in-job recovery failed " + std::to_string(attempt) +
                        " epochs in a row; the launcher relaunches the job (tier 2)",
                    ft::kExitForRelaunch);
        try {
            return recovery_epoch();
        } catch (const ShardLost& e) {
            end_job(std::string(e.what()) + "; restart from the newest HDF5 checkpoint (tier 3)", ft::kExitStateLost);
        } catch (const ProcessFailure& e) {
            log("recovery epoch " + std::to_string(membership.epoch) + " was interrupted: " + e.what());
        } catch (const CommRevoked& e) {
            log("recovery epoch " + std::to_string(membership.epoch) + " was interrupted: " + e.what());
        } catch (const DeadlineExceeded& e) {
            log("recovery epoch " + std::to_string(membership.epoch) + ": " + e.what());
        }
        watchdog.disarm();
        ++membership.epoch;
    }
}

std::optional<Runtime::Impl::ResumePoint> Runtime::Impl::recovery_epoch() {
    timeline.begin();
    enter(Phase::recovery, step);
    const auto budget = std::chrono::milliseconds(cfg.recovery.phase_deadline_ms);
    // Armed before the revoke: in a retried epoch, stopping the protection and checkpoint
    // threads of a failed one must not be able to block the process forever either.
    watchdog.arm("revoke", membership.epoch, budget);
    revoke_all();
    ring.retire(quarantine);
    timeline.mark("revoke");

    watchdog.arm("shrink", membership.epoch, budget);
    ft::Comm survivors = membership.universe.shrink("universe");
    timeline.mark("shrink");
    survivors.agree(1, deadline());
    timeline.mark("agree");

    watchdog.arm("exchange", membership.epoch, budget);
    auto reports = exchange_reports(survivors, true);  // agreed on after the shrink
    int live_roles = 0;
    for (const auto& r : reports) live_roles += r.role >= 0 ? 1 : 0;
    // Only spares that pass admission count: the plan passes over the others, so spawn for them.
    const int idle_spares = recovery::admissible_spares(reports);
    const spares::Replacements replacements =
        spares::replacements_for(shape.size() - live_roles, idle_spares, cfg.recovery.spawn);
    const int to_spawn = replacements.to_spawn;
    timeline.mark("exchange");

    if (to_spawn > 0) {
        watchdog.arm("spawn", membership.epoch, budget);
        const spares::SpawnCommand child =
            spares::spawn_command(self.start_args, spares::this_executable(), std::getenv(ft::env::kSpareHost),
                                  self.virtual_nodes, cfg.job.nodes, self.node_name);
        ft::Comm merged = spares::spawn_and_merge(survivors, to_spawn, child.argv, child.host);
        timeline.mark("spawn");
        std::int64_t e = membership.epoch;
        if (merged.rank() == 0)
            for (int c = merged.size() - to_spawn; c < merged.size(); ++c)
                ft::check(MPI_Send(&e, 1, MPI_INT64_T, c, kEpochTag, merged.get()), "MPI_Send(epoch)",
                          merged);
        reports = exchange_reports(merged, false);
        timeline.mark("merge");
        survivors = std::move(merged);
    }
    return adopt_plan(std::move(survivors), reports, replacements.kind);
}

void Runtime::Impl::join_as_spawned() {
    timeline.begin();
    // The merge and the epoch wait on parents that may die or end the job meanwhile; without a
    // deadline this process would outlive them and mpirun would wait for it (seen under PRRTE).
    watchdog.arm("join", membership.epoch, std::chrono::milliseconds(cfg.recovery.phase_deadline_ms));
    ft::Comm merged = spares::join_parents();
    std::int64_t e = 0;
    ft::check(MPI_Recv(&e, 1, MPI_INT64_T, 0, kEpochTag, merged.get(), MPI_STATUS_IGNORE),
              "MPI_Recv(epoch)", merged);
    membership.epoch = static_cast<int>(e);
    self.process_id = (e + 1) * 1000000 + self.world_rank;
    try {
        const auto reports = exchange_reports(merged, false);
        (void)adopt_plan(std::move(merged), reports, "spawned");  // its state arrives in loop_start; registers with the control plane as its role
    } catch (const ShardLost& lost) {
        // The same decision as the survivors' (the same plan): end with the same exit code.
        end_job(std::string(lost.what()) + "; restart from the newest HDF5 checkpoint (tier 3)", ft::kExitStateLost);
    } catch (const MpiError& failure) {
        // A failure while joining (a survivor died, or ended the job, inside the exchange): this
        // process has no state to lose; the survivors repair without it or end the job.
        end_job(std::string("a spawned replacement could not join: ") + failure.what() +
                    "; the survivors go on without it (or the launcher relaunches, tier 2)",
                ft::kExitForRelaunch);
    }
}

recovery::RepairOutcome Runtime::Impl::decide_repair(int me, const std::vector<recovery::Report>& reports,
                                        std::string replacement) {
    recovery::Plan plan = recovery::plan_repair(shape, reports);
    note_rejected_spares(me, plan, reports);
    if (plan.version < 0) {
        // Some role's state is lost in memory everywhere: tier 3, everyone restores the newest
        // complete HDF5 checkpoint (the same decision on every process: same files, same plan).
        std::string why;
        const auto version = runtime::Checkpointer::newest_complete(cfg, shape, why);
        if (!version)
            throw ShardLost(plan.dead_roles.empty() ? "?" : topology::role_key(topology::coord_of(
                                                                shape, plan.dead_roles.front())),
                            step, plan.problem + "; and no HDF5 fallback: " + why);
        log("in-memory state lost (" + plan.problem + "); falling back to the HDF5 checkpoint of step " +
            std::to_string(*version));
        plan.version = *version;
        plan.from_checkpoint = true;
        plan.steps_replayed = std::max<std::int64_t>(0, plan.furthest_step - *version);
    }
    if (plan.missing_spares > 0) {
        std::vector<std::string> dead;
        for (const int r : plan.dead_roles) dead.push_back(topology::role_key(topology::coord_of(shape, r)));
        end_job(std::to_string(plan.missing_spares) + " dead role(s) and no spare left to take them "
                "(hot_spares exhausted" + std::string(cfg.recovery.spawn ? ", spawn failed" : ", spawn off") +
                "); slurm.when_spares_exhausted decides what the launcher does next", ft::kExitNoSpare, std::move(dead));
    }
    return recovery::outcome_of(std::move(plan), me, membership.role_index, std::move(replacement));
}

void Runtime::Impl::note_rejected_spares(int me, const recovery::Plan& plan,
                                         const std::vector<recovery::Report>& reports) {
    for (const auto& rejected : plan.rejected_spares) {
        const recovery::Report& spare = reports.at(static_cast<std::size_t>(rejected.process));
        if (rejected.process == me)
            log("this spare failed its admission check (" + rejected.reason + "): it takes no role and stays parked");
        if (plan.role_of_process.at(static_cast<std::size_t>(me)) == 0) {
            log("spare " + std::to_string(spare.id) + " on " + spare.node + " failed its admission check (" +
                rejected.reason + "): passed over");
            launcher.emit(ft::records::SpareRejected{"spare:" + std::to_string(spare.id), spare.node, rejected.reason,
                                            membership.epoch}
                     .to_json());
        }
    }
}

void Runtime::Impl::apply(ft::Comm next_universe, recovery::RepairOutcome outcome) {
    const recovery::Plan& plan = outcome.plan;
    const bool role_changed = membership.role_index != outcome.role;
    if (outcome.part == recovery::Part::recovered) {
        takeover = plan;  // its state arrives in loop_start, once the trainer registered its buffers
        // Faults target whoever holds the role (docs/config.md): the replacement takes the
        // role's faults that lie beyond this failure. Those at or just after the furthest step
        // reached may have fired in the dead process already; they are not re-armed.
        std::vector<config::Fault> ahead;
        for (const auto& f : cfg.faults)
            if (!f.spare && f.step > plan.furthest_step + 1) ahead.push_back(f);
        faults = runtime::FaultInjector(std::move(ahead), true);
        const auto c = topology::coord_of(shape, outcome.role);
        config::Fault holder;
        holder.dp = c.dp, holder.tp = c.tp, holder.pp = c.pp;
        faults.set_identity(holder);
    }
    membership.role_index = outcome.role;
    membership.node_of_role = plan.node_of_role;
    membership.slot_of_role = plan.slot_of_role;
    spare_pool.assign(plan.role_of_process);
    membership.universe = std::move(next_universe);
    outcome.timeline = timeline;
    last_recovery = std::move(outcome);
    ring.blanks_taken_before_repair = ring.stores->blanks_taken();  // the record counts this repair's
    if (role_changed) connect_control_plane();
}

std::optional<Runtime::Impl::ResumePoint> Runtime::Impl::adopt_plan(ft::Comm new_universe,
                                                              const std::vector<recovery::Report>& reports,
                                                              std::string replacement) {
    const auto budget = std::chrono::milliseconds(cfg.recovery.phase_deadline_ms);
    const int me = new_universe.rank();
    apply(std::move(new_universe), decide_repair(me, reports, std::move(replacement)));

    watchdog.arm("rebuild", membership.epoch, budget);
    membership.build_communicators(shape, deadline());
    last_recovery->timeline.mark("rebuild");
    const recovery::Plan& plan = last_recovery->plan;
    if (membership.role_index < 0) {
        finish_recovery();  // an idle spare takes part in the restored-agree, then parks again
        return std::nullopt;
    }
    if (takeover) {  // a replacement: receives its state in loop_start (receive_state)
        watchdog.disarm();
        return std::nullopt;
    }
    watchdog.arm("restore", membership.epoch, budget);
    restore_and_serve(plan);  // restore.cpp
    const ResumePoint at{plan.version, plan.initial};
    step = at.step;  // the live state is version R from here: a retried epoch reports it
    finish_recovery();
    return at;
}

void Runtime::Impl::finish_recovery() {
    membership.universe.agree(1, deadline());
    last_recovery->timeline.mark("restore");
    (void)device.take_nccl_build_ms();  // from here on: the rebuild after this repair
    watchdog.disarm();
    abandoned = false;
    ++membership.epoch;
}

void Runtime::Impl::emit_recovery_record() {
    auto& done = last_recovery->timeline;
    done.mark("first_step");
    // The GPU path rebuilds NCCL in the first step's first collective: its share, apart.
    // Per group too (first_step_nccl_<group>_<action>: docs/gpu.md, "Repairing NCCL").
    const auto nccl_builds = device.take_nccl_builds();
    double nccl_ms = 0;
    for (const auto& [phase, ms] : nccl_builds) nccl_ms += ms;
    if (nccl_ms > 0) done.phases.emplace_back(std::string(kFirstStepNcclPhase), nccl_ms);
    for (const auto& build : nccl_builds) done.phases.push_back(build);
    const auto& plan = last_recovery->plan;
    // Every rank's timeline to role 0: which rank was slow, and the detection time even when
    // role 0 is a replacement that noticed nothing. One small collective, after the first step.
    nlohmann::json mine = nlohmann::json::object();
    for (const auto& [name, ms] : done.phases) mine[name] = std::round(ms * 1000) / 1000;
    const nlohmann::json own = {{"role", topology::role_key(coord())},
                                {"phases_ms", mine},
                                {"slots_made_ahead", ring.stores->blanks_taken() - ring.blanks_taken_before_repair},
                                {"noticed_unix_us", done.noticed_unix_us},
                                {"in_loop_unix_us", done.in_loop_unix_us},
                                {"steps_run", interval.step_ms().size()},
                                {"median_step_ms", runtime::median(interval.step_ms())}};
    std::vector<std::string> gathered;
    guarded([&] { gathered = ft::allgather_strings(membership.work, own.dump()); });
    timeline.noticed_unix_us = 0;  // the next failure's notice starts the next timeline
    if (abandoned || membership.role_index != 0) {
        last_recovery.reset();
        return;
    }
    nlohmann::json failed = nlohmann::json::array(), by_role = nlohmann::json::object(),
                   max_phase = nlohmann::json::object();
    for (int r : plan.dead_roles) failed.push_back(topology::role_key(topology::coord_of(shape, r)));
    std::int64_t noticed = 0, in_loop = 0;
    std::string slowest;
    double slowest_ms = -1;
    std::int64_t slots_made_ahead = 0;
    // The step time a replay costs: the median of the rank that ran the most steps (a
    // replacement has run only the first step after the repair, which carries its set-up).
    std::size_t most_steps = 0;
    double median_step_ms = 0;
    for (const auto& text : gathered) {
        const auto rank = nlohmann::json::parse(text);
        slots_made_ahead += rank.at("slots_made_ahead").get<std::int64_t>();
        if (const auto steps = rank.at("steps_run").get<std::size_t>(); steps > most_steps)
            most_steps = steps, median_step_ms = rank.at("median_step_ms").get<double>();
        const std::string role = rank.at("role");
        by_role[role] = rank.at("phases_ms");
        double repair = 0;  // this rank's phases up to "resumed": its own time to the loop
        for (const auto& [name, ms] : rank.at("phases_ms").items()) {
            const double v = ms.get<double>();
            if (!max_phase.contains(name) || max_phase[name].get<double>() < v) max_phase[name] = v;
            if (!in_first_step(name)) repair += v;
        }
        if (repair > slowest_ms) slowest_ms = repair, slowest = role;
        const std::int64_t n = rank.at("noticed_unix_us"), l = rank.at("in_loop_unix_us");
        if (n > 0 && (noticed == 0 || n < noticed)) noticed = n;
        in_loop = std::max(in_loop, l);
    }
    // The repair as a whole, never the first step after it: from the first notice by any rank to
    // the last rank back in the loop; without both clocks, role 0's phases up to "resumed".
    double total = 0;
    for (const auto& [name, ms] : done.phases)
        if (!in_first_step(name)) total += ms;
    if (noticed > 0 && in_loop > noticed) total = static_cast<double>(in_loop - noticed) / 1e3;
    std::size_t bytes = 0;
    for (const auto& b : state.buffers()) bytes += b.bytes;
    using PhasesMs = ft::records::PhasesMs;
    ft::records::Recovery record;
    record.tier = last_recovery->tier;
    record.epoch = membership.epoch;
    record.failed_roles = failed.get<std::vector<std::string>>();
    record.replacement = last_recovery->replacement;
    record.recovery_version = record.resume_step = plan.version;
    record.steps_replayed = plan.steps_replayed;
    record.bytes_restored_per_replacement = static_cast<std::int64_t>(bytes);
    record.phases_ms = mine.get<PhasesMs>();  // role 0's, as before; every rank's below
    record.total_ms = std::round(total * 1000) / 1000;
    record.phases_ms_by_role = by_role.get<std::map<std::string, PhasesMs>>();
    record.phases_ms_max = max_phase.get<PhasesMs>();  // per phase, the slowest rank's
    record.slowest_role = slowest;  // the rank that took longest to get back to the loop
    record.phases_ms_slowest = by_role.value(slowest, nlohmann::json::object()).get<PhasesMs>();
    record.failure_noticed_unix_us = noticed;  // the first rank to notice (any survivor)
    record.back_in_loop_unix_us = in_loop;     // the last rank back in the loop, state restored
    record.first_step_ms = max_phase.value("first_step", 0.0);
    record.slots_made_ahead = slots_made_ahead;
    // Under auto: the k in use when the failure came (resume_at() has set the start value since).
    record.protection_every = interval.every_before_resume();
    if (const auto replay_ms = runtime::replay_cost_ms(plan.steps_replayed, median_step_ms))
        record.replay_ms = std::round(*replay_ms * 1000) / 1000;
    if (noticed > 0 && in_loop > noticed)
        record.notice_to_loop_ms = std::round(static_cast<double>(in_loop - noticed)) / 1e3;
    launcher.emit(record.to_json());
    last_recovery.reset();
}

Runtime::Impl::ResumePoint Runtime::Impl::warm_restore() {
    // Tier 2: a new MPI job in the same allocation. Every role finds its state in the node-local
    // snapshots the old job left: its own, or a ring replica on another node (docs/ARCHITECTURE.md, "Tiers").
    timeline.begin();
    // The launcher may have moved roles between nodes (a lost node's roles onto a spare, or
    // doubled up on survivors), so the ring of the old job is not this job's: offer every
    // replica this node holds for this role's key, whoever its owner is.
    ring.held_roles.clear();
    const std::string me = topology::role_key(coord());
    for (int owner = 0; owner < shape.size(); ++owner)
        if (owner != membership.role_index &&
            recovery::committed_versions(cfg.job.name, ring.held_segment(owner)).newest >= 0)
            ring.held_roles.push_back(owner);
    // Stale segments of roles that moved (issue 15, case 3) may sit here under this node's name:
    // plan_repair's relaunch mode uses this node's own copy only when it has the version chosen.
    watchdog.arm("relaunch-exchange", membership.epoch,
                 std::chrono::milliseconds(cfg.recovery.phase_deadline_ms));
    // Plan, then verify every byte this process will send or restore from; a copy that fails
    // (a flipped byte in the newest slot) is left out and everyone plans again, so the job
    // falls back to the older slot or a replica instead of failing (issue 15, case 9). Each
    // round leaves out at least one (store, version), so the loop ends.
    recovery::Plan plan;
    for (int round = 0;; ++round) {
        const auto reports = exchange_reports(membership.work, false);
        plan = recovery::plan_repair(shape, reports, recovery::Mode::relaunch);
        if (plan.version < 0 || plan.initial) break;
        const std::string bad = verify_restore_sources(plan);
        int all_good = bad.empty() ? 1 : 0;
        ft::check(MPI_Allreduce(MPI_IN_PLACE, &all_good, 1, MPI_INT, MPI_MIN, membership.work.get()),
                  "MPI_Allreduce(relaunch sources verified)", membership.work);
        if (all_good) break;
        if (round >= 16) end_job("warm relaunch: snapshot copies kept failing verification", ft::kExitStateLost);
    }
    timeline.mark("exchange");
    recovery::RepairOutcome outcome;
    outcome.tier = 2;
    if (plan.version < 0) {
        std::string why;
        const auto version = runtime::Checkpointer::newest_complete(cfg, shape, why);
        if (!version) end_job("warm relaunch: " + plan.problem + "; and no HDF5 fallback: " + why, ft::kExitStateLost);
        plan.version = *version;
        plan.from_checkpoint = true;
        outcome.tier = 3;
    }
    plan.steps_replayed = -1;  // the new ranks cannot know how far the old job got; the launcher can
    // Every role keeps its place (the launcher laid the job out); a role restored from a ring
    // replica is "recovered", one restored from its own node's snapshot a "survivor".
    bool mine = false;
    for (const auto& rep : plan.replacements) mine = mine || rep.role == membership.role_index;
    outcome.role = membership.role_index;
    outcome.part = mine ? recovery::Part::recovered : recovery::Part::survivor;
    outcome.replacement = "relaunch";
    outcome.plan = plan;
    outcome.timeline = timeline;
    last_recovery = std::move(outcome);
    // Tests: "during a restore" (tests/recovery/disruption_matrix.py) is here, after the plan and
    // the verification, before anything is copied; the test continues the process (SIGCONT).
    if (const char* stop = std::getenv(ft::env::kTestStopInRestore); stop && std::string_view(stop) == "1")
        (void)::raise(SIGSTOP);
    // A copy can still fail now (damaged or removed since it was verified: it is read and
    // verified again as it is restored), here or at a peer, which then fails the transfers and
    // the agreement. That is not this job's state lost: a new relaunch plans again from what
    // verifies then (the older slot, another copy, HDF5). A named end with 75 and its record,
    // in every process, never an exception out of the trainer's loop (issue 29, item 2).
    try {
        if (mine) receive_state(plan);
        else restore_and_serve(plan);
        membership.work.agree(1, deadline());
    } catch (const Error& e) {
        end_job("warm relaunch: restoring version " + std::to_string(plan.version) +
                    (plan.from_checkpoint ? " from the HDF5 checkpoint" : "") + " failed (" + e.what() +
                    "); relaunch again: a new relaunch plans without the copies that fail verification then",
                ft::kExitForRelaunch);
    }
    last_recovery->timeline.mark("restore");
    (void)device.take_nccl_build_ms();  // from here on: the rebuild after this repair
    watchdog.disarm();
    if (membership.role_index == 0)
        log("warm relaunch: restored version " + std::to_string(plan.version) + " (" +
            std::to_string(plan.replacements.size()) + " role(s) from ring replicas" +
            (plan.from_checkpoint ? ", from the HDF5 checkpoint" : "") + ")");
    return ResumePoint{plan.version, plan.initial};
}

std::string Runtime::Impl::verify_restore_sources(const recovery::Plan& plan) {
    const std::string me = topology::role_key(coord());
    std::vector<std::pair<std::string, std::string>> sources;  // (segment key, what it is)
    bool replaced = false;
    for (const auto& rep : plan.replacements) {
        replaced = replaced || rep.role == membership.role_index;
        if (rep.payload_from == membership.role_index) {
            const std::string owner = topology::role_key(topology::coord_of(shape, rep.role));
            sources.emplace_back(ring.held_segment(rep.role), "the ring copy of " + owner);
        }
    }
    if (!replaced) sources.emplace_back(ring.own_segment(), "the own snapshot of " + me);
    std::string bad;
    for (const auto& [key, what] : sources) {
        std::string problem;
        try {
            const auto view = ft::SnapshotReader(cfg.job.name, key).committed(plan.version);
            if (!view.ok) problem = view.problem;
        } catch (const Error& e) {
            problem = e.what();
        }
        if (problem.empty()) continue;
        ring.rejected_versions[key].insert(plan.version);
        const std::string line = what + ", version " + std::to_string(plan.version) +
                                 " on node " + self.node_name + ", failed verification (" + problem + ")";
        log("warm relaunch: " + line + "; not using it, planning again without it");
        launcher.send_event({{"event", "snapshot_rejected"}, {"role", me}, {"store", key},
                    {"version", plan.version}, {"problem", problem}});
        bad += (bad.empty() ? "" : "; ") + line;
    }
    return bad;
}

void Runtime::Impl::park_until_needed() {
    // Its own line format: log() reads the role, which a takeover changes meanwhile.
    nccl_warmer = runtime::DevicePath::warm_up_nccl([pid = static_cast<int>(getpid())](const std::string& line) {
        std::fprintf(stderr, "flashrec[spare pid %d]: %s\n", pid, line.c_str());
    });
    while (membership.role_index < 0) {
        if (spares::park(membership.universe, ring.blanks_made() ? spares::SlotSizesHandler{} : [this](const auto& slots) {
                ring.make_blank_slots(slots, "spare" + std::to_string(self.process_id));
            }) == spares::Wake::released) {
            ring.drop_blanks();
            if (nccl_warmer.joinable()) nccl_warmer.join();
            log("released at the end of the job; this hot spare was not needed");
            launcher.emit(ft::records::SpareReleased{static_cast<std::int32_t>(getpid())}.to_json());
            // The trainer never runs on this process: leave like a finished job (BYE first,
            // so the launcher does not count a lost spare).
            launcher.disconnect();
            membership.universe = ft::Comm();
            membership.work = ft::Comm();
            mpi.finalize();
            std::exit(0);
        }
        (void)recover();  // nothing to resume: parked again, or a role whose state arrives in loop_start
    }
    // A role now: its first step builds the real communicator, after the set-up it waited for.
    if (nccl_warmer.joinable()) nccl_warmer.join();
}

}  // namespace flashrec
