#include "flashrec/ft/pmix_failure_events.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "flashrec/ft/contract.hpp"

#if FLASHREC_HAVE_PMIX
#include <dlfcn.h>
#include <pmix.h>
#endif

namespace flashrec::ft {

namespace {
std::atomic<std::uint64_t> narrowed{0};
}

bool failure_events_kept_local() {
    static const bool kept = [] {
        const char* value = std::getenv(env::kDirectLaunch);
        return value && std::strcmp(value, "1") == 0;
    }();
    return kept;
}

std::uint64_t failure_events_narrowed() { return narrowed.load(); }

#if !FLASHREC_HAVE_PMIX

std::optional<std::string> failure_events_interposer_unbound() {
    return "flashrec was built without PMIx's header (pmix.h; scripts/setup.sh installs libpmix-dev)";
}

}  // namespace flashrec::ft

#else

namespace {

using NotifyFn = decltype(&PMIx_Notify_event);

// The PMIx client's own PMIx_Notify_event: the next definition after libflashrec's.
NotifyFn real_notify() {
    static const NotifyFn fn = reinterpret_cast<NotifyFn>(dlsym(RTLD_NEXT, "PMIx_Notify_event"));
    return fn;
}

}  // namespace

std::optional<std::string> failure_events_interposer_unbound() {
    void* bound = dlsym(RTLD_DEFAULT, "PMIx_Notify_event");
    if (!bound) return "this process runs no PMIx client (PMIx_Notify_event not found)";
    if (bound != reinterpret_cast<void*>(&PMIx_Notify_event))
        return "PMIx_Notify_event binds to the PMIx client before libflashrec (is libflashrec linked by the trainer "
               "itself, ahead of libmpi? a static or LD_PRELOADed PMIx wins over it)";
    if (!real_notify()) return "no PMIx client behind libflashrec's PMIx_Notify_event";
    return std::nullopt;
}

}  // namespace flashrec::ft

// The interposer: C linkage, default visibility, the exact signature of pmix.h.
extern "C" __attribute__((visibility("default"))) pmix_status_t PMIx_Notify_event(
    pmix_status_t status, const pmix_proc_t* source, pmix_data_range_t range, const pmix_info_t info[], size_t ninfo,
    pmix_op_cbfunc_t cbfunc, void* cbdata) {
    using namespace flashrec::ft;
    const NotifyFn real = real_notify();
    if (!real) return PMIX_ERR_NOT_SUPPORTED;
    if (status == PMIX_ERR_PROC_TERM_WO_SYNC && range != PMIX_RANGE_PROC_LOCAL && failure_events_kept_local()) {
        range = PMIX_RANGE_PROC_LOCAL;
        narrowed.fetch_add(1);
    }
    return real(status, source, range, info, ninfo, cbfunc, cbdata);
}

#endif
