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
#include "flashrec/ft/pmix_failure_events.hpp"
#include "flashrec/ft/leaving.hpp"
#include "flashrec/runtime/interval_choice.hpp"
#include "flashrec/runtime/runtime_impl.hpp"
#include "flashrec/spares/spares.hpp"

#if FLASHREC_WITH_CUDA
#include "flashrec/gpu/handles.hpp"
#endif

namespace flashrec {

namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// `--config <file>` / `--fault <spec>` from argv; the rest is the trainer's.
struct CommandLine {
    std::string config_path;
    std::vector<std::string> faults;
    std::string node;  // --flashrec-node: set by the parents of a spawned replacement
    bool resume = false;  // --resume: start from the newest HDF5 checkpoint
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
        else if (arg == "--resume") cl.resume = true;
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
// runtime::DevicePath (device_path.cpp) holds everything CUDA-specific; these bind it to this
// process's buffers and step. Host buffers never come this way.

runtime::DevicePath::Step Runtime::Impl::device_step() {
    return {membership.dp, membership.epoch, deadline(), abandoned,
            [this](const std::exception& e) { on_failure(e); }, &membership.tp, &membership.pp,
            ft::parse_nccl_repair(cfg.recovery.nccl_repair)};
}

bool Runtime::Impl::is_device_pointer(const void* data) const { return device.is_device_pointer(data); }

void Runtime::Impl::restore_device_buffers(const std::vector<std::size_t>& which,
                                           const std::vector<std::span<const std::byte>>& sources) {
    device.restore(state.buffers(), which, sources);
}

std::vector<std::byte> Runtime::Impl::read_device_buffer(std::size_t b) {
    return device.read(state.buffers(), b);
}

void Runtime::Impl::restore_checkpoint(const std::string& role_key, std::int64_t version) {
    const auto& buffers = state.buffers();
    if (!state.has_device_buffers()) {
        runtime::Checkpointer::restore(cfg, buffers, role_key, version);
        return;
    }
    // HDF5 reads into host memory: device buffers go through host staging.
    std::vector<ProtectedBuffer> through_host = buffers;
    std::vector<std::vector<std::byte>> host;
    host.reserve(buffers.size());
    std::vector<std::size_t> which;
    std::vector<std::span<const std::byte>> sources;
    for (std::size_t b = 0; b < buffers.size(); ++b) {
        if (buffers[b].device < 0) continue;
        host.emplace_back(buffers[b].bytes);
        through_host[b].data = host.back().data();
        through_host[b].device = -1;
        which.push_back(b);
        sources.emplace_back(host.back().data(), host.back().size());
    }
    runtime::Checkpointer::restore(cfg, through_host, role_key, version);
    restore_device_buffers(which, sources);
}

void Runtime::Impl::abort_device_collectives() noexcept { device.abort(); }

bool Runtime::Impl::device_reduce_scatter(std::span<const float> grads, std::span<float> shard) {
    return device.reduce_scatter(device_step(), grads, shard);
}

bool Runtime::Impl::device_allgather(std::span<float> full) { return device.allgather(device_step(), full); }

bool Runtime::Impl::device_allreduce(std::span<float> data) { return device.allreduce(device_step(), data); }

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
    host_oversubscribed = on_host > ::sysconf(_SC_NPROCESSORS_ONLN);
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    exit_notices.emplace(world_rank == 0);
    if (ft::failure_events_kept_local())
        if (const auto why = ft::failure_events_interposer_unbound())
            throw Error("direct launch (FLASHREC_DIRECT_LAUNCH=1): ULFM's failure events would reach Slurm's PMIx server, "
                        "which ends the step on the first failure: " + *why + " (docs/ulfm-traps.md, trap 15)");
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
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
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
    resume_requested = cl.resume || std::getenv(ft::env::kResume) != nullptr;
    relaunched = std::getenv(ft::env::kRelaunch) != nullptr;
    fresh_snapshots = !relaunched;
    pristine = !relaunched;
    timeline.debug = cfg.logging.level == "debug";
    cfg.mpi = config::with_environment(cfg.mpi, [](const char* name) { return std::getenv(name); });
    const bool shared_memory = cfg.mpi.transport != "tcp";
    for (const auto& problem : {ft::detector_mismatch(shared_memory && cfg.mpi.detector, mpi.detector),
                                ft::exits_unseen(shared_memory, mpi.detector.on, *mpi.exit_notices)})
        if (problem && world_rank == 0)
            std::fprintf(stderr, "flashrec[pid %d]: warning: %s\n", static_cast<int>(getpid()), problem->c_str());

    for (int i = 0; i < argc; ++i) start_args.emplace_back(argv[i]);
    faults = runtime::FaultInjector(cfg.faults, !spares::was_spawned());
    faults.announce_to([this](const ft::records::FaultInjected& f) { emit(f.to_json(), true); });
    watchdog.before_exit([this](const std::string& why, int code) {
        (void)emit_last(ft::records::EndingJob{code, static_cast<std::int32_t>(getpid()), why}.to_json());
    });
    if (spares::was_spawned()) {
        // A cold spare: the survivors started this process to take a dead role.
        original = false;
        node_name = cl.node;
        join_as_spawned();
        return;
    }
    membership.universe = ft::Comm::dup_world("universe");
    process_id = world_rank;
    const int expected = shape.size() + cfg.job.hot_spares;
    if (membership.universe.size() != expected)
        throw ConfigError(cfg.path, 0, "job",
                          "needs " + std::to_string(shape.size()) + " active ranks + " +
                              std::to_string(cfg.job.hot_spares) + " hot spares = " +
                              std::to_string(expected) + " processes, but the job has " +
                              std::to_string(membership.universe.size()));
    const std::vector<std::string> names = node_names(membership.universe, cfg.job, virtual_nodes);
    node_name = names[static_cast<size_t>(world_rank)];
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
    membership.own_slot = slot_of_process(world_rank);
    if (world_rank < shape.size()) membership.role_index = role_of_process[static_cast<size_t>(world_rank)];
    spare_pool.assign_range(shape.size(), membership.universe.size());

    config::Fault me;
    if (membership.role_index >= 0) {
        const auto c = coord();
        me.dp = c.dp, me.tp = c.tp, me.pp = c.pp;
    } else {
        me.spare = true;
        me.spare_index = world_rank - shape.size();
        hot_spare_index = me.spare_index;
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
    progress.phase.store(wire_phase(p), std::memory_order_relaxed);
    progress.step_tag.store(tag, std::memory_order_relaxed);
    faults.at(step, static_cast<config::Phase>(p));
}

void Runtime::Impl::connect_control_plane() {
    const std::string who = membership.role_index >= 0 ? topology::role_key(coord())
                                            : "spare:" + std::to_string(process_id);
    heartbeat.reset();
    auto options = ft::HeartbeatClientOptions::from_environment(who, world_rank);
    if (!options) return;  // not started by flashrec-launch: no control plane
    options->period = std::chrono::milliseconds(cfg.detection.heartbeat_ms);
    options->on_peer_lost = [sink = mpi.exit_notices ? mpi.exit_notices->loss_sink() : ft::ExitNotices::LossSink{},
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
    if (membership.role_index < 0) progress.phase.store(ft::wire::Phase::parked);
    heartbeat = std::make_unique<ft::HeartbeatClient>(std::move(*options), progress);
}

void Runtime::Impl::send_event(const nlohmann::json& record) {
    if (heartbeat) heartbeat->send_event(record);
}

bool Runtime::Impl::emit_last(const nlohmann::json& record) {
    std::fprintf(stderr, "%s\n", ft::records::event_line(record).c_str());
    std::fflush(stderr);
    if (!heartbeat) return true;
    const bool acknowledged = heartbeat->send_final(record, std::chrono::milliseconds(ft::kRecordAckLimitMs));
    if (!acknowledged)
        log("flashrec-launch did not acknowledge this process's " + record.value("event", std::string("?")) +
            " record within " + std::to_string(ft::kRecordAckLimitMs) + " ms; leaving anyway");
    return acknowledged;
}

void Runtime::Impl::emit(const nlohmann::json& record, bool before_exit) {
    std::fprintf(stderr, "%s\n", ft::records::event_line(record).c_str());
    std::fflush(stderr);
    if (!heartbeat) return;
    heartbeat->send_event(record);
    if (before_exit) heartbeat->flush(std::chrono::milliseconds(500));
}

void Runtime::Impl::retire_protection() {
    if (!protection) return;
    protection->abort();
    quarantine.epoch_aborted();
    quarantine.hold(std::move(protection));
}

void Runtime::Impl::revoke_all() noexcept {
    abort_device_collectives();  // first: DP peers waiting in NCCL for this process abort now
    if (protection) protection->abort();
    if (checkpointer) checkpointer->abort();
    membership.revoke_all();
}

namespace {
std::string serialize(const ft::SnapshotLayout& layout) {
    std::string s;
    for (const auto& b : layout) s += b.name + "\t" + std::to_string(b.bytes) + "\n";
    return s;
}

// Throws Error on a malformed text: a collective that a failure interrupted can complete on
// some processes with a dead peer's part left blank.
ft::SnapshotLayout deserialize(const std::string& text) {
    ft::SnapshotLayout layout;
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t tab = text.find('\t', pos), nl = text.find('\n', tab);
        const std::string bytes = tab == std::string::npos || nl == std::string::npos
                                      ? std::string() : text.substr(tab + 1, nl - tab - 1);
        if (bytes.empty() || bytes.find_first_not_of("0123456789") != std::string::npos)
            throw Error("a predecessor's payload layout is malformed (a torn exchange?)");
        layout.push_back({text.substr(pos, tab - pos), std::stoull(bytes)});
        pos = nl + 1;
    }
    return layout;
}

double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1 << 20); }
}  // namespace

void Runtime::Impl::start_protection(std::int64_t version) {
    retire_protection();
    if (!cfg.protection.enabled) {
        // HDF5 checkpoints are written from committed snapshots: none without protection.
        if (cfg.checkpoint.every_steps > 0 && membership.role_index == 0 && membership.epoch == 0)
            log("warning: checkpoint.every_steps is set but protection.enabled is false: "
                "no HDF5 checkpoints will be written");
        return;
    }
    std::vector<ft::ProtectedRegion> regions = state.regions();
    const bool node_aware = cfg.protection.placement == "node-aware";
    const int k = cfg.protection.replicas;
    ft::ProtectionSetup setup;
    setup.job = cfg.job.name;
    if (fresh_snapshots) {
        // A new job must never restore a version an earlier job of the same name left behind.
        unlink_own_segments();
        fresh_snapshots = false;
    }
    setup.store_prefix = store_prefix();
    setup.role_key = topology::role_key(coord());
    setup.chunk_bytes = static_cast<std::size_t>(cfg.protection.chunk_bytes);
    const auto successors =
        topology::ring_successors(shape, membership.role_index, k, membership.node_of_role, node_aware);
    held_roles =
        topology::ring_predecessors(shape, membership.role_index, k, membership.node_of_role, node_aware);

    // What this process's stores hold already: after a repair, every store whose (owner,
    // holder) pair survived holds the recovered version (headers only: cheap). The first
    // snapshot then makes only what is missing. Ring successors learn it, and the size of what
    // they will hold for each predecessor, in one allgather.
    const auto holds = [&](const std::string& key) {
        const auto steps = ft::SnapshotReader(cfg.job.name, key).committed_steps();
        return std::find(steps.begin(), steps.end(), version) != steps.end();
    };
    const std::string own_key = own_segment();
    ft::SnapshotScope scope;
    scope.own = !holds(own_key);
    std::vector<std::string> keys{own_key};
    std::string have;  // the owners whose payload at `version` this process holds: "3,5,"
    for (int r : held_roles) {
        keys.push_back(held_segment(r));
        const bool held = holds(keys.back());
        scope.receive_from.push_back(!held);
        if (held) have += std::to_string(r) + ",";
    }
    // Like the recovery reports: a process that dies inside the exchange can leave it failed on
    // some processes and complete with its part blank on others, so everyone goes on only if
    // everyone got every part intact (agree), and a failure abandons the step (resume()).
    faults.at(version, config::Phase::protection_start);
    std::string torn;
    try {
        const auto gathered =
            ft::allgather_strings(membership.work, have + "\n" + serialize(ft::payload_layout(regions)));
        for (int r : successors) {
            const std::string& theirs = gathered[static_cast<size_t>(r)];
            const std::string list = "," + theirs.substr(0, theirs.find('\n'));
            scope.send_to.push_back(list.find("," + std::to_string(membership.role_index) + ",") == std::string::npos);
            setup.successors.push_back({r, topology::role_key(topology::coord_of(shape, r)), {}});
        }
        for (int r : held_roles) {
            const std::string& theirs = gathered[static_cast<size_t>(r)];
            if (theirs.find('\n') == std::string::npos) throw Error("a predecessor's part is blank");
            setup.predecessors.push_back({r, topology::role_key(topology::coord_of(shape, r)),
                                          deserialize(theirs.substr(theirs.find('\n') + 1))});
        }
    } catch (const Error& e) {
        torn = e.what();
    }
    if (!membership.work.agree(torn.empty() ? 1 : 0, deadline()))
        throw CommRevoked(0, 0, "exchange of snapshot layouts", membership.work.name(), membership.work.rank(),
                          torn.empty() ? "another process did not get every layout" : "a torn exchange: " + torn);
    // Stores of pairs that no longer exist are unmapped once transfers of the aborted epoch
    // cannot touch them any more (the quarantine); their segments stay until the job ends.
    for (auto& dropped : stores->keep_only(keys)) quarantine.hold(std::move(dropped));
    setup.regions = std::move(regions);
    setup.during_replication = [this](std::int64_t v) { faults.at(v, config::Phase::replication); };
    // null: Protection copies host buffers with memcpy
    setup.copier = device.snapshot_copier(state.buffers(), cfg.protection.device_hash);
    if (const std::string problem = device.take_snapshot_hash_problem(); !problem.empty()) log("protection: " + problem);
    setup.after_abort = quarantine.after_abort();  // its matched receives may still write
    // A nice thread runs on cores the step leaves idle. A host with more processes than cores
    // has none: there it only waits, and any other load on the host starves it while every step
    // waits for it (4 ranks and 2 CPU burners on 2 cores: 300 steps in 90 s at nice 19, 11 s at 0).
    setup.thread_nice = mpi.host_oversubscribed ? 0 : cfg.protection.thread_nice;
    setup.poll_while_step_waits = !mpi.host_oversubscribed;
    setup.pool = stores;
    // A repair (in-job or a warm relaunch: a plan is being adopted) makes the stores of new
    // pairs on the protection thread, off the way back into the loop; a job's start makes
    // them here, so that a /dev/shm too small fails before the first step.
    setup.open_new_stores_in_background = last_recovery.has_value();
    protection = std::make_unique<ft::Protection>(std::move(setup), std::move(membership.replication));
    if (membership.role_index == 0 && membership.epoch == 0) {
        // From the layouts: after a warm relaunch the stores are opened in the background.
        const auto& made = protection->setup();
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
                      protection->setup().predecessors.size(), k);
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
    // A snapshot of device state waits (on the GPU) for the work enqueued so far.
    if (state.has_device_buffers()) protection->setup().copier->state_ready(device.stream());
    protection->start_snapshot(version, membership.epoch, std::move(scope));
    snapshot_version = version;
    if (checkpointer) checkpointer->rebind(checkpoint_identity(), std::move(membership.checkpoint));
    else checkpointer = std::make_unique<runtime::Checkpointer>(
             cfg, state.buffers(), checkpoint_identity(), std::move(membership.checkpoint),
             [this](const ft::records::CheckpointPublished& c) { emit(c.to_json()); });
}

runtime::CheckpointIdentity Runtime::Impl::checkpoint_identity() const {
    return {shape, membership.role_index, topology::role_key(coord()), own_segment(), membership.epoch};
}

void Runtime::Impl::emit_job_stats(std::size_t shm_bytes, const ft::SnapshotTiming& snapshot,
                                   const ft::SnapshotTiming& totals, std::size_t snapshots) {
    using runtime::median;
    double waited = 0;
    for (double w : stats.exposed_wait_ms) waited += w;
    const auto per = [&](double sum) { return snapshots ? sum / static_cast<double>(snapshots) : 0.0; };
    const auto rate = [](std::size_t bytes, double seconds) {
        return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
    };
    const auto ratio = [](std::size_t a, std::size_t b) {
        return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
    };
    std::size_t state_bytes = 0;
    for (const auto& b : state.buffers()) state_bytes += b.bytes;
    ft::records::JobStats r;
    r.role = topology::role_key(coord());
    r.steps = static_cast<std::int64_t>(stats.step_ms.size());
    r.median_step_ms = median(stats.step_ms);
    r.median_exposed_wait_ms = median(stats.exposed_wait_ms);
    r.total_exposed_wait_ms = waited;
    r.protection = cfg.protection.enabled;
    r.state_bytes = static_cast<std::int64_t>(state_bytes);
    r.shm_bytes = static_cast<std::int64_t>(shm_bytes);
    r.snapshot_ms = snapshot.seconds * 1e3;
    r.snapshot_copied_bytes = static_cast<std::int64_t>(snapshot.copied_bytes);
    r.snapshot_sent_bytes = static_cast<std::int64_t>(snapshot.sent_bytes);
    // Over every snapshot of this run (the sums in SnapshotTiming's terms).
    r.snapshots = static_cast<std::int64_t>(snapshots);
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
    r.protection_every = every_now();
    r.protection_auto = cfg.protection.every_auto();
    if (!stats.protected_ms.empty()) r.protected_step_ms = median(stats.protected_ms);
    if (!stats.unprotected_ms.empty()) r.unprotected_step_ms = median(stats.unprotected_ms);
    if (stats.step_ms.size() > 1) {
        double sum = 0;
        for (std::size_t i = 1; i < stats.step_ms.size(); ++i) sum += stats.step_ms[i];
        r.mean_step_ms = sum / static_cast<double>(stats.step_ms.size() - 1);
    }
    emit(r.to_json());
}

std::string Runtime::Impl::store_prefix() const {
    std::string prefix = node_name;
    for (char& c : prefix)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
    return prefix + ".";
}

std::string Runtime::Impl::own_segment() const { return store_prefix() + topology::role_key(coord()); }

std::string Runtime::Impl::held_segment(int owner) const {
    return store_prefix() +
           ft::peer_role_key(topology::role_key(topology::coord_of(shape, owner)), topology::role_key(coord()));
}

void Runtime::Impl::unlink_own_segments() const {
    ft::unlink_snapshot(cfg.job.name, own_segment());
    for (int r : held_roles) ft::unlink_snapshot(cfg.job.name, held_segment(r));
}

void Runtime::Impl::finish_loop() {
    device.finalize(device_step());
    const std::int64_t last = cfg.job.steps - 1;
    faults.at(last, config::Phase::loop_end);
    guarded([&] {
        if (protection) protection->wait();
        if (checkpointer) checkpointer->finish();
        ft::check(MPI_Barrier(membership.work.get()), "MPI_Barrier(end of loop)", membership.work);
    });
    // A failure at the end of the loop (a role died after the last sync point, and its groups'
    // peers abandoned the step while the others got here) is repaired like one in a step: the
    // caller recovers and the last step runs again. Nothing below has happened yet.
    if (abandoned) return;
    ft::nonzero_exits_by_signal(false);
    const std::size_t shm_bytes = protection ? protection->host_bytes() : 0;
    const auto snapshot = protection ? protection->last_snapshot() : ft::SnapshotTiming{};
    const auto totals = protection ? protection->total_snapshots() : ft::SnapshotTiming{};
    const std::size_t snapshots = protection ? protection->snapshot_count() : 0;
    protection.reset();
    if (membership.role_index == 0) {
        emit_job_stats(shm_bytes, snapshot, totals, snapshots);
        release_hot_spares();
    }
    // The snapshot segments stay until the job has ended (finish_job): a failure in the trainer's
    // code after the loop is repaired by a warm relaunch from them. The state is hashed now:
    // by ~Runtime the trainer's buffers may be gone (declared after the Runtime).
    loop_finished = true;
    final_state_checksum = own_state_checksum();
    faults.at(last, config::Phase::after_loop);
}

void Runtime::Impl::finish_job() {
    if (!loop_finished || membership.role_index < 0) return;
    const std::int64_t last = cfg.job.steps - 1;
    faults.at(last, config::Phase::finish);
    // No role sends role_finished before every role is done with the trainer's code after the
    // loop (its state_checksum() allgather, a save): a role that dies once its record was
    // acknowledged then takes nothing from a slower peer still waiting for its data (that peer
    // would fail, send no record, and the finished job would be relaunched). An agreement
    // returns to anyone only once every live role entered it, and survives a death after that.
    bool everyone_came = true;
    try {
        (void)membership.work.agree(1, deadline());
    } catch (const Error& e) {
        log(std::string("a role failed before the end of the job (") + e.what() + "); the snapshot segments stay");
        everyone_came = false;
    }
    // Without a launcher nobody judges the end (emit_last is true): the job is over.
    const bool acknowledged = emit_last(ft::records::RoleFinished{topology::role_key(coord()),
                                                                  static_cast<std::int32_t>(getpid()), cfg.job.steps,
                                                                  ft::checksum_hex(final_state_checksum)}
                                            .to_json());
    faults.at(last, config::Phase::finalize);
    // The segments go once every role's record is with the launcher: then it judges the job
    // finished whatever happens next. One decision for all (an agreement survives failures). It
    // is over the live roles only: a role known dead, whose record may never have come, makes it
    // 0 (else a death before role_finished left the warm relaunch no segments: exit 76).
    int everyone = 0;
    try {
        everyone = acknowledged && everyone_came && membership.work.failed_ranks().empty() ? 1 : 0;
        everyone = membership.work.agree(everyone, deadline());
    } catch (const Error& e) {
        log(std::string("the end-of-job agreement failed (") + e.what() + "); the snapshot segments stay");
        everyone = 0;
    }
    drop_spare_blanks();
    if (everyone) remove_node_snapshots();
}

void Runtime::Impl::drop_spare_blanks() {
    // A hot spare that took a role keeps its blank maker (slots made ahead, at nice 19) until
    // ~Runtime, after the node's segments were removed: a slot it made then stayed in /dev/shm
    // with no launcher to remove it (issue 29, item 5). Stop it, and unlink what it made that no
    // store took: every process removes what it made, however the job was started.
    stores->drop_blanks();
    if (blank_maker.joinable()) blank_maker.join();
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
        if (protection) protection->wait();
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
    protection.reset();
    checkpointer.reset();
    drop_spare_blanks();
    remove_node_snapshots();
    heartbeat.reset();  // BYE: this process leaves on purpose
    membership.free_all();
    mpi.finalize();
    std::exit(0);
}

void Runtime::Impl::snapshot_if_due(std::int64_t version) {
    if (!protection) return;
    const bool due = cfg.protection.every_auto()
                         ? runtime::snapshot_due_auto(version, interval.every, cfg.protection.max_every)
                         : runtime::snapshot_due(version, cfg.protection.every);
    if (!due) return;
    // A snapshot of device state waits (on the GPU) for this step's optimizer and allgather.
    if (state.has_device_buffers()) protection->setup().copier->state_ready(device.stream());
    protection->start_snapshot(version, membership.epoch);
    snapshot_version = version;
}

void Runtime::Impl::note_step_time(std::int64_t index, double ms) {
    if (!protection || index == interval.resumed_at) return;
    (snapshot_version == index ? stats.protected_ms : stats.unprotected_ms).push_back(ms);
}

void Runtime::Impl::choose_interval(std::int64_t version) {
    const auto& p = cfg.protection;
    if (!protection || !p.every_auto() || version % p.max_every != 0) return;
    // The newest samples only: the choice follows the step time as it changes.
    constexpr std::size_t kWindow = 64;
    const auto recent = [](const std::vector<double>& all) {
        if (all.empty()) return -1.0;
        const auto from = all.size() > kWindow ? all.end() - static_cast<std::ptrdiff_t>(kWindow) : all.begin();
        return runtime::median(std::vector<double>(from, all.end()));
    };
    // The largest over the active roles (each waits for the slowest at every sync point); -1:
    // none measured (a replacement since the repair). Every role then takes the same decision.
    double measured[2] = {recent(stats.unprotected_ms), recent(stats.protected_ms)};
    guarded([&] {
        MPI_Request request = MPI_REQUEST_NULL;
        ft::check(MPI_Iallreduce(MPI_IN_PLACE, measured, 2, MPI_DOUBLE, MPI_MAX, membership.work.get(), &request),
                  "MPI_Iallreduce(protection interval)", membership.work);
        membership.work.wait(request, "MPI_Iallreduce(protection interval)");
    });
    if (abandoned) return;
    runtime::IntervalMeasure m;
    if (measured[0] > 0) m.step_ms = measured[0];
    if (measured[1] > 0) m.protected_step_ms = measured[1];
    const auto choice = runtime::choose_every(m, p.overhead_budget, p.max_every, interval.every);
    // Every change is recorded, and the first measured choice after a start or repair even when
    // it keeps k (auto starts at max_every: "over the budget even there" would never be said).
    const bool both_measured = m.step_ms && m.protected_step_ms;
    const bool first_measured = both_measured && !interval.reported;
    if (both_measured) interval.reported = true;
    if ((choice.every != interval.every || first_measured) && membership.role_index == 0) {
        char line[256];
        std::snprintf(line, sizeof line, "protection.every = auto: k %lld -> %lld from version %lld (step %.3f ms, %.3f ms "
                      "with a snapshot): ", static_cast<long long>(interval.every), static_cast<long long>(choice.every),
                      static_cast<long long>(version), measured[0], measured[1]);
        log(line + choice.reason);
        emit(ft::records::ProtectionInterval{version, choice.every, interval.every, m.step_ms, m.protected_step_ms,
                                             choice.exposed_ms, choice.overhead, p.overhead_budget, p.max_every,
                                             choice.reason}
                 .to_json());
    }
    interval.every = choice.every;
}

void Runtime::Impl::note_versions_to_replay(std::int64_t restored) {
    replay_checks.clear();
    replay_from = restored;
    if (membership.role_index < 0 || !cfg.protection.enabled) return;
    std::vector<std::string> keys{own_segment()};
    for (int r : held_roles) keys.push_back(held_segment(r));
    for (const auto& key : keys) {
        try {
            const ft::SnapshotReader reader(cfg.job.name, key);
            for (std::int64_t v : reader.committed_steps())
                if (v > restored)
                    if (auto header = reader.committed_header(v)) replay_checks.emplace(v, ReplayCheck{key, *header});
        } catch (const Error& e) {  // a check that cannot be made is no reason to stop the job
            log("replay check: cannot read the headers of " + key + ": " + e.what());
        }
    }
}

bool Runtime::Impl::check_replayed(std::int64_t version) {
    bool exact = true;
    if (replay_checks.empty()) return exact;
    const auto [first, last] = replay_checks.equal_range(version);
    for (auto it = first; it != last; ++it) {
        const ReplayCheck& check = it->second;
        std::optional<ft::CommittedHeader> now;
        try {
            now = ft::SnapshotReader(cfg.job.name, check.store).committed_header(version);
        } catch (const Error& e) {
            log("replay check: cannot read " + check.store + ": " + e.what());
        }
        // Not rewritten by this replay (the store left the ring): nothing to compare.
        if (!now || (now->slot == check.before.slot && now->generation == check.before.generation)) continue;
        // The platform buffer records who wrote the version: a replacement on another platform
        // rewrites it, which is no divergence of the trainer's steps.
        // A buffer hashed by another algorithm than before (the GPU hash turned on or off by the
        // process that rewrote it) cannot be compared by checksum either.
        auto comparable = [&](const ft::CommittedHeader& header) {
            runtime::BufferChecksums sums;
            for (std::size_t i = 0; i < header.checksums.size(); ++i) {
                const bool same_algorithm = i >= header.algorithms.size() || i >= check.before.algorithms.size() ||
                                            i >= now->algorithms.size() ||
                                            check.before.algorithms[i] == now->algorithms[i];
                if (header.checksums[i].first != runtime::platform::kBufferName && same_algorithm)
                    sums.push_back(header.checksums[i]);
            }
            return sums;
        };
        const auto diverged = runtime::first_divergence(comparable(check.before), comparable(*now));
        if (!diverged) {
            if (timeline.debug)
                log("replay check: version " + std::to_string(version) + " of " + check.store +
                    " is bitwise the version committed before the failure");
            continue;
        }
        const std::string before = ft::checksum_hex(diverged->before), replayed = ft::checksum_hex(diverged->replayed);
        log("replay diverged: version " + std::to_string(version) + " of " + check.store + ", buffer '" +
            diverged->buffer + "', hashes " + replayed + " after replaying from version " + std::to_string(replay_from) +
            " but " + before + " as first committed. The steps are not deterministic: the trainer must "
            "draw its data from step.data_seed() and keep every state that changes across steps in protect()ed "
            "buffers (docs/snapshots.md, \"Checking that replay is exact\")");
        emit(ft::records::ReplayDiverged{topology::role_key(coord()), check.store, version, replay_from,
                                         diverged->buffer, before, replayed}
                 .to_json());
        exact = false;
    }
    // Versions up to this one are past: a later failure notes its own.
    replay_checks.erase(replay_checks.begin(), replay_checks.upper_bound(version));
    return exact;
}

void Runtime::Impl::arm_replay_probe(std::int64_t from) {
    replay_probe = {};
    if (membership.role_index < 0 || !cfg.protection.probes_replay()) return;
    replay_probe.from = from;
}

void Runtime::Impl::rewind_for_replay_probe() {
    // Snapshot `step` (own store and the ring copies this process holds) commits first: its
    // hashes are what the replay must reproduce.
    guarded([&] {
        if (protection) protection->wait();
    });
    if (abandoned) return;  // a failure: the caller repairs (resume() disarms the probe)
    const auto started = Clock::now();
    const std::int64_t from = replay_probe.from;
    replay_probe.to = step;
    note_versions_to_replay(from);  // version `to` of every store here, as the first pass committed it
    // The live state back to version `from`, from the own snapshot (the ping-pong slots hold
    // `from` and `to`: no version is snapshotted between them), verified as it is copied.
    const auto& buffers = state.buffers();
    std::vector<std::span<std::byte>> live;
    if (!state.has_device_buffers())
        for (const auto& b : buffers) live.emplace_back(static_cast<std::byte*>(b.data), b.bytes);
    const std::string key = own_segment();
    std::shared_ptr<ft::SnapshotStore> store = stores->find(key);
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
    restore_device_buffers(device_buffers, device_sources);
    step = from;
    probe_rewound_at = Clock::now();
    probe_restore_ms = std::chrono::duration<double, std::milli>(probe_rewound_at - started).count();
    if (membership.role_index == 0)
        log("replay probe: version " + std::to_string(replay_probe.to) + " committed; restored version " +
            std::to_string(from) + " and replaying steps " + std::to_string(from) + ".." +
            std::to_string(replay_probe.to - 1) + " to compare it (protection.replay_check: start)");
}

void Runtime::Impl::judge_replay_probe(bool everyone_exact) {
    const runtime::ReplayProbe probe = replay_probe;
    replay_probe = {};
    ft::records::ReplayProbe record;
    record.from = probe.from;
    record.to = probe.to;
    record.steps = probe.to - probe.from;
    record.passed = everyone_exact;
    record.restore_ms = std::round(probe_restore_ms * 1000) / 1000;
    record.replay_ms =
        std::round(std::chrono::duration<double, std::milli>(Clock::now() - probe_rewound_at).count() * 1000) / 1000;
    if (everyone_exact) {
        if (membership.role_index != 0) return;
        char line[200];
        std::snprintf(line, sizeof line, "replay probe passed: version %lld replayed from %lld bitwise on every role "
                      "(restore %.3f ms, %lld steps replayed in %.3f ms)", static_cast<long long>(probe.to),
                      static_cast<long long>(probe.from), record.restore_ms, static_cast<long long>(record.steps),
                      record.replay_ms);
        log(line);
        emit(record.to_json());
        return;
    }
    // Refused on every role alike (the verdict was agreed at this sync point): nothing the job
    // computed is worth keeping, and a relaunch would be refused the same way (exit 78).
    if (membership.role_index == 0) {
        emit(record.to_json(), true);
        release_hot_spares();
    }
    protection.reset();  // idle: this sync point waited for its snapshot
    unlink_own_segments();
    // Nobody leaves before every role removed its segments: mpirun may end the others once the
    // first process is gone.
    try {
        ft::check(MPI_Barrier(membership.work.get()), "MPI_Barrier(replay probe refused)", membership.work);
    } catch (const Error& e) {
        log(std::string("leaving without the others: ") + e.what());
    }
    end_job(runtime::replay_probe_refusal(probe.from, probe.to, cfg.protection.every), ft::kExitDeterministicError);
}

void Runtime::Impl::resume(const Resume& at) {
    step = at.step;
    check_platform();
    // Every role the same k, without a collective: a replacement has no history of choices.
    interval.before_resume = interval.every;
    interval.every = runtime::auto_start_every(cfg.protection.max_every);
    interval.reported = false;
    interval.resumed_at = step;
    // After a repair or a relaunch only: a start's stores may hold an earlier job's versions.
    if (last_recovery) note_versions_to_replay(step);  // before protection rewrites a slot
    else replay_checks.clear();
    if (last_recovery && replay_probe.from >= 0) {
        // A repair before the probe's verdict: the repair's own replay check applies.
        if (membership.role_index == 0)
            log("replay probe: not completed (a repair came first); the repair checks the versions it replays");
        replay_probe = {};
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
    // restore_pending: this process took a dead role (a hot spare or a spawned one).
    own_platform = runtime::platform::probe(device.gpu_model(), restore_pending, relaunched);
    platform_bytes.assign(runtime::platform::kBufferBytes, std::byte{0});
    runtime::platform::encode(own_platform, platform_bytes);
    state.add({runtime::platform::kBufferName, platform_bytes.data(), platform_bytes.size(), DType::u8,
               Redundancy::envelope, -1},
              false, true);
}

void Runtime::Impl::check_platform() {
    if (membership.role_index < 0 || platform_bytes.empty()) return;
    const auto writer = runtime::platform::decode(platform_bytes);
    runtime::platform::encode(own_platform, platform_bytes);  // from here on, this process writes the state
    if (!writer) return;  // a checkpoint of a flashrec that recorded none: nothing to compare
    const auto differences = runtime::platform::compare(*writer, own_platform);
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
        emit(record.to_json());
        return;
    }
    emit(record.to_json(), true);
    end_job(what + "; recovery.require_same_platform refuses it", ft::kExitPlatformMismatch);
}

void Runtime::Impl::protect_first_version() {
    // Not enter(): a step's sync-phase fault belongs to its own sync point, not to this wait.
    progress.phase.store(ft::wire::Phase::commit_wait, std::memory_order_relaxed);
    progress.step_tag.store(step, std::memory_order_relaxed);
    guarded([&] {
        if (protection) protection->wait();
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
        emit(ft::records::MpiErrorSeen{static_cast<std::int32_t>(getpid()), error->error_class(), error->operation()}
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
            im.finish_job();
        } catch (const std::exception& e) {  // a destructor must not throw: the segments stay
            im.log(std::string("could not end the job cleanly: ") + e.what());
        }
        return;
    }
    if (im.heartbeat || im.membership.role_index < 0 || !im.loop_started) return;
    try {
        im.retire_protection();
        im.quarantine.release();
        im.unlink_own_segments();
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
    impl_->state.add({name, data, bytes, type, kind, device}, impl_->loop_started);
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
    if (!im.protection || !im.protection->setup().copier) return "none";
    return im.protection->setup().copier->kind();
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
            const std::vector<std::byte> host = read_device_buffer(i);
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
    im.loop_started = true;
    ft::nonzero_exits_by_signal(true);  // a trainer's exit(n) in the loop is a rank's failure (trap 14)
    if (im.restore_pending) {
        // This process took a dead role: its state arrives from the survivors.
        im.receive_restore();
        const auto at = im.finish_recovery();
        im.resume(*at);  // a role holder's: never nullopt
    } else if (im.relaunched) {
        im.resume(im.warm_restore());
        if (std::getenv(ft::env::kCheckpointAndExit)) im.checkpoint_and_leave();
    } else if (im.resume_requested) {
        std::string why;
        const auto version = runtime::Checkpointer::newest_complete(im.cfg, im.shape, why);
        if (!version) throw Error("--resume: " + why);
        im.restore_checkpoint(topology::role_key(im.coord()), *version);
        if (im.membership.role_index == 0) {
            im.log("resumed from the HDF5 checkpoint of step " + std::to_string(*version) + " in " +
                   im.cfg.checkpoint.dir);
            im.emit(ft::records::CheckpointResumed{*version, im.cfg.checkpoint.dir}.to_json());
        }
        im.resume({*version, true});
        im.arm_replay_probe(*version);
    } else {
        im.resume({0, true});
        im.arm_replay_probe(0);
    }
    im.enter(Phase::forward, im.step);
    im.stats.step_start = Clock::now();
    return im.step;
}

std::int64_t Runtime::loop_next(std::int64_t index) {
    auto& im = *impl_;
    if (!im.abandoned) {
        if (im.last_recovery) im.emit_recovery_record();  // the first step after a repair is done
        const auto now = Clock::now();
        const double ms = std::chrono::duration<double, std::milli>(now - im.stats.step_start).count();
        im.stats.step_ms.push_back(ms);
        im.note_step_time(index, ms);
        im.stats.step_start = now;
        im.step = index + 1;
        if (im.step >= im.cfg.job.steps) {
            im.finish_loop();
            if (!im.abandoned) return im.step;
        } else {
            im.choose_interval(im.step);
            if (!im.abandoned) {
                im.snapshot_if_due(im.step);
                if (runtime::probe_rewinds_at(im.replay_probe, im.step, im.protection && im.snapshot_version == im.step)) {
                    im.rewind_for_replay_probe();
                    im.stats.step_start = Clock::now();
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
    im.resume(*at);
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

std::uint64_t Step::data_seed() const {
    const auto& im = *rt_->impl_;
    return splitmix64(im.cfg.job.seed ^ splitmix64(static_cast<std::uint64_t>(index_) ^
                                                   splitmix64(static_cast<std::uint64_t>(
                                                       im.coord().dp + 1))));
}

void Step::reduce_scatter(std::span<const float> grads, std::span<float> shard) {
    auto& im = *rt_->impl_;
    const int d = im.shape.dp;
    const std::size_t n = grads.size();
    const auto [first, last] = rt_->shard_range(n);
    if (shard.size() != last - first)
        throw Error("reduce_scatter: shard has " + std::to_string(shard.size()) +
                    " elements, this role's part of " + std::to_string(n) + " is " +
                    std::to_string(last - first));
    im.enter(Phase::allreduce, index_);
    if (im.device_reduce_scatter(grads, shard)) return;  // device memory: NCCL, same order
    // Every role receives every peer's copy of its part and sums them in dp order itself:
    // the result does not depend on MPI's reduction algorithm or on which process holds a role.
    std::vector<int> send_counts(d), send_displs(d), recv_counts(d), recv_displs(d);
    const auto mine = static_cast<int>(last - first);
    for (int j = 0; j < d; ++j) {
        const std::size_t a = n * static_cast<std::size_t>(j) / static_cast<std::size_t>(d);
        const std::size_t b = n * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(d);
        send_counts[j] = static_cast<int>(b - a);
        send_displs[j] = static_cast<int>(a);
        recv_counts[j] = mine;
        recv_displs[j] = j * mine;
    }
    im.scratch.resize(static_cast<size_t>(d) * last - static_cast<size_t>(d) * first);
    im.guarded([&] {
        ft::check(MPI_Alltoallv(grads.data(), send_counts.data(), send_displs.data(), MPI_FLOAT,
                                im.scratch.data(), recv_counts.data(), recv_displs.data(),
                                MPI_FLOAT, im.membership.dp.get()),
                  "MPI_Alltoallv(gradients)", im.membership.dp);
    });
    if (im.abandoned) return;
    std::copy_n(im.scratch.begin(), mine, shard.begin());
    for (int j = 1; j < d; ++j) {
        const float* part = im.scratch.data() + static_cast<std::size_t>(j) * shard.size();
        for (std::size_t i = 0; i < shard.size(); ++i) shard[i] += part[i];
    }
}

void Step::allgather(std::span<float> full) {
    auto& im = *rt_->impl_;
    if (im.device_allgather(full)) return;  // device memory: NCCL broadcasts
    const int d = im.shape.dp;
    const std::size_t n = full.size();
    std::vector<int> counts(d), displs(d);
    for (int j = 0; j < d; ++j) {
        const std::size_t a = n * static_cast<std::size_t>(j) / static_cast<std::size_t>(d);
        const std::size_t b = n * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(d);
        counts[j] = static_cast<int>(b - a);
        displs[j] = static_cast<int>(a);
    }
    im.guarded([&] {
        ft::check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, full.data(), counts.data(),
                                 displs.data(), MPI_FLOAT, im.membership.dp.get()),
                  "MPI_Allgatherv(parameters)", im.membership.dp);
    });
}

void Step::allreduce(std::span<float> data) {
    auto& im = *rt_->impl_;
    if (im.is_device_pointer(data.data())) {
        im.enter(Phase::allreduce, index_);
        im.device_allreduce(data);
        return;
    }
    const auto [first, last] = rt_->shard_range(data.size());
    std::vector<float> part(last - first);
    reduce_scatter(data, part);
    std::copy(part.begin(), part.end(), data.begin() + static_cast<std::ptrdiff_t>(first));
    allgather(data);
}

bool Step::begin_update() {
    auto& im = *rt_->impl_;
    if (im.abandoned) return false;
    im.enter(Phase::sync, index_);
    // Only a step whose starting version is being snapshotted waits (protection.every).
    const bool snapshotted = im.protection && im.snapshot_version == index_;
    im.guarded([&] {
        if (!im.protection) return;
        if (snapshotted) im.stats.exposed_wait_ms.push_back(im.protection->wait() * 1e3);
        im.quarantine.clean_step();  // transfers of an aborted epoch end a few steps later
    });
    const bool exact = !(snapshotted && !im.abandoned) || im.check_replayed(index_);
    // The one synchronization point: nobody mutates state for this step unless every active
    // role reached it alive (a failure anywhere abandons the step everywhere). It carries whether
    // every role's replayed versions hashed as first committed: the replay probe's verdict.
    int everyone[2] = {1, exact ? 1 : 0};  // {here, exact}
    im.guarded([&] {
        MPI_Request request = MPI_REQUEST_NULL;
        ft::check(MPI_Iallreduce(MPI_IN_PLACE, everyone, 2, MPI_INT, MPI_MIN, im.membership.work.get(), &request),
                  "MPI_Iallreduce(sync point)", im.membership.work);
        im.membership.work.wait(request, "MPI_Iallreduce(sync point)");
    });
    if (im.abandoned) return false;
    if (runtime::probe_verdict_at(im.replay_probe, index_)) im.judge_replay_probe(everyone[1] == 1);
    im.pristine = false;  // the optimizer changes state from here on
    // Every role's snapshot `index_` is committed now (each waited before the allreduce).
    if (im.checkpointer && snapshotted) im.checkpointer->committed(index_);
    im.enter(Phase::optimizer, -1);
    return true;
}

void Step::end_update() {
    auto& im = *rt_->impl_;
    im.progress.step_tag.store(index_ + 1, std::memory_order_relaxed);
}

void Step::report_loss(double loss) {
    auto& im = *rt_->impl_;
    if (im.membership.role_index == 0 && !im.abandoned)
        im.send_event(ft::records::Step{index_, loss}.to_json());
}

bool Step::abandoned() const { return rt_->impl_->abandoned; }

}  // namespace flashrec
