// Keeps MPI progressing while the process computes, for Open MPI's in-band failure detector
// (mpi_ft_detector, docs/ulfm-traps.md trap 11). Without its own thread the detector sends
// heartbeats only while the process is inside MPI, so ranks that compute for longer than its
// timeout were all declared failed; with its thread on, MPI_Finalize hung after a SIGKILL.
// flashrec keeps the thread off and ticks MPI from one thread of its own instead.
#pragma once
#include <mpi.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>

namespace flashrec::ft {

// Open MPI's in-band detector settings, as this process's MPI sees them (MCA parameters).
struct InBandDetector {
    bool on = false;           // mpi_ft_detector
    bool own_thread = false;   // mpi_ft_detector_thread
    double period_s = 0;       // mpi_ft_detector_period
    double timeout_s = 0;      // mpi_ft_detector_timeout
};

// Read through MPI_T control variables; all off when they cannot be read. After MPI init.
InBandDetector read_in_band_detector();

// How often the ticker probes: a quarter of the heartbeat period (at least 1 ms), so a probe
// falls in every period even when one is late; nullopt when no ticker is needed (detector off,
// or it runs its own thread).
std::optional<std::chrono::milliseconds> ticker_interval(const InBandDetector& detector);

// What is wrong when the job asked for the in-band detector (mpi.detector with a shared-memory
// transport) and MPI runs otherwise; nullopt when they agree or nothing was asked.
std::optional<std::string> detector_mismatch(bool wanted, const InBandDetector& detector);

// A thread that calls MPI_Iprobe on a private duplicate of MPI_COMM_SELF every `interval`.
// MPI_COMM_SELF, not a copy of the world: no peer of it can fail, so no recovery ever has to
// rebuild it, and an ANY_SOURCE probe on a communicator with a failed member returns at once
// without progressing MPI. Concurrent with the other threads' MPI calls (MPI_THREAD_MULTIPLE).
// Construct after MPI init; destroy before MPI_Finalize.
class ProgressTicker {
public:
    explicit ProgressTicker(std::chrono::milliseconds interval);
    ~ProgressTicker();
    ProgressTicker(const ProgressTicker&) = delete;
    ProgressTicker& operator=(const ProgressTicker&) = delete;

    std::chrono::milliseconds interval() const { return interval_; }

private:
    std::chrono::milliseconds interval_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    std::jthread thread_;
};

}  // namespace flashrec::ft
