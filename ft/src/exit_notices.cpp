#include "flashrec/ft/exit_notices.hpp"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>

#if FLASHREC_HAVE_PMIX
#include <dlfcn.h>
#include <pmix.h>
#endif

namespace flashrec::ft {

std::optional<std::string> exits_unseen(bool shared_memory, bool detector_on, const ExitNotices& notices) {
    if (!shared_memory || detector_on || notices.active()) return std::nullopt;
    return "over shared memory a rank that exits with a non-zero code is reported failed only by PRRTE's notice, "
           "and this process cannot pass it to ULFM (" + notices.unavailable().value_or("unknown reason") +
           "): such an exit would hang the survivors. Use mpi.transport: tcp, or mpi.detector: true "
           "(docs/ulfm-traps.md, trap 1)";
}

std::optional<std::string> pmix_abi_mismatch(const std::string& version) {
    static constexpr std::string_view kKey = "Stable ABI: ";
    const auto at = version.find(kKey);
    const std::size_t digits = at == std::string::npos ? 0 : at + kKey.size();
    const int major = at == std::string::npos || digits >= version.size() || !std::isdigit(static_cast<unsigned char>(version[digits]))
                          ? -1
                          : std::atoi(version.c_str() + digits);
    if (major == 4 || major == 5) return std::nullopt;
    return "this process's PMIx is '" + version + "': flashrec's notices are built for PMIx's stable ABI 4 and 5 "
           "(Debian's PMIx 4.2 header, checked against Open MPI 5.0.10's PMIx 5.0)";
}

#if !FLASHREC_HAVE_PMIX

struct ExitNotices::Gate {};

ExitNotices::ExitNotices(bool)
    : unavailable_("flashrec was built without PMIx's header (pmix.h; scripts/setup.sh installs libpmix-dev)") {}

ExitNotices::~ExitNotices() = default;

ExitNotices::LossSink ExitNotices::loss_sink() const {
    return [](const std::string&, std::uint32_t) {};
}

#else

namespace {

// The PMIx client of this process's MPI, found in the process: the header gives the types only.
struct PmixApi {
    decltype(&PMIx_Register_event_handler) register_handler = nullptr;
    decltype(&PMIx_Deregister_event_handler) deregister_handler = nullptr;
    decltype(&PMIx_Notify_event) notify = nullptr;
    decltype(&PMIx_Get_version) version = nullptr;

    static const PmixApi& get() {
        static const PmixApi api = [] {
            PmixApi a;
            a.register_handler = reinterpret_cast<decltype(a.register_handler)>(dlsym(RTLD_DEFAULT, "PMIx_Register_event_handler"));
            a.deregister_handler = reinterpret_cast<decltype(a.deregister_handler)>(dlsym(RTLD_DEFAULT, "PMIx_Deregister_event_handler"));
            a.notify = reinterpret_cast<decltype(a.notify)>(dlsym(RTLD_DEFAULT, "PMIx_Notify_event"));
            a.version = reinterpret_cast<decltype(a.version)>(dlsym(RTLD_DEFAULT, "PMIx_Get_version"));
            return a;
        }();
        return api;
    }
    bool complete() const { return register_handler && deregister_handler && notify; }
};

// What PMIx_Notify_event needs alive until its callback: one info naming the failed process.
struct Notice {
    pmix_proc_t failed{};
    pmix_info_t affected{};
};

void notice_sent(pmix_status_t, void* cbdata) { delete static_cast<Notice*>(cbdata); }

// The handler gets no context of its own from PMIx; one process registers one handler.
std::atomic<bool> announce_notices{false};

bool key_is(const pmix_info_t& info, const char* key) { return std::strncmp(info.key, key, PMIX_MAX_KEYLEN) == 0; }

// Tells ULFM, inside this process, that `failed` is gone: PMIX_ERR_PROC_TERM_WO_SYNC, the event
// ULFM itself uses to pass a failure on. Local to this process: every process of the job learns
// of the loss itself and passes it on. Says so on stderr when asked to, or when it fails.
void pass_to_ulfm(const pmix_proc_t& failed, const std::string& how) {
    auto* notice = new Notice;
    notice->failed = failed;
    std::strncpy(notice->affected.key, PMIX_EVENT_AFFECTED_PROC, PMIX_MAX_KEYLEN);
    notice->affected.value.type = PMIX_PROC;
    notice->affected.value.data.proc = &notice->failed;
    const pmix_status_t rc = PmixApi::get().notify(PMIX_ERR_PROC_TERM_WO_SYNC, &notice->failed, PMIX_RANGE_PROC_LOCAL,
                                                   &notice->affected, 1, notice_sent, notice);
    // PMIX_OPERATION_SUCCEEDED: delivered at once, and the callback is not called.
    const bool sent = rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED;
    if (!sent || announce_notices.load())
        std::fprintf(stderr, "flashrec[pid %d]: MPI process %u of %s %s; %s\n",
                     static_cast<int>(::getpid()), failed.rank, failed.nspace, how.c_str(),
                     sent ? "passed to ULFM as a process failure" : "could not pass it to ULFM");
    if (rc != PMIX_SUCCESS) delete notice;
}

// Runs on PMIx's progress thread.
void on_nonzero_exit(size_t, pmix_status_t, const pmix_proc_t* source, pmix_info_t info[], size_t ninfo,
                     pmix_info_t*, size_t, pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
    pmix_proc_t failed = *source;
    int exit_code = -1;
    for (size_t i = 0; i < ninfo; ++i) {
        if (key_is(info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC && info[i].value.data.proc)
            failed = *info[i].value.data.proc;
        else if (key_is(info[i], PMIX_EXIT_CODE) && info[i].value.type == PMIX_INT)
            exit_code = info[i].value.data.integer;
    }
    pass_to_ulfm(failed, "exited with code " + std::to_string(exit_code) + " (docs/ulfm-traps.md, trap 1)");
    if (cbfunc) cbfunc(PMIX_EVENT_ACTION_COMPLETE, nullptr, 0, nullptr, nullptr, cbdata);
}

// PMIx answers registration and removal on its own thread.
struct Reply {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    pmix_status_t status = PMIX_ERROR;
    size_t ref = 0;

    void set(pmix_status_t s, size_t r) {
        {
            std::lock_guard lock(mutex);
            status = s;
            ref = r;
            done = true;
        }
        done_cv.notify_all();
    }
    // Bounded: a PMIx whose server is gone must not keep this process from ending.
    bool wait() {
        std::unique_lock lock(mutex);
        return done_cv.wait_for(lock, std::chrono::seconds(5), [&] { return done; });
    }
};

}  // namespace

// Open from registration to destruction; the sink's calls and the destructor take turns.
struct ExitNotices::Gate {
    std::mutex mutex;
    bool open = false;
};

ExitNotices::LossSink ExitNotices::loss_sink() const {
    return [gate = gate_](const std::string& nspace, std::uint32_t rank) {
        if (!gate) return;
        const std::lock_guard lock(gate->mutex);
        if (!gate->open) return;
        pmix_proc_t failed{};
        std::strncpy(failed.nspace, nspace.c_str(), PMIX_MAX_NSLEN);
        failed.rank = rank;
        pass_to_ulfm(failed, "is gone (flashrec-launch's control plane: docs/control-plane.md, \"Losses passed on\")");
    };
}

ExitNotices::ExitNotices(bool announce) : gate_(std::make_shared<Gate>()) {
    announce_notices.store(announce);
    const PmixApi& api = PmixApi::get();
    if (!api.complete()) {
        unavailable_ = "this process's MPI runs no PMIx client (PMIx_Register_event_handler not found)";
        return;
    }
    if (api.version) {
        unavailable_ = pmix_abi_mismatch(api.version());
        if (unavailable_) return;
    }
    pmix_status_t codes[] = {PMIX_ERR_EXIT_NONZERO_TERM};
    pmix_info_t first{};
    std::strncpy(first.key, PMIX_EVENT_HDLR_PREPEND, PMIX_MAX_KEYLEN);
    first.value.type = PMIX_BOOL;
    first.value.data.flag = true;
    // Outlives this constructor when PMIx never answers: leaked then, on purpose.
    auto* reply = new Reply;
    const pmix_status_t rc = api.register_handler(
        codes, 1, &first, 1, on_nonzero_exit,
        [](pmix_status_t status, size_t ref, void* cbdata) { static_cast<Reply*>(cbdata)->set(status, ref); }, reply);
    if (rc != PMIX_SUCCESS) {
        unavailable_ = "PMIx_Register_event_handler failed with status " + std::to_string(rc);
        delete reply;
        return;
    }
    if (!reply->wait()) {
        unavailable_ = "PMIx did not confirm the event handler within 5 s";
        return;
    }
    if (reply->status != PMIX_SUCCESS) unavailable_ = "PMIx refused the event handler, status " + std::to_string(reply->status);
    else {
        registered_ = true;
        handler_ref_ = reply->ref;
        gate_->open = true;
    }
    delete reply;
}

ExitNotices::~ExitNotices() {
    {
        const std::lock_guard lock(gate_->mutex);
        gate_->open = false;
    }
    if (!registered_) return;
    auto* reply = new Reply;
    const pmix_status_t rc = PmixApi::get().deregister_handler(
        handler_ref_, [](pmix_status_t status, void* cbdata) { static_cast<Reply*>(cbdata)->set(status, 0); }, reply);
    if (rc != PMIX_SUCCESS || reply->wait()) delete reply;
}

#endif

}  // namespace flashrec::ft
