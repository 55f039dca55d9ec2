// What transfers of an aborted epoch may still touch. Under ULFM a revoke ends the waits, not
// the transfers: a request MPI matched before the revoke can still read its send buffer or
// write its receive buffer afterwards (seen here), and such a request is never freed (an
// error on a freed request aborts the process). Whatever those requests point at (a Protection
// and its landing buffers, snapshot readers and stores, a replacement's staging buffers) is
// handed to one Quarantine, which keeps it alive until the job has run clean for a while.
#pragma once
#include <cstddef>
#include <memory>
#include <span>
#include <vector>

namespace flashrec::ft {

class Quarantine {
public:
    // Steps without a failure after which an aborted epoch's transfers are long over.
    static constexpr int kCleanSteps = 3;

    Quarantine() = default;
    Quarantine(const Quarantine&) = delete;
    Quarantine& operator=(const Quarantine&) = delete;

    // An epoch was aborted: what is held now, and what is held from now on, may still be the
    // target or source of its transfers. Restarts the count of clean steps.
    void epoch_aborted() {
        after_abort_ = true;
        clean_steps_ = 0;
    }
    // Keeps `object` alive (until released); returns it.
    template <class T>
    T& hold(std::shared_ptr<T> object) {
        T& kept = *object;
        held_.push_back(std::move(object));
        return kept;
    }
    template <class T>
    T& hold(std::unique_ptr<T> object) {
        return hold(std::shared_ptr<T>(std::move(object)));
    }
    // A host buffer of `bytes` that MPI may write into, kept like the rest.
    std::span<std::byte> buffer(std::size_t bytes) {
        auto& kept = hold(std::make_shared<std::vector<std::byte>>(bytes));
        return {kept.data(), kept.size()};
    }
    // A step ended with no failure anywhere (the sync point passed): after kCleanSteps of them
    // following an abort, everything held is released.
    void clean_step() {
        if (after_abort_ && ++clean_steps_ >= kCleanSteps) release();
    }
    // Whether an aborted epoch's transfers may still be in flight (a new Protection must not
    // receive into memory they may write).
    bool after_abort() const { return after_abort_; }
    // Releases everything now (no transfer can touch it any more: the job ends).
    void release() {
        held_.clear();
        after_abort_ = false;
        clean_steps_ = 0;
    }

private:
    std::vector<std::shared_ptr<void>> held_;
    bool after_abort_ = false;
    int clean_steps_ = 0;
};

}  // namespace flashrec::ft
