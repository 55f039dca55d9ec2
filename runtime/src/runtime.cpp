#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <cmath>
#include <csignal>
#include <cstring>
#include <exception>
#include <map>

#include "flashrec/ft/checksum.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/pmix_connection_keeper.hpp"
#include "flashrec/ft/pmix_failure_events.hpp"
#include "flashrec/ft/leaving.hpp"
#include "flashrec/ft/ring_offer.hpp"
#include "flashrec/runtime/interval_choice.hpp"
#include "runtime_impl.hpp"
#include "flashrec/spares/spares.hpp"

#if FLASHREC_WITH_CUDA
#include "flashrec/gpu/handles.hpp"
#endif

namespace flashrec {

namespace {

using Clock = std::chrono::steady_clock;

// `--config <file>` / `--fault <spec>` from argv; the rest is the trainer's.
struct CommandLine {
    std::string config_path;
    std::vector<std::string> faults;
    std::string node;  // --flashrec-node: set by the parents of a spawned replacement
    bool from_checkpoint = false;  // --resume: start from the newest HDF5 checkpoint
};

CommandLine read_command_line(int argc, char** argv) {
    CommandLine cl;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&](const char* flag) -> std::string {
            if (i + 1 >= argc) throw ConfigError("command line", 0, flag, "needs a value");
            return argv[++i];
        };
        if (arg == "--config") cl.config_path = value("--config");
        else if (arg.rfind("--config=", 0) == 0) cl.config_path = arg.substr(9);
        else if (arg == "--fault") cl.faults.push_back(value("--fault"));
        else if (arg.rfind("--fault=", 0) == 0) cl.faults.push_back(arg.substr(8));
        else if (arg == "--flashrec-node") cl.node = value("--flashrec-node");
        else if (arg == "--resume") cl.from_checkpoint = true;
    }
    if (cl.config_path.empty()) {
        if (const char* env = std::getenv(ft::env::kConfig)) cl.config_path = env;
    }
    return cl;
}

// Node names of every process in `comm`. On one machine a job that asks for several nodes
// runs on virtual nodes "node<k>", ranks_per_node actives each, hot spares on the node after
// them (FLASHREC_NODE overrides the name of a process's node).
std::vector<std::string> node_names(const ft::Comm& comm, const config::Job& job, bool& is_virtual) {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    if (const char* forced = std::getenv(ft::env::kNode)) {
        std::snprintf(name, sizeof name, "%s", forced);
    } else {
        int len = 0;
        MPI_Get_processor_name(name, &len);
    }
    const int n = comm.size();
    std::vector<char> all(static_cast<size_t>(n) * MPI_MAX_PROCESSOR_NAME);
    ft::check(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                            MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm.get()),
              "MPI_Allgather(node names)", comm);
    std::vector<std::string> names;
    for (int r = 0; r < n; ++r) names.emplace_back(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
    is_virtual = job.nodes > 1 && !std::getenv(ft::env::kNode) &&
                 std::all_of(names.begin(), names.end(), [&](auto& x) { return x == names[0]; });
    if (is_virtual)
        for (int r = 0; r < n; ++r)
            names[static_cast<size_t>(r)] = "node" + std::to_string(std::min(r / job.ranks_per_node, job.nodes));
    return names;
}

// FLASHREC_ROLE_OF_RANK="2,0,1,3": the role index of each active world rank, as flashrec-launch
// laid the job out. A relaunch that moves a lost node's roles elsewhere must keep every other
// role on the node that holds its snapshots, which the node-order rule alone cannot promise.
std::vector<int> roles_from_launcher(const std::string& text, int roles) {
    std::vector<int> role_of;
    std::vector<bool> seen(static_cast<size_t>(roles), false);
    std::stringstream list(text);
    std::string item;
    while (std::getline(list, item, ',')) {
        int role = -1;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), role);
        if (ec != std::errc() || end != item.data() + item.size() || role < 0 || role >= roles ||
            seen[static_cast<size_t>(role)])
            throw Error(std::string(ft::env::kRoleOfRank) + "='" + text + "': '" + item + "' is not an unused role index 0.." +
                        std::to_string(roles - 1));
        seen[static_cast<size_t>(role)] = true;
        role_of.push_back(role);
    }
    if (static_cast<int>(role_of.size()) != roles)
        throw Error(std::string(ft::env::kRoleOfRank) + "='" + text + "' names " + std::to_string(role_of.size()) +
                    " roles; the job has " + std::to_string(roles));
    return role_of;
}

}  // namespace

// --- GPU path ---------------------------------------------------------------------------------
// runtime::DevicePath (device_path.cpp) holds everything CUDA-specific; host buffers never go there.

runtime::DevicePath::Step Runtime::Impl::device_step() {
    return {membership.dp, membership.epoch, deadline(), abandoned,
            [this](const std::exception& e) { on_failure(e); }, &membership.tp, &membership.pp,
            ft::parse_nccl_repair(cfg.recovery.nccl_repair)};
}

// ---------------------------------------------------------------------------------------------

MpiSession::MpiSession(int& argc, char**& argv) {
    // A peer that dies while the TCP BTL writes to it must give this process an MPI error,
    // not SIGPIPE: without this, killing one rank mid-replication killed its successor too.
    std::signal(SIGPIPE, SIG_IGN);
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided < MPI_THREAD_MULTIPLE)
        throw Error("flashrec needs MPI_THREAD_MULTIPLE (replication runs on its own thread)");
    MPI_Comm host = MPI_COMM_NULL;
    int on_host = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host) == MPI_SUCCESS) {
        MPI_Comm_size(host, &on_host);
        MPI_Comm_free(&host);
    }
    // Or told so: nodes that share one machine (mpi.yield_when_idle: true) look alone to MPI.
    const char* yield_value = std::getenv(ft::env::kMpiYieldWhenIdle);
    const std::string_view yield = yield_value ? yield_value : "";
    host_oversubscribed = on_host > ::sysconf(_SC_NPROCESSORS_ONLN) || yield == "1" || yield == "true" || yield == "yes";
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    exit_notices.emplace(world_rank == 0);
    if (ft::failure_events_kept_local()) {
        if (const auto why = ft::failure_events_interposer_unbound())
            throw Error("direct launch (FLASHREC_DIRECT_LAUNCH=1): ULFM's failure events would reach Slurm's PMIx server, "
                        "which ends the step on the first failure: " + *why + " (docs/ulfm-traps.md, trap 15)");
        // This process's own end must not reach it either (trap 17).
        (void)ft::keep_pmix_connection();
    }
    detector = ft::read_in_band_detector();
    if (const auto interval = ft::ticker_interval(detector)) ticker.emplace(*interval);
    ft::leave_by_signal(detector.on);
}

void MpiSession::finalize() {
    ticker.reset();
    exit_notices.reset();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

MpiSession::~MpiSession() {
    if (std::uncaught_exceptions() == 0) finalize();
    else {
        ticker.reset();
        exit_notices.reset();
    }
}

Runtime::Impl::Impl(int& argc, char**& argv, const std::string& config_path)
    : mpi(argc, argv) {
    MPI_Comm_rank(MPI_COMM_WORLD, &self.world_rank);
    const CommandLine cl = read_command_line(argc, argv);
    const std::string path = config_path.empty() ? cl.config_path : config_path;
    if (path.empty())
        throw ConfigError("command line", 0, "--config",
                          "is missing: pass --config <train.yaml> or set FLASHREC_CONFIG");
    cfg = config::load(path);
    for (const auto& spec : cl.faults) {
        cfg.faults.push_back(config::parse_fault(spec, "--fault"));
        config::validate_fault(cfg.faults.back(), cfg.job, "--fault", cfg.protection);
    }
    shape = {cfg.job.dp, cfg.job.tp, cfg.job.pp};
    started.from_checkpoint = cl.from_checkpoint || std::getenv(ft::env::kResume) != nullptr;
    started.relaunched = std::getenv(ft::env::kRelaunch) != nullptr;
    ring.fresh_snapshots = !started.relaunched;
    loop.pristine = !started.relaunched;
    timeline.debug = cfg.logging.level == "debug";
    cfg.mpi = config::with_environment(cfg.mpi, [](const char* name) { return std::getenv(name); });
    const bool shared_memory = cfg.mpi.transport != "tcp";
    for (const auto& problem : {ft::detector_mismatch(shared_memory && cfg.mpi.detector, mpi.detector),
                                ft::exits_unseen(shared_memory, mpi.detector.on, *mpi.exit_notices)})
        if (problem && self.world_rank == 0)
            std::fprintf(stderr, "flashrec[pid %d]: warning: %s\n", static_cast<int>(getpid()), problem->c_str());

    for (int i = 0; i < argc; ++i) self.start_args.emplace_back(argv[i]);
    faults = runtime::FaultInjector(cfg.faults, !spares::was_spawned());
    faults.announce_to([this](const ft::records::FaultInjected& f) { launcher.emit(f.to_json(), true); });
    watchdog.before_exit([this](const std::string& why, int code) {
        (void)launcher.emit_last(ft::records::EndingJob{code, static_cast<std::int32_t>(getpid()), why, {}}.to_json());
    });
    if (spares::was_spawned()) {
        // A cold spare: the survivors started this process to take a dead role.
        self.node_name = cl.node;
        join_as_spawned();
        return;
    }
    membership.universe = ft::Comm::dup_world("universe");
    self.process_id = self.world_rank;
    const int expected = shape.size() + cfg.job.hot_spares;
    if (membership.universe.size() != expected)
        throw ConfigError(cfg.path, 0, "job",
                          "needs " + std::to_string(shape.size()) + " active ranks + " +
                              std::to_string(cfg.job.hot_spares) + " hot spares = " +
                              std::to_string(expected) + " processes, but the job has " +
                              std::to_string(membership.universe.size()));
    const std::vector<std::string> names = node_names(membership.universe, cfg.job, self.virtual_nodes);
    self.node_name = names[static_cast<size_t>(self.world_rank)];
    std::map<std::string, int> node_id;
    std::vector<int> active_nodes;
    for (int p = 0; p < shape.size(); ++p)
        active_nodes.push_back(node_id.emplace(names[static_cast<size_t>(p)],
                                               static_cast<int>(node_id.size())).first->second);
    const auto role_of_process = std::getenv(ft::env::kRoleOfRank)
                                     ? roles_from_launcher(std::getenv(ft::env::kRoleOfRank), shape.size())
                                     : topology::assign_roles(shape, active_nodes,
                                                              topology::parse_placement(cfg.job.placement));
    membership.node_of_role.assign(static_cast<size_t>(shape.size()), 0);
    for (int p = 0; p < shape.size(); ++p)
        membership.node_of_role[static_cast<size_t>(role_of_process[static_cast<size_t>(p)])] =
            active_nodes[static_cast<size_t>(p)];
    // Slots: each process's index among the job's processes (hot spares too) on its node.
    const auto slot_of_process = [&](int p) {
        return static_cast<int>(std::count(names.begin(), names.begin() + p, names[static_cast<size_t>(p)]));
    };
    membership.slot_of_role.assign(static_cast<size_t>(shape.size()), 0);
    for (int p = 0; p < shape.size(); ++p)
        membership.slot_of_role[static_cast<size_t>(role_of_process[static_cast<size_t>(p)])] = slot_of_process(p);
    membership.own_slot = slot_of_process(self.world_rank);
    if (self.world_rank < shape.size()) membership.role_index = role_of_process[static_cast<size_t>(self.world_rank)];
    spare_pool.assign_range(shape.size(), membership.universe.size());

    config::Fault me;
    if (membership.role_index >= 0) {
        const auto c = coord();
        me.dp = c.dp, me.tp = c.tp, me.pp = c.pp;
    } else {
        me.spare = true;
        me.spare_index = self.world_rank - shape.size();
        self.hot_spare_index = me.spare_index;
    }
    faults.set_identity(me);
    membership.build_communicators(shape, deadline());
    connect_control_plane();
    if (membership.role_index < 0) park_until_needed();
}

Role Runtime::Impl::role() const {
    const auto c = coord();
    return Role{c.dp, c.tp, c.pp};
}

namespace {
ft::wire::Phase wire_phase(Phase p) {
    switch (p) {
        case Phase::forward: return ft::wire::Phase::compute;
        case Phase::allreduce: return ft::wire::Phase::grad_sync;
        case Phase::sync: return ft::wire::Phase::commit_wait;
        case Phase::optimizer: return ft::wire::Phase::optimizer;
        case Phase::replication: return ft::wire::Phase::compute;
        case Phase::recovery: return ft::wire::Phase::recovery;
        case Phase::tp_exchange: return ft::wire::Phase::compute;  // inside forward/backward
        case Phase::pp_exchange: return ft::wire::Phase::compute;
    }
    return ft::wire::Phase::idle;
}
}  // namespace

void Runtime::Impl::enter(Phase p, std::int64_t tag) {
    launcher.progress.phase.store(wire_phase(p), std::memory_order_relaxed);
    launcher.progress.step_tag.store(tag, std::memory_order_relaxed);
    faults.at(step, static_cast<config::Phase>(p));
}

void Runtime::Impl::connect_control_plane() {
    const std::string who = membership.role_index >= 0 ? topology::role_key(coord())
                                                        : "spare:" + std::to_string(self.process_id);
    launcher.connect(who, self.world_rank, std::chrono::milliseconds(cfg.detection.heartbeat_ms),
                     mpi.exit_notices ? &*mpi.exit_notices : nullptr, membership.role_index < 0);
}

void Runtime::Impl::revoke_all() noexcept {
    device.abort();  // first: DP peers waiting in NCCL for this process abort now
    if (ring.protection) ring.protection->abort();
    if (checkpointer) checkpointer->abort();
    membership.revoke_all();
}

namespace {
double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }
}  // namespace

void Runtime::Impl::start_protection(std::int64_t version) {
    ring.retire(quarantine);
    if (!cfg.protection.enabled) {
        // HDF5 checkpoints are written from committed snapshots: none without protection.
        if (cfg.checkpoint.every_steps > 0 && membership.role_index == 0 && membership.epoch == 0)
            log("warning: checkpoint.every_steps is set but protection.enabled is false: "
                "no HDF5 checkpoints will be written");
        return;
    }
    ring.start(version, {cfg.protection, state.regions(), std::move(membership.replication), quarantine, deadline(),
                         [&] { faults.at(version, config::Phase::protection_start); },
                         [&](ft::ProtectionSetup& setup) {
                             setup.during_replication = [this](std::int64_t v) {
                                 faults.at(v, config::Phase::replication);
                             };
                             // null: Protection copies host buffers with memcpy
                             setup.copier = device.snapshot_copier(state.buffers(), cfg.protection.device_hash);
                             if (const std::string problem = device.take_snapshot_hash_problem(); !problem.empty())
                                 log("protection: " + problem);
                             setup.after_abort = quarantine.after_abort();  // its matched receives may still write
                             // A nice thread runs on cores the step leaves idle. A host with more
                             // processes than cores has none: there it only waits, and any other load
                             // on the host starves it while every step waits for it (4 ranks and 2 CPU
                             // burners on 2 cores: 300 steps in 90 s at nice 19, 11 s at 0).
                             setup.thread_nice = mpi.host_oversubscribed ? 0 : cfg.protection.thread_nice;
                             setup.poll_while_step_waits = !mpi.host_oversubscribed;
                             // A repair (in-job or a warm relaunch: a plan is being adopted) makes the
                             // stores of new pairs on the protection thread, off the way back into the
                             // loop; a job's start makes them here, so that a /dev/shm too small fails
                             // before the first step.
                             setup.open_new_stores_in_background = last_recovery.has_value();
                         },
                         // A snapshot of device state waits (on the GPU) for the work enqueued so far.
                         state.has_device_buffers()
                             ? std::function<void()>([this] { ring.protection->setup().copier->state_ready(device.stream()); })
                             : std::function<void()>()});
    if (membership.role_index == 0 && membership.epoch == 0) {
        // From the layouts: after a warm relaunch the stores are opened in the background.
        const auto& made = ring.protection->setup();
        std::vector<std::size_t> slots(2, ft::snapshot_segment_bytes(ft::full_layout(made.regions)));
        for (const auto& p : made.predecessors) slots.resize(slots.size() + 2, ft::snapshot_segment_bytes(p.payload));
        const std::size_t own = 2 * slots[0];
        std::size_t total = 0;
        for (std::size_t bytes : slots) total += bytes;
        char line[256];
        std::snprintf(line, sizeof line,
                      "protection: %.3f MiB of host memory for role 0 = 2 x %.3f MiB own snapshot + "
                      "2 x %.3f MiB replicas of %zu predecessor(s) (k=%d) in /dev/shm",
                      mib(total), mib(own / 2), mib((total - own) / 2),
                      ring.protection->setup().predecessors.size(), cfg.protection.replicas);
        log(line);
        if (mpi.host_oversubscribed && cfg.protection.thread_nice > 0)
            log("protection: more processes than cores on this host: the protection thread keeps the "
                "trainer's priority (protection.thread_nice " + std::to_string(cfg.protection.thread_nice) +
                " applies only where cores are left idle)");
        // Parked hot spares make these slots ahead, so that taking over a role costs no
        // allocation (roles whose sizes differ from role 0's make theirs at takeover).
        try {
            spare_pool.send_slot_sizes_to_all(membership.universe, slots);
        } catch (const Error& e) {
            log(std::string("could not send the snapshot slot sizes to the hot spares: ") + e.what());
        }
    }
    ring.snapshot(version);
    if (checkpointer) checkpointer->rebind(checkpoint_identity(), std::move(membership.checkpoint));
    else checkpointer = std::make_unique<runtime::Checkpointer>(
             cfg, state.buffers(), checkpoint_identity(), std::move(membership.checkpoint),
             [this](const ft::records::CheckpointPublished& c) { launcher.emit(c.to_json()); });
}

runtime::CheckpointIdentity Runtime::Impl::checkpoint_identity() const {
    return {shape, membership.role_index, topology::role_key(coord()), ring.own_segment(), membership.epoch};
}

void Runtime::Impl::finish_loop() {
    device.finalize(device_step());
    const std::int64_t last = cfg.job.steps - 1;
    faults.at(last, config::Phase::loop_end);
    guarded([&] {
        if (ring.protection) ring.protection->wait();
        if (checkpointer) checkpointer->finish();
        ft::check(MPI_Barrier(membership.work.get()), "MPI_Barrier(end of loop)", membership.work);
    });
    // A failure at the end of the loop (a role died after the last sync point, and its groups'
    // peers abandoned the step while the others got here) is repaired like one in a step: the
    // caller recovers and the last step runs again. Nothing below has happened yet.
    if (abandoned) return;
    ft::nonzero_exits_by_signal(false);
    const std::size_t shm_bytes = ring.protection ? ring.protection->host_bytes() : 0;
    const auto snapshot = ring.protection ? ring.protection->last_snapshot() : ft::SnapshotTiming{};
    const auto totals = ring.protection ? ring.protection->total_snapshots() : ft::SnapshotTiming{};
    const std::size_t snapshots = ring.protection ? ring.protection->snapshot_count() : 0;
    ring.protection.reset();
    if (membership.role_index == 0) {
        std::size_t state_bytes = 0;
        for (const auto& b : state.buffers()) state_bytes += b.bytes;
        launcher.emit_job_stats(topology::role_key(coord()), interval, cfg.protection, state_bytes,
                                {shm_bytes, snapshot, totals, snapshots});
        release_hot_spares();
    }
    // The snapshot segments stay until the job has ended (LauncherLink::finish_job): a failure in the trainer's
    // code after the loop is repaired by a warm relaunch from them. The state is hashed now:
    // by ~Runtime the trainer's buffers may be gone (declared after the Runtime).
    launcher.loop_finished(own_state_checksum());
    faults.at(last, config::Phase::after_loop);
}


void Runtime::Impl::remove_node_snapshots() {
    // One process per node removes them all, including those of processes that died earlier
    // on that node.
    const auto& node_of = membership.node_of_role;
    for (int r = 0; r < membership.role_index; ++r)
        if (node_of[static_cast<size_t>(r)] == node_of[static_cast<size_t>(membership.role_index)]) return;
    ft::remove_all(cfg.job.name);
}

void Runtime::Impl::checkpoint_and_leave() {
    // slurm.when_spares_exhausted = checkpoint-and-requeue: the launcher relaunched the job on
    // the nodes that are left only to turn the restored state into an HDF5 checkpoint, which
    // the requeued job resumes from.
    if (!checkpointer) end_job("a checkpoint for the requeue needs checkpoint.dir and protection", ft::kExitStateLost);
    guarded([&] {
        if (ring.protection) ring.protection->wait();
        checkpointer->checkpoint_now(step);
        checkpointer->finish();
        ft::check(MPI_Barrier(membership.work.get()), "MPI_Barrier(checkpoint for requeue)", membership.work);
    });
    if (abandoned) end_job("the checkpoint for the requeue failed (see above)", ft::kExitStateLost);
    if (membership.role_index == 0) {
        log("checkpoint for requeue: step " + std::to_string(step) + " written to " + cfg.checkpoint.dir +
            "; leaving so that the requeued job resumes from it");
        release_hot_spares();
    }
    ring.protection.reset();
    checkpointer.reset();
    ring.drop_blanks();
    remove_node_snapshots();
    launcher.disconnect();  // BYE: this process leaves on purpose
    membership.free_all();
    mpi.finalize();
    std::exit(0);
}

void Runtime::Impl::snapshot_if_due(std::int64_t version) {
    // A snapshot of device state waits (on the GPU) for this step's optimizer and allgather.
    if (ring.protection && interval.due(version)) ring.snapshot(version);
}

void Runtime::Impl::choose_interval(std::int64_t version) {
    if (!ring.protection || !interval.choice_due(version)) return;
    // The largest over the active roles (each waits for the slowest at every sync point); -1:
    // none measured (a replacement since the repair). Every role then takes the same decision.
    std::vector<double> measured = interval.recent_medians();
    guarded([&] {
        MPI_Request request = MPI_REQUEST_NULL;
        ft::check(MPI_Iallreduce(MPI_IN_PLACE, measured.data(), 2, MPI_DOUBLE, MPI_MAX, membership.work.get(), &request),
                  "MPI_Iallreduce(protection interval)", membership.work);
        membership.work.wait(request, "MPI_Iallreduce(protection interval)");
    });
    if (abandoned) return;
    const auto record = interval.choose(version, measured);
    if (!record || membership.role_index != 0) return;
    char line[256];
    std::snprintf(line, sizeof line, "protection.every = auto: k %lld -> %lld from version %lld (step %.3f ms, %.3f ms "
                  "with a snapshot): ", static_cast<long long>(record->previous), static_cast<long long>(record->every),
                  static_cast<long long>(version), measured[0], measured[1]);
    log(line + record->reason);
    launcher.emit(record->to_json());
}

void Runtime::Impl::note_versions_to_replay(std::int64_t restored) {
    const bool checked = membership.role_index >= 0 && cfg.protection.enabled;
    replay.note_versions_to_replay(restored, checked ? ring.own_and_held_segments() : std::vector<std::string>{});
}

void Runtime::Impl::arm_replay_probe(std::int64_t from) {
    replay.disarm_probe();
    if (membership.role_index >= 0 && cfg.protection.probes_replay()) replay.arm_probe(from);
}

void Runtime::Impl::rewind_for_replay_probe() {
    // Snapshot `step` (own store and the ring copies this process holds) commits first: its
    // hashes are what the replay must reproduce.
    guarded([&] {
        if (ring.protection) ring.protection->wait();
    });
    if (abandoned) return;  // a failure: the caller repairs (resume_at() disarms the probe)
    const auto rewind_started = Clock::now();
    const std::int64_t from = replay.probe().from;
    const std::int64_t to = step;
    note_versions_to_replay(from);  // version `to` of every store here, as the first pass committed it
    // The live state back to version `from`, from the own snapshot (the ping-pong slots hold
    // `from` and `to`: no version is snapshotted between them), verified as it is copied.
    const auto& buffers = state.buffers();
    std::vector<std::span<std::byte>> live;
    if (!state.has_device_buffers())
        for (const auto& b : buffers) live.emplace_back(static_cast<std::byte*>(b.data), b.bytes);
    const std::string key = ring.own_segment();
    std::shared_ptr<ft::SnapshotStore> store = ring.stores->find(key);
    std::optional<ft::SnapshotReader> reader;
    if (!store) reader.emplace(cfg.job.name, key);
    const ft::SnapshotView view = store ? store->copy_committed(from, live) : reader->copy_committed(from, live);
    if (!view.ok)
        throw CorruptState(key, "", "the start-up replay probe cannot restore version " + std::to_string(from) +
                                        ": " + view.problem);
    std::vector<std::size_t> device_buffers;
    std::vector<std::span<const std::byte>> device_sources;
    for (std::size_t b = 0; b < buffers.size(); ++b) {
        if (buffers[b].device >= 0) {
            device_buffers.push_back(b);
            device_sources.push_back(view.buffers[b].bytes);
        } else if (live.empty()) {
            std::memcpy(buffers[b].data, view.buffers[b].bytes.data(), buffers[b].bytes);
        }
    }
    device.restore(state.buffers(), device_buffers, device_sources);
    step = from;
    replay.probe_rewound(to, rewind_started);
    if (membership.role_index == 0)
        log("replay probe: version " + std::to_string(to) + " committed; restored version " +
            std::to_string(from) + " and replaying steps " + std::to_string(from) + ".." +
            std::to_string(to - 1) + " to compare it (protection.replay_check: start)");
}

void Runtime::Impl::judge_replay_probe(bool everyone_exact) {
    const ft::records::ReplayProbe record = replay.probe_verdict(everyone_exact);
    if (everyone_exact) {
        if (membership.role_index != 0) return;
        char line[200];
        std::snprintf(line, sizeof line, "replay probe passed: version %lld replayed from %lld bitwise on every role "
                      "(restore %.3f ms, %lld steps replayed in %.3f ms)", static_cast<long long>(record.to),
                      static_cast<long long>(record.from), record.restore_ms, static_cast<long long>(record.steps),
                      record.replay_ms);
        log(line);
        launcher.emit(record.to_json());
        return;
    }
    // Refused on every role alike (the verdict was agreed at this sync point): nothing the job
    // computed is worth keeping, and a relaunch would be refused the same way (exit 78).
    if (membership.role_index == 0) {
        launcher.emit(record.to_json(), true);
        release_hot_spares();
    }
    ring.protection.reset();  // idle: this sync point waited for its snapshot
    ring.unlink_own_segments();
    // Nobody leaves before every role removed its segments: mpirun may end the others once the
    // first process is gone.
    try {
        ft::check(MPI_Barrier(membership.work.get()), "MPI_Barrier(replay probe refused)", membership.work);
    } catch (const Error& e) {
        log(std::string("leaving without the others: ") + e.what());
    }
    end_job(runtime::replay_probe_refusal(record.from, record.to, cfg.protection.every), ft::kExitDeterministicError);
}

void Runtime::Impl::resume_at(const ResumePoint& at) {
    step = at.step;
    check_platform();
    // Every role the same k, without a collective: a replacement has no history of choices.
    interval.resumed_at(step);
    // After a repair or a relaunch only: a start's stores may hold an earlier job's versions.
    if (last_recovery) note_versions_to_replay(step);  // before protection rewrites a slot
    else replay.forget();
    if (last_recovery && replay.probe().from >= 0) {
        // A repair before the probe's verdict: the repair's own replay check applies.
        if (membership.role_index == 0)
            log("replay probe: not completed (a repair came first); the repair checks the versions it replays");
        replay.disarm_probe();
    }
    try {
        start_protection(step);
    } catch (const MpiError& e) {
        on_failure(e);  // a peer failed while protection started: the loop repairs from `step`
    } catch (const DeadlineExceeded& e) {
        on_failure(e);
    }
    if (last_recovery) last_recovery->timeline.mark("resumed");
    if (at.first_version) protect_first_version();
}

void Runtime::Impl::register_platform() {
    if (state.find(runtime::platform::kBufferName)) return;
    // takeover: this process took a dead role (a hot spare or a spawned one).
    platform_stamp.own = runtime::platform::probe(device.gpu_model(), takeover.has_value(), started.relaunched);
    platform_stamp.bytes.assign(runtime::platform::kBufferBytes, std::byte{0});
    runtime::platform::encode(platform_stamp.own, platform_stamp.bytes);
    state.add({runtime::platform::kBufferName, platform_stamp.bytes.data(), platform_stamp.bytes.size(), DType::u8,
               Redundancy::envelope, -1},
              false, true);
}

void Runtime::Impl::check_platform() {
    if (membership.role_index < 0 || platform_stamp.bytes.empty()) return;
    const auto writer = runtime::platform::decode(platform_stamp.bytes);
    runtime::platform::encode(platform_stamp.own, platform_stamp.bytes);  // from here on, this process writes the state
    if (!writer) return;  // a checkpoint of a flashrec that recorded none: nothing to compare
    const auto differences = runtime::platform::compare(*writer, platform_stamp.own);
    if (differences.empty()) return;
    ft::records::PlatformMismatch record;
    record.role = topology::role_key(coord());
    record.pid = static_cast<std::int32_t>(getpid());
    record.restore = last_recovery ? (last_recovery->tier == 3                   ? "checkpoint"
                                      : last_recovery->replacement == "relaunch" ? "relaunch"
                                                                                  : "in_job")
                                   : "checkpoint";  // without a recovery, only --resume restores
    record.version = step;
    record.flashrec_version = flashrec::version();
    record.refused = cfg.recovery.require_same_platform;
    std::string fields;
    for (const auto& d : differences) {
        record.differences.push_back({d.field, d.writer, d.here});
        fields += (fields.empty() ? "" : ", ") + d.field + " '" + d.writer + "' -> '" + d.here + "'";
    }
    const std::string what = "the state of version " + std::to_string(step) + " (" + record.restore +
                             " restore) was written on another platform: " + fields;
    if (!record.refused) {
        log("warning: " + what + "; its steps may compute other bits than the writer's "
            "(recovery.require_same_platform: true refuses such a restore)");
        launcher.emit(record.to_json());
        return;
    }
    launcher.emit(record.to_json(), true);
    end_job(what + "; recovery.require_same_platform refuses it", ft::kExitPlatformMismatch);
}

void Runtime::Impl::protect_first_version() {
    // Not enter(): a step's sync-phase fault belongs to its own sync point, not to this wait.
    launcher.progress.phase.store(ft::wire::Phase::commit_wait, std::memory_order_relaxed);
    launcher.progress.step_tag.store(step, std::memory_order_relaxed);
    guarded([&] {
        if (ring.protection) ring.protection->wait();
        int everyone_here = 1;
        ft::check(MPI_Allreduce(MPI_IN_PLACE, &everyone_here, 1, MPI_INT, MPI_MIN, membership.work.get()),
                  "MPI_Allreduce(first version committed)", membership.work);
    });
}

void Runtime::Impl::on_failure(const std::exception& e) {
    if (!abandoned) {
        timeline.noticed_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::system_clock::now().time_since_epoch()).count();
        // An NCCL wait saw it earlier, then released its communicator first (slow: docs/gpu.md).
        if (const auto nccl = runtime::DevicePath::failure_timing(e)) {
            timeline.noticed_unix_us = nccl->seen_unix_us;
            timeline.nccl_release_ms = nccl->release_ms;
        }
    }
    if (!abandoned) log(std::string("step ") + std::to_string(step) + " abandoned: " + e.what());
    if (const auto* error = dynamic_cast<const MpiError*>(&e); error && !abandoned)
        launcher.emit(ft::records::MpiErrorSeen{static_cast<std::int32_t>(getpid()), error->error_class(), error->operation()}
                 .to_json());
    abandoned = true;
    revoke_all();
}

void Runtime::Impl::log(const std::string& text) const {
    std::fprintf(stderr, "flashrec[%s pid %d]: %s\n",
                 membership.role_index >= 0 ? topology::role_key(coord()).c_str() : "spare",
                 static_cast<int>(getpid()), text.c_str());
}

// ---------------------------------------------------------------------------------------------

std::string Role::key() const { return topology::role_key({dp, tp, pp}); }

Runtime::Runtime(int& argc, char**& argv) : Runtime(argc, argv, std::string()) {}

Runtime::Runtime(int& argc, char**& argv, const std::string& config_path)
    : impl_(std::make_unique<Impl>(argc, argv, config_path)) {}

Runtime::~Runtime() {
    // A trainer that leaves by an exception under plain mpirun: no launcher will relaunch from
    // this process's segments or clean them up, so it removes its own stores (its snapshots and
    // the ring copies it held) instead of leaving RAM behind in /dev/shm. Other processes' stores
    // stay: survivors on this node may still need them. Under flashrec-launch the launcher owns
    // their lifetime (a warm relaunch may need them); a SIGKILLed process leaves them in any case
    // (flashrec-snapshots remove <job>). docs/limitations.md.
    auto& im = *impl_;
    if (std::uncaught_exceptions() == 0) {
        try {
            if (im.membership.role_index >= 0)
                if (const auto everyone = im.launcher.finish_job(
                        {topology::role_key(im.coord()), im.cfg.job.steps, im.membership.work, im.faults,
                         std::chrono::milliseconds(im.cfg.recovery.phase_deadline_ms)})) {
                    im.ring.drop_blanks();
                    if (*everyone) im.remove_node_snapshots();
                }
        } catch (const std::exception& e) {  // a destructor must not throw: the segments stay
            im.log(std::string("could not end the job cleanly: ") + e.what());
        }
        return;
    }
    if (im.launcher.connected() || im.membership.role_index < 0 || !im.loop.entered) return;
    try {
        im.ring.retire(im.quarantine);
        im.quarantine.release();
        im.ring.unlink_own_segments();
    } catch (...) {  // a destructor during unwinding must not throw
    }
}

Role Runtime::role() const { return impl_->role(); }
int Runtime::local_slot() const {
    const auto& m = impl_->membership;
    return m.role_index >= 0 ? m.slot_of_role.at(static_cast<size_t>(m.role_index)) : m.own_slot;
}
int Runtime::dp_size() const { return impl_->shape.dp; }
int Runtime::tp_size() const { return impl_->shape.tp; }
int Runtime::pp_size() const { return impl_->shape.pp; }
MPI_Comm Runtime::dp_comm() const { return impl_->membership.dp.get(); }
MPI_Comm Runtime::tp_comm() const { return impl_->membership.tp.get(); }
MPI_Comm Runtime::pp_comm() const { return impl_->membership.pp.get(); }
MPI_Comm Runtime::work_comm() const { return impl_->membership.work.get(); }

std::uint64_t Runtime::seed() const { return impl_->cfg.job.seed; }

std::int64_t Runtime::total_steps() const { return impl_->cfg.job.steps; }

bool Runtime::is_leader() const { return impl_->membership.role_index == 0; }

namespace {
YAML::Node trainer_value(const config::Config& cfg, const std::string& key) {
    YAML::Node node = YAML::Clone(cfg.trainer);
    size_t start = 0;
    while (node && node.IsMap()) {
        const size_t dot = key.find('.', start);
        node = node[key.substr(start, dot == std::string::npos ? std::string::npos : dot - start)];
        if (dot == std::string::npos) return node;
        start = dot + 1;
    }
    return YAML::Node();
}

template <class T>
T trainer_param(const config::Config& cfg, const std::string& key, const T* fallback) {
    const YAML::Node v = trainer_value(cfg, key);
    if (!v || v.IsNull()) {
        if (fallback) return *fallback;
        throw ConfigError(cfg.path, 0, "trainer." + key, "is required by the trainer but missing");
    }
    try {
        return v.as<T>();
    } catch (const YAML::Exception&) {
        throw ConfigError(cfg.path, v.Mark().line + 1, "trainer." + key,
                          "has the wrong type: '" + v.as<std::string>() + "'");
    }
}
}  // namespace

std::int64_t Runtime::param_int(const std::string& key) const {
    return trainer_param<std::int64_t>(impl_->cfg, key, nullptr);
}

std::int64_t Runtime::param_int(const std::string& key, std::int64_t fallback) const {
    return trainer_param<std::int64_t>(impl_->cfg, key, &fallback);
}
double Runtime::param_double(const std::string& key) const {
    return trainer_param<double>(impl_->cfg, key, nullptr);
}
double Runtime::param_double(const std::string& key, double fallback) const {
    return trainer_param<double>(impl_->cfg, key, &fallback);
}

std::string Runtime::param_string(const std::string& key, const std::string& fallback) const {
    return trainer_param<std::string>(impl_->cfg, key, &fallback);
}

ShardRange Runtime::shard_range(std::size_t count) const {
    const auto d = static_cast<std::size_t>(impl_->shape.dp);
    const auto me = static_cast<std::size_t>(impl_->coord().dp);
    return {count * me / d, count * (me + 1) / d};
}

void Runtime::protect(const std::string& name, void* data, std::size_t bytes, DType type,
                      Redundancy kind) {
    int device = -1;
#if FLASHREC_WITH_CUDA
    device = gpu::device_memory_of(data);  // -1 at once, with no CUDA call, if CUDA is unused
#endif
    impl_->state.add({name, data, bytes, type, kind, device}, impl_->loop.entered);
    if (device >= 0) impl_->device.enable();
}

void Runtime::set_compute_stream(void* cuda_stream) {
#if FLASHREC_WITH_CUDA
    impl_->device.set_stream(cuda_stream);
    impl_->device.enable();
#else
    (void)cuda_stream;
    throw Error("set_compute_stream: this flashrec was built without CUDA (FLASHREC_WITH_CUDA=OFF)");
#endif
}

bool Runtime::on_device(const std::string& name) const {
    if (const ProtectedBuffer* b = impl_->state.find(name)) return b->device >= 0;
    throw Error("on_device: no protected buffer is named '" + name + "'");
}

std::string Runtime::snapshot_copier() const {
    const auto& im = *impl_;
    if (!im.ring.protection || !im.ring.protection->setup().copier) return "none";
    return im.ring.protection->setup().copier->kind();
}

std::uint64_t Runtime::Impl::own_state_checksum() {
    const auto& buffers = state.buffers();
    std::vector<std::uint64_t> parts;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
        const ProtectedBuffer& b = buffers[i];
        // The trainer's state only: the same on any platform, so a run with a replacement on
        // another one still compares bitwise with a run without.
        if (b.name == runtime::platform::kBufferName) continue;
        parts.push_back(ft::checksum(b.name.data(), b.name.size()));
        if (b.device >= 0) {
            const std::vector<std::byte> host = device.read(state.buffers(), i);
            parts.push_back(ft::checksum(host.data(), host.size()));
        } else {
            parts.push_back(ft::checksum(b.data, b.bytes));
        }
    }
    return ft::checksum(parts.data(), parts.size() * sizeof(std::uint64_t));
}

std::string Runtime::state_checksum() {
    auto& im = *impl_;
    const std::uint64_t mine = im.own_state_checksum();
    std::vector<std::uint64_t> all(static_cast<size_t>(im.membership.work.size()));
    ft::check(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, im.membership.work.get()),
              "MPI_Allgather(state checksum)", im.membership.work);
    return ft::checksum_hex(ft::checksum(all.data(), all.size() * sizeof(std::uint64_t)));
}

// --- the step loop ------------------------------------------------------------------------

std::int64_t Runtime::loop_start() {
    auto& im = *impl_;
    im.abandoned = false;
    im.register_platform();
    im.loop.entered = true;
    ft::nonzero_exits_by_signal(true);  // a trainer's exit(n) in the loop is a rank's failure (trap 14)
    if (im.takeover) {
        // This process took a dead role: its state arrives from the survivors.
        const recovery::Plan plan = *std::exchange(im.takeover, std::nullopt);
        im.receive_state(plan);
        im.finish_recovery();
        im.resume_at({plan.version, plan.initial});
    } else if (im.started.relaunched) {
        im.resume_at(im.warm_restore());
        if (std::getenv(ft::env::kCheckpointAndExit)) im.checkpoint_and_leave();
    } else if (im.started.from_checkpoint) {
        std::string why;
        const auto version = runtime::Checkpointer::newest_complete(im.cfg, im.shape, why);
        if (!version) throw Error("--resume: " + why);
        im.restore_checkpoint(topology::role_key(im.coord()), *version);
        if (im.membership.role_index == 0) {
            im.log("resumed from the HDF5 checkpoint of step " + std::to_string(*version) + " in " +
                   im.cfg.checkpoint.dir);
            im.launcher.emit(ft::records::CheckpointResumed{*version, im.cfg.checkpoint.dir}.to_json());
        }
        im.resume_at({*version, true});
        im.arm_replay_probe(*version);
    } else {
        im.resume_at({0, true});
        im.arm_replay_probe(0);
    }
    im.enter(Phase::forward, im.step);
    im.interval.step_begins();
    return im.step;
}

std::int64_t Runtime::loop_next(std::int64_t index) {
    auto& im = *impl_;
    if (!im.abandoned) {
        if (im.last_recovery) im.emit_recovery_record();  // the first step after a repair is done
        im.interval.step_ended(index, im.ring.protection != nullptr, im.ring.snapshot_version == index);
        im.step = index + 1;
        if (im.step >= im.cfg.job.steps) {
            im.finish_loop();
            if (!im.abandoned) return im.step;
        } else {
            im.choose_interval(im.step);
            if (!im.abandoned) {
                im.snapshot_if_due(im.step);
                if (runtime::probe_rewinds_at(im.replay.probe(), im.step, im.ring.snapshotted(im.step))) {
                    im.rewind_for_replay_probe();
                    im.interval.step_begins();
                }
            }
            if (!im.abandoned) {
                im.enter(Phase::forward, im.step);
                return im.step;
            }
        }
    }
    // This step, or the end of the loop, was abandoned: repair, then go on from the version restored.
    const auto at = im.recover();
    if (!at) throw Error("internal: a repair left role " + topology::role_key(im.coord()) + " without state to resume");
    im.resume_at(*at);
    im.enter(Phase::forward, im.step);
    return im.step;
}

StepRange::iterator StepRange::begin() { return iterator(rt_, rt_->loop_start()); }
StepRange::iterator StepRange::end() { return iterator(rt_, rt_->total_steps()); }
Step StepRange::iterator::operator*() const { return make_step(rt_, index_); }
StepRange::iterator& StepRange::iterator::operator++() {
    index_ = rt_->loop_next(index_);
    return *this;
}

}  // namespace flashrec
