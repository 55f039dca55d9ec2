#include "flashrec/gpu/pinning.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>

#include "flashrec/errors.hpp"
#include "flashrec/gpu/cuda_check.hpp"

namespace flashrec::gpu {

HostRange range_of(const void* data, std::size_t bytes) {
    return {reinterpret_cast<std::uintptr_t>(data), bytes};
}

std::size_t system_page_size() {
    const long page = ::sysconf(_SC_PAGESIZE);
    return page > 0 ? static_cast<std::size_t>(page) : 4096;
}

std::vector<HostRange> plan_pinning(std::span<const HostRange> spans, std::size_t page) {
    if (page == 0 || (page & (page - 1)) != 0)
        throw Error("plan_pinning: page size " + std::to_string(page) + " is not a power of two");
    const std::uintptr_t mask = ~static_cast<std::uintptr_t>(page - 1);
    std::vector<HostRange> rounded;
    for (const HostRange& span : spans) {
        if (span.bytes == 0) continue;
        if (span.begin > UINTPTR_MAX - page || span.bytes > UINTPTR_MAX - page - span.begin)
            throw Error("plan_pinning: span at " + std::to_string(span.begin) + " of " +
                        std::to_string(span.bytes) + " bytes wraps the address space");
        const std::uintptr_t begin = span.begin & mask;
        const std::uintptr_t end = (span.end() + page - 1) & mask;
        rounded.push_back({begin, end - begin});
    }
    std::sort(rounded.begin(), rounded.end(),
              [](const HostRange& a, const HostRange& b) { return a.begin < b.begin; });
    std::vector<HostRange> merged;
    for (const HostRange& r : rounded) {
        if (!merged.empty() && r.begin < merged.back().end()) {
            const std::uintptr_t end = std::max(merged.back().end(), r.end());
            merged.back().bytes = end - merged.back().begin;
        } else {
            merged.push_back(r);
        }
    }
    return merged;
}

std::vector<HostRange> subtract_ranges(std::span<const HostRange> wanted,
                                       std::span<const HostRange> have) {
    std::vector<HostRange> out;
    std::size_t h = 0;
    for (const HostRange& w : wanted) {
        std::uintptr_t cursor = w.begin;
        const std::uintptr_t end = w.end();
        while (h < have.size() && have[h].end() <= cursor) ++h;
        for (std::size_t k = h; k < have.size() && have[k].begin < end && cursor < end; ++k) {
            if (have[k].begin > cursor) out.push_back({cursor, have[k].begin - cursor});
            cursor = std::max(cursor, have[k].end());
        }
        if (cursor < end) out.push_back({cursor, end - cursor});
    }
    return out;
}

std::vector<HostRange> split_at_ranges(HostRange span, std::span<const HostRange> ranges) {
    std::vector<HostRange> out;
    std::uintptr_t cursor = span.begin;
    const std::uintptr_t end = span.end();
    for (const HostRange& r : ranges) {
        if (cursor >= end) break;
        if (r.end() <= cursor) continue;
        if (r.begin >= end) break;
        if (r.begin > cursor) out.push_back({cursor, r.begin - cursor});  // a gap before it
        const std::uintptr_t stop = std::min(end, r.end());
        out.push_back({std::max(cursor, r.begin), stop - std::max(cursor, r.begin)});
        cursor = stop;
    }
    if (cursor < end) out.push_back({cursor, end - cursor});
    return out;
}

void CudaPinBackend::pin(void* data, std::size_t bytes) {
    FLASHREC_CUDA_CHECK(cudaHostRegister(data, bytes, cudaHostRegisterPortable));
}

void CudaPinBackend::unpin(void* data, std::size_t /*bytes*/) noexcept {
    (void)cudaHostUnregister(data);
}

PinnedSet::PinnedSet(PinBackend& backend, std::size_t page) : backend_(&backend), page_(page) {
    if (page_ == 0 || (page_ & (page_ - 1)) != 0)
        throw Error("PinnedSet: page size " + std::to_string(page_) + " is not a power of two");
}

PinnedSet::PinnedSet(PinnedSet&& other) noexcept
    : backend_(other.backend_),
      page_(other.page_),
      ranges_(std::exchange(other.ranges_, {})),
      order_(std::exchange(other.order_, {})) {}

PinnedSet& PinnedSet::operator=(PinnedSet&& other) noexcept {
    if (this != &other) {
        clear();
        backend_ = other.backend_;
        page_ = other.page_;
        ranges_ = std::exchange(other.ranges_, {});
        order_ = std::exchange(other.order_, {});
    }
    return *this;
}

PinnedSet::~PinnedSet() { clear(); }

void PinnedSet::pin(std::span<const HostRange> spans) {
    const std::vector<HostRange> planned = plan_pinning(spans, page_);
    const std::vector<HostRange> missing = subtract_ranges(planned, ranges_);
    for (const HostRange& r : missing) {
        backend_->pin(r.data(), r.bytes);  // throws: what is in ranges_ stays owned
        const auto at = std::lower_bound(
            ranges_.begin(), ranges_.end(), r,
            [](const HostRange& a, const HostRange& b) { return a.begin < b.begin; });
        ranges_.insert(at, r);
        order_.push_back(r);
    }
}

void PinnedSet::pin(const void* data, std::size_t bytes) {
    const HostRange span = range_of(data, bytes);
    pin(std::span<const HostRange>(&span, 1));
}

bool PinnedSet::covers(const void* data, std::size_t bytes) const {
    const HostRange want = range_of(data, bytes);
    if (want.bytes == 0) return true;
    return subtract_ranges(std::span<const HostRange>(&want, 1), ranges_).empty();
}

std::vector<HostRange> PinnedSet::pieces(const void* data, std::size_t bytes) const {
    return split_at_ranges(range_of(data, bytes), ranges_);
}

std::size_t PinnedSet::pinned_bytes() const {
    std::size_t total = 0;
    for (const HostRange& r : ranges_) total += r.bytes;
    return total;
}

void PinnedSet::clear() noexcept {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) backend_->unpin(it->data(), it->bytes);
    order_.clear();
    ranges_.clear();
}

}  // namespace flashrec::gpu
