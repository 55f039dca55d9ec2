#include "flashrec/ft/protection.hpp"

#include <mpi.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

void accumulate(SnapshotTiming& total, const SnapshotTiming& t) {
    total.seconds += t.seconds;
    total.copied_bytes += t.copied_bytes;
    total.sent_bytes += t.sent_bytes;
    total.received_bytes += t.received_bytes;
    total.cpu_seconds += t.cpu_seconds;
    total.copy_seconds += t.copy_seconds;
    total.replication_seconds += t.replication_seconds;
    total.sender_touched_bytes += t.sender_touched_bytes;
    total.holder_touched_bytes += t.holder_touched_bytes;
    total.hashed_in_cache_bytes += t.hashed_in_cache_bytes;
}

SnapshotLayout layout_of(const std::vector<ProtectedRegion>& regions, bool payload_only) {
    SnapshotLayout layout;
    for (const auto& r : regions)
        if (!payload_only || r.replicate) layout.push_back({r.name, r.bytes});
    return layout;
}

}  // namespace

SnapshotLayout payload_layout(const std::vector<ProtectedRegion>& regions) {
    return layout_of(regions, true);
}
SnapshotLayout full_layout(const std::vector<ProtectedRegion>& regions) {
    return layout_of(regions, false);
}

Protection::Protection(ProtectionSetup setup, Comm replication)
    : setup_(std::move(setup)),
      comm_(std::move(replication)),
      own_(setup_.job, setup_.store_prefix + setup_.role_key, full_layout(setup_.regions)) {
    if (setup_.chunk_bytes == 0 || setup_.chunk_bytes > (1u << 30))
        throw Error("protection.chunk_bytes must be between 1 byte and 1 GiB");
    if (!setup_.copier) {
        std::vector<LiveRegion> live;
        for (const auto& r : setup_.regions) live.push_back({r.data, r.bytes});
        setup_.copier = std::make_shared<HostRegionCopier>(std::move(live));
    }
    for (const auto& p : setup_.predecessors) {
        std::size_t bytes = 0;
        for (const auto& b : p.payload) bytes += b.bytes;
        landing_.emplace_back(bytes);
    }
    for (const auto& p : setup_.predecessors)
        held_.emplace(p.role_key,
                      SnapshotStore(setup_.job,
                                    setup_.store_prefix + peer_role_key(p.role_key, setup_.role_key),
                                    p.payload));
    thread_ = std::thread([this] { worker(); });
}

Protection::~Protection() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // Before the stores are unmapped (members go in reverse order, setup_ last): a GPU copier
    // has page-locked their slots and may still have copies in flight into them.
    setup_.copier.reset();
}

const SnapshotStore* Protection::held(const std::string& owner_key) const {
    auto it = held_.find(owner_key);
    return it == held_.end() ? nullptr : &it->second;
}

std::size_t Protection::host_bytes() const {
    std::size_t total = own_.bytes();
    for (const auto& [key, store] : held_) total += store.bytes();
    for (const auto& buffer : landing_) total += buffer.size();
    return total;
}

void Protection::start_snapshot(std::int64_t step, std::int64_t epoch) {
    std::lock_guard lock(mutex_);
    if (failure_) return;  // wait() reports it
    next_step_ = step;
    next_epoch_ = epoch;
    pending_ = true;
    cv_.notify_all();
}

double Protection::wait() {
    const auto start = Clock::now();
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return !pending_ || failure_; });
    if (failure_) std::rethrow_exception(failure_);
    return std::chrono::duration<double>(Clock::now() - start).count();
}

void Protection::abort() noexcept {
    aborted_ = true;
    comm_.revoke();
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

void Protection::worker() {
    for (;;) {
        std::int64_t step = 0, epoch = 0;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [&] { return stopping_ || (pending_ && !failure_); });
            if (stopping_) return;
            step = next_step_;
            epoch = next_epoch_;
        }
        try {
            snapshot(step, epoch);
        } catch (...) {
            // Wake the peers' threads too; the main thread learns of it in wait().
            comm_.revoke();
            std::lock_guard lock(mutex_);
            failure_ = std::current_exception();
            pending_ = false;
            cv_.notify_all();
            return;
        }
        std::lock_guard lock(mutex_);
        pending_ = false;
        cv_.notify_all();
    }
}

void Protection::snapshot(std::int64_t step, std::int64_t epoch) {
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_seconds();
    SnapshotTiming timing;
    Clock::time_point first_send{};
    const std::size_t chunk = setup_.chunk_bytes;
    Transfers transfers(comm_);

    // Predecessors' payloads arrive in this object's private landing buffers, and are copied
    // into the staging slots of their peer stores once complete. Not straight into shared
    // memory: after a revoke, Open MPI kept writing the fragments of a message it had already
    // matched into the receive buffer (seen here), so a receive buffer must outlive the
    // request and must not be a slot that a later snapshot commits. Buffers are matched by tag
    // (their index in the payload); chunks of one buffer arrive in order on one tag.
    for (std::size_t p = 0; p < setup_.predecessors.size(); ++p) {
        const auto& pred = setup_.predecessors[p];
        std::size_t base = 0;
        for (std::size_t b = 0; b < pred.payload.size(); ++b) {
            const std::size_t size = pred.payload[b].bytes;
            for (std::size_t off = 0; off < size; off += chunk)
                transfers.receive(landing_[p].data() + base + off, std::min(chunk, size - off), pred.rank,
                                  static_cast<int>(b));
            timing.received_bytes += size;
            timing.holder_touched_bytes += size;  // MPI writes the landing buffer
            base += size;
        }
    }

    // Own snapshot: copied chunk by chunk (memcpy, or D2H on the copier's stream); each chunk is
    // hashed and each payload chunk sent to the successors as soon as it has landed.
    WriteView own = own_.begin_write(step, epoch);
    std::vector<std::span<std::byte>> destinations;
    std::vector<int> payload_tag;  // per region: its index in the payload, -1 if not sent
    int next_tag = 0;
    for (std::size_t b = 0; b < setup_.regions.size(); ++b) {
        destinations.push_back(own.buffers[b].bytes);
        payload_tag.push_back(setup_.regions[b].replicate ? next_tag++ : -1);
    }
    const auto chunks = plan_save(*setup_.copier, destinations, chunk);
    setup_.copier->save(
        chunks,
        [&](std::size_t i) {
            const SaveChunk& c = chunks[i];
            own_.note_written(c.region, c.offset, c.bytes);
            timing.copied_bytes += c.bytes;
            timing.sender_touched_bytes += 2 * c.bytes;  // the copy reads live, writes the slot
            if (c.bytes <= kCacheResidentBytes) timing.hashed_in_cache_bytes += c.bytes;
            else timing.sender_touched_bytes += c.bytes;  // the hash reads the chunk back
            if (payload_tag[c.region] < 0) return;
            for (const auto& succ : setup_.successors) {
                if (timing.sent_bytes == 0) first_send = Clock::now();
                transfers.send(c.dst, c.bytes, succ.rank, payload_tag[c.region]);
                timing.sent_bytes += c.bytes;
                timing.sender_touched_bytes += c.bytes;  // MPI reads the slot
            }
        },
        &aborted_);
    timing.copy_seconds = seconds_since(start);
    if (setup_.during_replication) setup_.during_replication(step);

    transfers.wait("replication", &aborted_);
    if (timing.sent_bytes > 0) timing.replication_seconds = seconds_since(first_send);
    for (std::size_t p = 0; p < setup_.predecessors.size(); ++p) {
        SnapshotStore& store = held_.at(setup_.predecessors[p].role_key);
        WriteView view = store.begin_write(step, epoch);
        std::size_t base = 0;
        for (const auto& buffer : view.buffers) {
            std::memcpy(buffer.bytes.data(), landing_[p].data() + base, buffer.bytes.size());
            base += buffer.bytes.size();
            // The landing copy reads and writes; commit() hashes the slot again.
            timing.holder_touched_bytes += 3 * buffer.bytes.size();
        }
        store.commit();
    }
    own_.commit();
    timing.seconds = seconds_since(start);
    timing.cpu_seconds = thread_cpu_seconds() - cpu_start;
    last_ = timing;
    accumulate(total_, timing);
    ++count_;
}

}  // namespace flashrec::ft
