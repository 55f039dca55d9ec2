#include "launcher_records.hpp"

#include "flashrec/ft/record_fields.hpp"

// Each record's fields, described once: the tables below are what to_json writes, field by field
// (the event log sorts an object's keys; the names and types are what docs/launcher.md lists).
namespace flashrec::ft::records {

template <>
struct Table<launcher::RestartReason> {
    using R = launcher::RestartReason;
    static constexpr auto fields = std::tuple{
        FieldSpec{"incident", &R::incident}, FieldSpec{"classification", &R::classification},
        FieldSpec{"detail", &R::detail}};
};
template <>
struct Table<launcher::RestartPhases> {
    using R = launcher::RestartPhases;
    static constexpr auto fields = std::tuple{
        FieldSpec{"detect", &R::detect}, FieldSpec{"teardown", &R::teardown},
        FieldSpec{"launch", &R::launch, kOptional}, FieldSpec{"restore", &R::restore, kOptional},
        FieldSpec{"resumed", &R::resumed, kOptional}};
};
template <>
struct Table<launcher::RestartFigures> {
    using R = launcher::RestartFigures;
    static constexpr auto fields = std::tuple{
        FieldSpec{"tier", &R::tier}, FieldSpec{"attempt", &R::attempt}, FieldSpec{"reason", &R::reason},
        FieldSpec{"outcome", &R::outcome}, FieldSpec{"phases_ms", &R::phases_ms},
        FieldSpec{"steps_done_before", &R::steps_done_before}, FieldSpec{"died_unix_ms", &R::died_unix_ms},
        FieldSpec{"checkpoint_step", &R::checkpoint_step, kOptional}, FieldSpec{"total_ms", &R::total_ms, kOptional},
        FieldSpec{"resumed_unix_ms", &R::resumed_unix_ms, kOptional},
        FieldSpec{"rank_record", &R::rank_record, kOptional},
        FieldSpec{"restored_version", &R::restored_version, kOptional},
        FieldSpec{"steps_replayed", &R::steps_replayed, kOptional}};
};
template <>
struct Table<launcher::RankIncidentFields> {
    using R = launcher::RankIncidentFields;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"hostname", &R::hostname}, FieldSpec{"world_rank", &R::world_rank},
        FieldSpec{"pid", &R::pid}, FieldSpec{"reason", &R::reason}, FieldSpec{"last_step_tag", &R::last_step_tag},
        FieldSpec{"detection_latency_ms", &R::detection_latency_ms}};
};
template <>
struct Table<launcher::JobRunning> {
    using R = launcher::JobRunning;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"kind", &R::kind}, FieldSpec{"startup_ms", &R::startup_ms},
        FieldSpec{"registered_ms", &R::registered_ms}};
};
template <>
struct Table<launcher::StartupStuck> {
    using R = launcher::StartupStuck;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"limit_ms", &R::limit_ms},
        FieldSpec{"registered", &R::registered}, FieldSpec{"active", &R::active},
        FieldSpec{"missing_by_node", &R::missing_by_node}};
};
template <>
struct Table<launcher::MpirunLingered> {
    using R = launcher::MpirunLingered;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"pid", &R::pid}, FieldSpec{"rule", &R::rule},
        FieldSpec{"grace_ms", &R::grace_ms}, FieldSpec{"since_last_rank_ms", &R::since_last_rank_ms}};
};
template <>
struct Table<launcher::SpawnDaemonLost> {
    using R = launcher::SpawnDaemonLost;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"attempt", &R::attempt}, FieldSpec{"evidence", &R::evidence}};
};
template <>
struct Table<launcher::DaemonLostStarting> {
    using R = launcher::DaemonLostStarting;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"attempt", &R::attempt}, FieldSpec{"evidence", &R::evidence}};
};
template <>
struct Table<launcher::NodeLost> {
    using R = launcher::NodeLost;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"attempt", &R::attempt}, FieldSpec{"evidence", &R::evidence},
        FieldSpec{"step", &R::step}};
};
template <>
struct Table<launcher::DaemonLossUnconfirmed> {
    using R = launcher::DaemonLossUnconfirmed;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"attempt", &R::attempt}};
};
template <>
struct Table<launcher::NodeLeftAllocation> {
    using R = launcher::NodeLeftAllocation;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"attempt", &R::attempt}};
};
template <>
struct Table<launcher::DrainSkipped> {
    using R = launcher::DrainSkipped;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"why", &R::why}};
};
template <>
struct Table<launcher::NewLayout::Replaced> {
    using R = launcher::NewLayout::Replaced;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"spare_node", &R::spare_node}};
};
template <>
struct Table<launcher::NewLayout> {
    using R = launcher::NewLayout;
    static constexpr auto fields = std::tuple{
        FieldSpec{"reason", &R::reason}, FieldSpec{"bad_nodes", &R::bad_nodes}, FieldSpec{"replaced", &R::replaced},
        FieldSpec{"doubled_up", &R::doubled_up}, FieldSpec{"policy", &R::policy, kNullable},
        FieldSpec{"nodes", &R::nodes}, FieldSpec{"spare_nodes", &R::spare_nodes}};
};
template <>
struct Table<launcher::RoleMoved> {
    using R = launcher::RoleMoved;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"from", &R::from}, FieldSpec{"to", &R::to},
        FieldSpec{"pid", &R::pid}};
};
template <>
struct Table<launcher::JobEnd::Listed> {
    using R = launcher::JobEnd::Listed;
    static constexpr auto fields = std::tuple{
        FieldSpec{"incident", &R::incident}, FieldSpec{"role", &R::role},
        FieldSpec{"classification", &R::classification}, FieldSpec{"recovered_by", &R::recovered_by}};
};
template <>
struct Table<launcher::JobEnd::TimeLost> {
    using R = launcher::JobEnd::TimeLost;
    static constexpr auto fields = std::tuple{
        FieldSpec{"total", &R::total}, FieldSpec{"hang_detection", &R::hang_detection},
        FieldSpec{"in_job_recovery", &R::in_job_recovery}, FieldSpec{"relaunch", &R::relaunch},
        FieldSpec{"replayed_steps", &R::replayed_steps}};
};
template <>
struct Table<launcher::JobEnd> {
    using R = launcher::JobEnd;
    static constexpr auto fields = std::tuple{
        FieldSpec{"outcome", &R::outcome}, FieldSpec{"exit_code", &R::exit_code}, FieldSpec{"message", &R::message},
        FieldSpec{"wall_s", &R::wall_s}, FieldSpec{"steps_completed", &R::steps_completed},
        FieldSpec{"steps", &R::steps}, FieldSpec{"steps_per_s", &R::steps_per_s},
        FieldSpec{"failures", &R::failures}, FieldSpec{"incidents", &R::incidents},
        FieldSpec{"replacements_in_job", &R::replacements_in_job}, FieldSpec{"hot_spares_used", &R::hot_spares_used},
        FieldSpec{"spawned", &R::spawned}, FieldSpec{"warm_relaunches", &R::warm_relaunches},
        FieldSpec{"cold_restarts", &R::cold_restarts}, FieldSpec{"steps_replayed", &R::steps_replayed},
        FieldSpec{"time_lost_ms", &R::time_lost_ms}, FieldSpec{"checkpoints", &R::checkpoints}};
};
template <>
struct Table<launcher::ExpectedFailureCost::Estimate> {
    using R = launcher::ExpectedFailureCost::Estimate;
    static constexpr auto fields = std::tuple{
        FieldSpec{"expected_replayed_steps", &R::expected_replayed_steps},
        FieldSpec{"worst_replayed_steps", &R::worst_replayed_steps}, FieldSpec{"step_ms", &R::step_ms},
        FieldSpec{"expected_ms", &R::expected_ms}, FieldSpec{"worst_ms", &R::worst_ms},
        FieldSpec{"restore_ms", &R::restore_ms, kOptional},
        FieldSpec{"snapshot_exposed_ms", &R::snapshot_exposed_ms, kOptional},
        FieldSpec{"overhead_ms_per_step", &R::overhead_ms_per_step, kOptional},
        FieldSpec{"saved_ms_per_step", &R::saved_ms_per_step, kOptional},
        FieldSpec{"break_even_steps", &R::break_even_steps, kOptional}};
};
template <>
struct Table<launcher::ExpectedFailureCost> {
    using R = launcher::ExpectedFailureCost;
    static constexpr auto fields = std::tuple{
        FieldSpec{"protection_every", &R::protection_every}, FieldSpec{"protection_auto", &R::protection_auto},
        FieldSpec{"interval_changes", &R::interval_changes}, FieldSpec{"estimate", &R::estimate}};
};
template <>
struct Table<launcher::SignalIgnored> {
    using R = launcher::SignalIgnored;
    static constexpr auto fields = std::tuple{
        FieldSpec{"signal", &R::signal}, FieldSpec{"action", &R::action}};
};
template <>
struct Table<launcher::Interrupted> {
    using R = launcher::Interrupted;
    static constexpr auto fields = std::tuple{
        FieldSpec{"signal", &R::signal}};
};
template <>
struct Table<launcher::AttemptJudged> {
    using R = launcher::AttemptJudged;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"pid", &R::pid}, FieldSpec{"status", &R::status},
        FieldSpec{"roles_finished", &R::roles_finished}, FieldSpec{"exit_code", &R::exit_code, kOptional},
        FieldSpec{"signal", &R::signal, kOptional}, FieldSpec{"note", &R::note, kOptional}};
};
template <>
struct Table<launcher::StartRetried> {
    using R = launcher::StartRetried;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"status", &R::status}};
};
template <>
struct Table<launcher::WarmRelaunchBeforeHdf5> {
    using R = launcher::WarmRelaunchBeforeHdf5;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"why", &R::why}};
};
template <>
struct Table<launcher::WarmRelaunchRefused> {
    using R = launcher::WarmRelaunchRefused;
    static constexpr auto fields = std::tuple{
        FieldSpec{"reason", &R::reason}, FieldSpec{"why", &R::why}, FieldSpec{"used", &R::used}};
};
template <>
struct Table<launcher::ColdRestartRefused> {
    using R = launcher::ColdRestartRefused;
    static constexpr auto fields = std::tuple{
        FieldSpec{"reason", &R::reason}, FieldSpec{"why", &R::why}};
};
template <>
struct Table<launcher::RestartLoop> {
    using R = launcher::RestartLoop;
    static constexpr auto fields = std::tuple{
        FieldSpec{"incident", &R::incident}, FieldSpec{"same_as", &R::same_as},
        FieldSpec{"classification", &R::classification}, FieldSpec{"step", &R::step},
        FieldSpec{"newest_step", &R::newest_step}, FieldSpec{"restart", &R::restart}, FieldSpec{"why", &R::why}};
};
template <>
struct Table<launcher::CheckpointForRequeue> {
    using R = launcher::CheckpointForRequeue;
    static constexpr auto fields = std::tuple{
        FieldSpec{"step", &R::step}, FieldSpec{"dir", &R::dir}, FieldSpec{"attempt", &R::attempt}};
};
template <>
struct Table<launcher::AttemptLaunched> {
    using R = launcher::AttemptLaunched;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"kind", &R::kind}, FieldSpec{"pid", &R::pid},
        FieldSpec{"command", &R::command}, FieldSpec{"relaunch", &R::relaunch}, FieldSpec{"resume", &R::resume},
        FieldSpec{"mpirun_flags", &R::mpirun_flags, kOptional}, FieldSpec{"nodes", &R::nodes, kOptional},
        FieldSpec{"spare_nodes", &R::spare_nodes, kOptional},
        FieldSpec{"role_of_rank", &R::role_of_rank, kOptional}};
};
template <>
struct Table<launcher::WarmRelaunch> {
    using R = launcher::WarmRelaunch;
    static constexpr auto fields = std::tuple{
        FieldSpec{"relaunch", &R::relaunch}, FieldSpec{"of", &R::of}, Inline{&R::figures}};
};
template <>
struct Table<launcher::ColdRestart> {
    using R = launcher::ColdRestart;
    static constexpr auto fields = std::tuple{
        FieldSpec{"restart", &R::restart}, Inline{&R::figures}};
};
template <>
struct Table<launcher::Failure> {
    using R = launcher::Failure;
    static constexpr auto fields = std::tuple{
        FieldSpec{"incident", &R::incident}, FieldSpec{"attempt", &R::attempt}, FieldSpec{"observed", &R::observed},
        FieldSpec{"classification", &R::classification}, FieldSpec{"action", &R::action},
        FieldSpec{"tier", &R::tier}, FieldSpec{"role", &R::role}, FieldSpec{"value", &R::value, kOptional},
        FieldSpec{"pid", &R::pid, kOptional}, FieldSpec{"node", &R::node, kOptional},
        FieldSpec{"detail", &R::detail, kOptional}, FieldSpec{"step", &R::step, kOptional},
        FieldSpec{"detection_latency_ms", &R::detection_latency_ms, kOptional},
        FieldSpec{"since_injection_ms", &R::since_injection_ms, kOptional},
        FieldSpec{"mpi_error_classes_seen", &R::mpi_error_classes_seen, kOptional}};
};
template <>
struct Table<launcher::HangKill> {
    using R = launcher::HangKill;
    static constexpr auto fields = std::tuple{
        FieldSpec{"incident", &R::incident}, FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid},
        FieldSpec{"hostname", &R::hostname}, FieldSpec{"result", &R::result}, FieldSpec{"signal", &R::signal},
        FieldSpec{"detection_latency_ms", &R::detection_latency_ms},
        FieldSpec{"since_injection_ms", &R::since_injection_ms, kNullable}};
};
template <>
struct Table<launcher::KillConfirmed> {
    using R = launcher::KillConfirmed;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid}};
};
template <>
struct Table<launcher::ReleasedSpareLeft> {
    using R = launcher::ReleasedSpareLeft;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid}};
};
template <>
struct Table<launcher::StallCleared> {
    using R = launcher::StallCleared;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid}, FieldSpec{"last_step_tag", &R::last_step_tag},
        FieldSpec{"step_tag_now", &R::step_tag_now, kNullable}, FieldSpec{"confirm_ms", &R::confirm_ms}};
};
template <>
struct Table<launcher::RankReconnected> {
    using R = launcher::RankReconnected;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid}, FieldSpec{"after_ms", &R::after_ms}};
};
template <>
struct Table<launcher::RankLostWithNode> {
    using R = launcher::RankLostWithNode;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid}, FieldSpec{"node", &R::node}};
};
template <>
struct Table<launcher::NodeSilence::Node> {
    using R = launcher::NodeSilence::Node;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"longest_silence_ms", &R::longest_silence_ms},
        FieldSpec{"heartbeats", &R::heartbeats}};
};
template <>
struct Table<launcher::NodeSilence> {
    using R = launcher::NodeSilence;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node_timeout_ms", &R::node_timeout_ms}, FieldSpec{"heartbeat_ms", &R::heartbeat_ms},
        FieldSpec{"nodes", &R::nodes}};
};
template <>
struct Table<launcher::ControlPlaneListening> {
    using R = launcher::ControlPlaneListening;
    static constexpr auto fields = std::tuple{
        FieldSpec{"endpoint", &R::endpoint}, FieldSpec{"hang_timeout_ms", &R::hang_timeout_ms}};
};
template <>
struct Table<launcher::ControlPlaneError> {
    using R = launcher::ControlPlaneError;
    static constexpr auto fields = std::tuple{
        FieldSpec{"peer", &R::peer, kOptional}, FieldSpec{"what", &R::what}};
};
template <>
struct Table<launcher::ConnectionDropped> {
    using R = launcher::ConnectionDropped;
    static constexpr auto fields = std::tuple{
        FieldSpec{"peer", &R::peer}, FieldSpec{"reason", &R::reason}, FieldSpec{"detail", &R::detail}};
};
template <>
struct Table<launcher::ConnectionDropsUnlogged> {
    using R = launcher::ConnectionDropsUnlogged;
    static constexpr auto fields = std::tuple{
        FieldSpec{"after", &R::after}, FieldSpec{"note", &R::note}};
};
template <>
struct Table<launcher::CallbackFailed> {
    using R = launcher::CallbackFailed;
    static constexpr auto fields = std::tuple{
        FieldSpec{"callback", &R::callback}, FieldSpec{"what", &R::what}};
};
template <>
struct Table<launcher::RankRegistered> {
    using R = launcher::RankRegistered;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"world_rank", &R::world_rank}, FieldSpec{"pid", &R::pid},
        FieldSpec{"hostname", &R::hostname}, FieldSpec{"peer", &R::peer},
        FieldSpec{"supersedes_pid", &R::supersedes_pid, kOptional}};
};
template <>
struct Table<launcher::RankSupersededRecord> {
    using R = launcher::RankSupersededRecord;
    static constexpr auto fields = std::tuple{
        Inline{&R::incident}};
};
template <>
struct Table<launcher::RankLostRecord> {
    using R = launcher::RankLostRecord;
    static constexpr auto fields = std::tuple{
        Inline{&R::incident}};
};
template <>
struct Table<launcher::RankHungRecord> {
    using R = launcher::RankHungRecord;
    static constexpr auto fields = std::tuple{
        Inline{&R::incident}};
};
template <>
struct Table<launcher::EventRejected> {
    using R = launcher::EventRejected;
    static constexpr auto fields = std::tuple{
        FieldSpec{"source", &R::source, kOptional}, FieldSpec{"record", &R::record, kOptional},
        FieldSpec{"what", &R::what}};
};
template <>
struct Table<launcher::RankExited> {
    using R = launcher::RankExited;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid}, FieldSpec{"last_step_tag", &R::last_step_tag}};
};
template <>
struct Table<launcher::RankLossPassedOn> {
    using R = launcher::RankLossPassedOn;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"nspace", &R::nspace}, FieldSpec{"rank", &R::rank},
        FieldSpec{"recipients", &R::recipients}};
};
template <>
struct Table<launcher::NodeFellSilent> {
    using R = launcher::NodeFellSilent;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"roles", &R::roles}, FieldSpec{"silent_ms", &R::silent_ms},
        FieldSpec{"node_timeout_ms", &R::node_timeout_ms},
        FieldSpec{"evidence_heartbeats", &R::evidence_heartbeats}};
};
template <>
struct Table<launcher::ControllerPaused> {
    using R = launcher::ControllerPaused;
    static constexpr auto fields = std::tuple{
        FieldSpec{"ms", &R::ms}, FieldSpec{"effect", &R::effect}};
};
template <>
struct Table<launcher::AcceptFailed> {
    using R = launcher::AcceptFailed;
    static constexpr auto fields = std::tuple{
        FieldSpec{"what", &R::what}};
};
template <>
struct Table<launcher::JobStart> {
    using R = launcher::JobStart;
    static constexpr auto fields = std::tuple{
        FieldSpec{"job", &R::job}, FieldSpec{"run_id", &R::run_id}, FieldSpec{"config", &R::config},
        FieldSpec{"program", &R::program}, FieldSpec{"launcher_version", &R::launcher_version},
        FieldSpec{"nccl_version", &R::nccl_version}, FieldSpec{"launcher_pid", &R::launcher_pid},
        FieldSpec{"host", &R::host}, FieldSpec{"resume", &R::resume}, FieldSpec{"faults", &R::faults},
        FieldSpec{"steps", &R::steps}, FieldSpec{"warm_relaunches_allowed", &R::warm_relaunches_allowed},
        FieldSpec{"checkpoint_dir", &R::checkpoint_dir}, FieldSpec{"hang_timeout_ms", &R::hang_timeout_ms},
        FieldSpec{"heartbeat_ms", &R::heartbeat_ms}, FieldSpec{"transport", &R::transport},
        FieldSpec{"events", &R::events}};
};
template <>
struct Table<launcher::JobLayout::Shape> {
    using R = launcher::JobLayout::Shape;
    static constexpr auto fields = std::tuple{FieldSpec{"dp", &R::dp}, FieldSpec{"tp", &R::tp}, FieldSpec{"pp", &R::pp}};
};
template <>
struct Table<launcher::JobLayout::Rank> {
    using R = launcher::JobLayout::Rank;
    static constexpr auto fields = std::tuple{FieldSpec{"rank", &R::rank}, FieldSpec{"role", &R::role}};
};
template <>
struct Table<launcher::JobLayout::Node> {
    using R = launcher::JobLayout::Node;
    static constexpr auto fields = std::tuple{FieldSpec{"node", &R::node}, FieldSpec{"ranks", &R::ranks}};
};
template <>
struct Table<launcher::JobLayout::HotSpare> {
    using R = launcher::JobLayout::HotSpare;
    static constexpr auto fields =
        std::tuple{FieldSpec{"rank", &R::rank}, FieldSpec{"role", &R::role}, FieldSpec{"node", &R::node}};
};
template <>
struct Table<launcher::JobLayout> {
    using R = launcher::JobLayout;
    static constexpr auto fields = std::tuple{
        FieldSpec{"shape", &R::shape}, FieldSpec{"processes", &R::processes}, FieldSpec{"active", &R::active},
        FieldSpec{"placement", &R::placement}, FieldSpec{"virtual_nodes", &R::virtual_nodes},
        FieldSpec{"nodes", &R::nodes}, FieldSpec{"hot_spares", &R::hot_spares},
        FieldSpec{"spare_nodes", &R::spare_nodes}, FieldSpec{"control", &R::control},
        FieldSpec{"metrics", &R::metrics, kNullable}};
};
template <>
struct Table<launcher::AttemptTornDown> {
    using R = launcher::AttemptTornDown;
    static constexpr auto fields = std::tuple{
        FieldSpec{"attempt", &R::attempt}, FieldSpec{"why", &R::why}, FieldSpec{"ms", &R::ms},
        FieldSpec{"signalled", &R::signalled}, FieldSpec{"complete", &R::complete}, FieldSpec{"left", &R::left}};
};
template <>
struct Table<launcher::AllocationUnknown> {
    using R = launcher::AllocationUnknown;
    static constexpr auto fields = std::tuple{
        FieldSpec{"job_id", &R::job_id}, FieldSpec{"error", &R::error}};
};
template <>
struct Table<launcher::NodeCheck> {
    using R = launcher::NodeCheck;
    static constexpr auto fields = std::tuple{
        FieldSpec{"nodes", &R::nodes}, FieldSpec{"unreachable", &R::unreachable, kOptional},
        FieldSpec{"ms", &R::ms, kOptional}, FieldSpec{"error", &R::error, kOptional}};
};
template <>
struct Table<launcher::NodeDrained> {
    using R = launcher::NodeDrained;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"reason", &R::reason}};
};
template <>
struct Table<launcher::RemoteKill> {
    using R = launcher::RemoteKill;
    static constexpr auto fields = std::tuple{
        FieldSpec{"role", &R::role}, FieldSpec{"pid", &R::pid}, FieldSpec{"node", &R::node},
        FieldSpec{"result", &R::result}, FieldSpec{"ms", &R::ms}, FieldSpec{"error", &R::error, kOptional}};
};
template <>
struct Table<launcher::DrainFailed> {
    using R = launcher::DrainFailed;
    static constexpr auto fields = std::tuple{
        FieldSpec{"node", &R::node}, FieldSpec{"reason", &R::reason}, FieldSpec{"error", &R::error}};
};
template <>
struct Table<launcher::Requeue> {
    using R = launcher::Requeue;
    static constexpr auto fields = std::tuple{
        FieldSpec{"job_id", &R::job_id}, FieldSpec{"checkpoint_step", &R::checkpoint_step}};
};
template <>
struct Table<launcher::RequeueFailed> {
    using R = launcher::RequeueFailed;
    static constexpr auto fields = std::tuple{
        FieldSpec{"job_id", &R::job_id}, FieldSpec{"error", &R::error}};
};
template <>
struct Table<launcher::ShmCleanup> {
    using R = launcher::ShmCleanup;
    static constexpr auto fields = std::tuple{
        FieldSpec{"job", &R::job}, FieldSpec{"segments_removed", &R::segments_removed}};
};

}  // namespace flashrec::ft::records

namespace flashrec::launcher {

namespace {
template <class R>
nlohmann::json write(const R& record) {
    nlohmann::json j = nlohmann::json::object();
    ft::records::write_fields(record, j);
    return j;
}
}  // namespace

nlohmann::json JobRunning::to_json() const { return write(*this); }
nlohmann::json StartupStuck::to_json() const { return write(*this); }
nlohmann::json MpirunLingered::to_json() const { return write(*this); }
nlohmann::json SpawnDaemonLost::to_json() const { return write(*this); }
nlohmann::json DaemonLostStarting::to_json() const { return write(*this); }
nlohmann::json NodeLost::to_json() const { return write(*this); }
nlohmann::json DaemonLossUnconfirmed::to_json() const { return write(*this); }
nlohmann::json NodeLeftAllocation::to_json() const { return write(*this); }
nlohmann::json DrainSkipped::to_json() const { return write(*this); }
nlohmann::json NewLayout::to_json() const { return write(*this); }
nlohmann::json RoleMoved::to_json() const { return write(*this); }
nlohmann::json JobEnd::to_json() const { return write(*this); }
nlohmann::json ExpectedFailureCost::to_json() const { return write(*this); }
nlohmann::json SignalIgnored::to_json() const { return write(*this); }
nlohmann::json Interrupted::to_json() const { return write(*this); }
nlohmann::json AttemptJudged::to_json() const { return write(*this); }
nlohmann::json StartRetried::to_json() const { return write(*this); }
nlohmann::json WarmRelaunchBeforeHdf5::to_json() const { return write(*this); }
nlohmann::json WarmRelaunchRefused::to_json() const { return write(*this); }
nlohmann::json ColdRestartRefused::to_json() const { return write(*this); }
nlohmann::json RestartLoop::to_json() const { return write(*this); }
nlohmann::json CheckpointForRequeue::to_json() const { return write(*this); }
nlohmann::json AttemptLaunched::to_json() const { return write(*this); }
nlohmann::json WarmRelaunch::to_json() const { return write(*this); }
nlohmann::json ColdRestart::to_json() const { return write(*this); }
nlohmann::json Failure::to_json() const { return write(*this); }
nlohmann::json HangKill::to_json() const { return write(*this); }
nlohmann::json KillConfirmed::to_json() const { return write(*this); }
nlohmann::json ReleasedSpareLeft::to_json() const { return write(*this); }
nlohmann::json StallCleared::to_json() const { return write(*this); }
nlohmann::json RankReconnected::to_json() const { return write(*this); }
nlohmann::json RankLostWithNode::to_json() const { return write(*this); }
nlohmann::json NodeSilence::to_json() const { return write(*this); }
nlohmann::json ControlPlaneListening::to_json() const { return write(*this); }
nlohmann::json ControlPlaneError::to_json() const { return write(*this); }
nlohmann::json ConnectionDropped::to_json() const { return write(*this); }
nlohmann::json ConnectionDropsUnlogged::to_json() const { return write(*this); }
nlohmann::json CallbackFailed::to_json() const { return write(*this); }
nlohmann::json RankRegistered::to_json() const { return write(*this); }
nlohmann::json RankSupersededRecord::to_json() const { return write(*this); }
nlohmann::json RankLostRecord::to_json() const { return write(*this); }
nlohmann::json RankHungRecord::to_json() const { return write(*this); }
nlohmann::json EventRejected::to_json() const { return write(*this); }
nlohmann::json RankExited::to_json() const { return write(*this); }
nlohmann::json RankLossPassedOn::to_json() const { return write(*this); }
nlohmann::json NodeFellSilent::to_json() const { return write(*this); }
nlohmann::json ControllerPaused::to_json() const { return write(*this); }
nlohmann::json AcceptFailed::to_json() const { return write(*this); }
nlohmann::json JobStart::to_json() const { return write(*this); }
nlohmann::json JobLayout::to_json() const { return write(*this); }
nlohmann::json AttemptTornDown::to_json() const { return write(*this); }
nlohmann::json AllocationUnknown::to_json() const { return write(*this); }
nlohmann::json NodeCheck::to_json() const { return write(*this); }
nlohmann::json NodeDrained::to_json() const { return write(*this); }
nlohmann::json RemoteKill::to_json() const { return write(*this); }
nlohmann::json DrainFailed::to_json() const { return write(*this); }
nlohmann::json Requeue::to_json() const { return write(*this); }
nlohmann::json RequeueFailed::to_json() const { return write(*this); }
nlohmann::json ShmCleanup::to_json() const { return write(*this); }

std::string_view event_of(const CoreRecord& record) {
    return std::visit([](const auto& r) { return std::string_view(r.kEvent); }, record);
}
nlohmann::json fields_of(const CoreRecord& record) {
    return std::visit([](const auto& r) { return r.to_json(); }, record);
}

}  // namespace flashrec::launcher
