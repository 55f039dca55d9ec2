// PRRTE's notice that a process exited with a non-zero code, handed to ULFM as a process failure.
//
// When a rank exit()s or _exit()s with a non-zero code, PRRTE tells every process of its job at
// once (a PMIx event, PMIX_ERR_EXIT_NONZERO_TERM), but ULFM listens only for deaths by signal,
// aborts and exits without finalize (docs/ulfm-traps.md trap 1). Over TCP the closed socket
// reports the exit anyway; over shared memory nothing did, and the survivors waited in their
// collective until Open MPI's in-band detector timed out, or forever without it. This handler
// takes the notice and re-raises it inside this process as PMIX_ERR_PROC_TERM_WO_SYNC about the
// same process, the event ULFM itself uses to pass a failure on, so the survivors' pending
// operations fail with MPIX_ERR_PROC_FAILED in milliseconds on every transport.
//
// The PMIx client is the one this process's MPI already runs: its functions are looked up in
// the process (dlsym), nothing links a second PMIx. Where it is not there (an MPI without PMIx,
// or flashrec built without PMIx's header), `active()` is false and a reason says why.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace flashrec::ft {

class ExitNotices {
public:
    // After MPI init: registers the handler. Never throws; see active()/unavailable().
    // `announce`: say on stderr each notice passed on (one process of a job does: every
    // survivor gets each notice). A notice that cannot be passed on is always said.
    explicit ExitNotices(bool announce = false);
    // Before MPI_Finalize: deregisters it.
    ~ExitNotices();
    ExitNotices(const ExitNotices&) = delete;
    ExitNotices& operator=(const ExitNotices&) = delete;

    bool active() const { return registered_; }
    // Why the handler is not registered, for the log; nullopt when it is.
    const std::optional<std::string>& unavailable() const { return unavailable_; }

    // Hands ULFM the loss of another MPI process learnt elsewhere (flashrec-launch's control
    // plane: PEER_LOST), as the same event. Callable from any thread; once this object is gone
    // (before MPI_Finalize) it does nothing. Without active() it does nothing either.
    using LossSink = std::function<void(const std::string& nspace, std::uint32_t rank)>;
    LossSink loss_sink() const;

private:
    struct Gate;
    bool registered_ = false;
    std::size_t handler_ref_ = 0;
    std::optional<std::string> unavailable_;
    std::shared_ptr<Gate> gate_;
};

// Whether the notices' structs (built from Debian's PMIx 4.2 header) fit the PMIx client a
// process runs, from PMIx_Get_version()'s "... Stable ABI: 5.0 ...": nullopt when they do
// (stable ABI 4.x or 5.x: 5.0 is the one the conformance set ran against), else why not.
std::optional<std::string> pmix_abi_mismatch(const std::string& version);

// What is wrong when a shared-memory transport runs with neither the notices nor Open MPI's
// in-band detector: a rank's non-zero exit would then never be reported and the survivors hang
// (trap 1). nullopt when either is there, or over TCP.
std::optional<std::string> exits_unseen(bool shared_memory, bool detector_on, const ExitNotices& notices);

}  // namespace flashrec::ft
