#include "job_inputs.hpp"

namespace flashrec::launcher {

std::optional<Input> record_input(const nlohmann::json& record) {
    namespace records = ft::records;
    const std::string name = record.value("event", "");
    if (name == records::Step::kEvent) return records::Step::from_json(record);
    if (name == records::EndingJob::kEvent) return records::EndingJob::from_json(record);
    if (name == records::FaultInjected::kEvent) return records::FaultInjected::from_json(record);
    if (name == records::Recovery::kEvent) return RecoveryRecord{records::Recovery::from_json(record), record};
    if (name == records::JobStats::kEvent) return records::JobStats::from_json(record);
    if (name == records::ProtectionInterval::kEvent) return records::ProtectionInterval::from_json(record);
    if (name == records::CheckpointPublished::kEvent) return records::CheckpointPublished::from_json(record);
    if (name == records::MpiErrorSeen::kEvent) return records::MpiErrorSeen::from_json(record);
    if (name == records::SpareReleased::kEvent) return records::SpareReleased::from_json(record);
    if (name == records::RoleFinished::kEvent) return records::RoleFinished::from_json(record);
    return std::nullopt;
}

}  // namespace flashrec::launcher
