#include "flashrec/ft/progress_ticker.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace flashrec::ft {

namespace {

// One MPI_T control variable as a double (booleans 0/1); nullopt when MPI_T does not have it
// or it is of another type.
std::optional<double> read_cvar(const char* name) {
    int index = -1;
    if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) return std::nullopt;
    char ignored_name[256], ignored_desc[8];
    int name_len = sizeof ignored_name, desc_len = sizeof ignored_desc, verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    MPI_T_enum enumtype = MPI_T_ENUM_NULL;
    if (MPI_T_cvar_get_info(index, ignored_name, &name_len, &verbosity, &type, &enumtype, ignored_desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS)
        return std::nullopt;
    MPI_T_cvar_handle handle = MPI_T_CVAR_HANDLE_NULL;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return std::nullopt;
    // Open MPI 5 gives its boolean MCA parameters as MPI_C_BOOL, its doubles as MPI_DOUBLE.
    alignas(8) unsigned char raw[16] = {};
    std::optional<double> value;
    if (count == 1 && MPI_T_cvar_read(handle, raw) == MPI_SUCCESS) {
        if (type == MPI_C_BOOL) value = *reinterpret_cast<bool*>(raw) ? 1.0 : 0.0;
        else if (type == MPI_INT) value = *reinterpret_cast<int*>(raw);
        else if (type == MPI_DOUBLE) value = *reinterpret_cast<double*>(raw);
    }
    MPI_T_cvar_handle_free(&handle);
    return value;
}

}  // namespace

InBandDetector read_in_band_detector() {
    InBandDetector d;
    int provided = 0;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return d;
    d.on = read_cvar("mpi_ft_detector").value_or(0) != 0;
    d.own_thread = read_cvar("mpi_ft_detector_thread").value_or(0) != 0;
    d.period_s = read_cvar("mpi_ft_detector_period").value_or(0);
    d.timeout_s = read_cvar("mpi_ft_detector_timeout").value_or(0);
    MPI_T_finalize();
    return d;
}

std::optional<std::chrono::milliseconds> ticker_interval(const InBandDetector& detector) {
    if (!detector.on || detector.own_thread) return std::nullopt;
    // An unreadable period: Open MPI's default when the detector is on is 3 s; tick often anyway.
    const double period_ms = detector.period_s > 0 ? detector.period_s * 1000.0 : 200.0;
    return std::chrono::milliseconds(std::max<long long>(1, static_cast<long long>(period_ms / 4)));
}

std::optional<std::string> detector_mismatch(bool wanted, const InBandDetector& detector) {
    if (!wanted) return std::nullopt;
    if (!detector.on)
        return "mpi.detector asks for Open MPI's in-band failure detector, but MPI runs without it (not started "
               "through tools/fr-mpirun with FLASHREC_TRANSPORT and FLASHREC_DETECTOR?): a hung rank is then found "
               "by the launcher's hang timeout only";
    if (detector.own_thread)
        return "Open MPI's in-band failure detector runs its own thread (mpi_ft_detector_thread): MPI_Finalize hung "
               "after a failure that way (docs/ulfm-traps.md trap 11)";
    return std::nullopt;
}

ProgressTicker::ProgressTicker(std::chrono::milliseconds interval) : interval_(interval) {
    MPI_Comm_dup(MPI_COMM_SELF, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    thread_ = std::jthread([this](std::stop_token stop) {
        std::mutex mutex;
        std::condition_variable_any wake;
        std::unique_lock lock(mutex);
        while (!stop.stop_requested()) {
            int flag = 0;
            // Its return code does not matter: the call is made for the progress it drives.
            (void)MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
            wake.wait_for(lock, stop, interval_, [] { return false; });
        }
    });
}

ProgressTicker::~ProgressTicker() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
    MPI_Comm_free(&comm_);
}

}  // namespace flashrec::ft
