#include "flashrec/ft/protection.hpp"

#include <mpi.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <utility>

#include "flashrec/errors.hpp"
#include "snapshot_round.hpp"

namespace flashrec::ft {

namespace {

using Clock = std::chrono::steady_clock;

void accumulate(SnapshotTiming& total, const SnapshotTiming& t) {
    total.seconds += t.seconds;
    total.copied_bytes += t.copied_bytes;
    total.sent_bytes += t.sent_bytes;
    total.received_bytes += t.received_bytes;
    total.cpu_seconds += t.cpu_seconds;
    total.copy_seconds += t.copy_seconds;
    total.copy_cpu_seconds += t.copy_cpu_seconds;
    total.replication_seconds += t.replication_seconds;
    total.replication_run_delay_seconds += t.replication_run_delay_seconds;
    total.sender_touched_bytes += t.sender_touched_bytes;
    total.holder_touched_bytes += t.holder_touched_bytes;
    total.hashed_in_cache_bytes += t.hashed_in_cache_bytes;
    total.hashed_at_source_bytes += t.hashed_at_source_bytes;
    total.d2h_bytes += t.d2h_bytes;
    total.d2h_seconds += t.d2h_seconds;
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

std::vector<int> payload_index(const std::vector<ProtectedRegion>& regions) {
    std::vector<int> index;
    int next = 0;
    for (const auto& r : regions) index.push_back(r.replicate ? next++ : -1);
    return index;
}

std::vector<std::span<const std::byte>> payload_by_region(const SnapshotView& replica,
                                                          const std::vector<ProtectedRegion>& regions) {
    const std::vector<int> index = payload_index(regions);
    const auto carried = static_cast<std::size_t>(std::count_if(index.begin(), index.end(), [](int i) { return i >= 0; }));
    std::vector<std::span<const std::byte>> bytes(regions.size());
    for (std::size_t r = 0; r < regions.size(); ++r) {
        if (index[r] < 0) continue;
        const auto p = static_cast<std::size_t>(index[r]);
        // Names only: the sizes are the owner's shard, which differ from the holder's own when
        // a buffer does not divide evenly by dp (the receiver checks it gets exactly its size).
        if (replica.buffers.size() != carried || replica.buffers[p].name != regions[r].name)
            throw CorruptState("replica", regions[r].name,
                               "the held copy's payload does not match the registered buffers (buffer " +
                                   std::to_string(p) + " of " + std::to_string(replica.buffers.size()) +
                                   " is '" + (p < replica.buffers.size() ? std::string(replica.buffers[p].name) : std::string()) +
                                   "', expected " + std::to_string(carried) + " buffers)");
        bytes[r] = replica.buffers[p].bytes;
    }
    return bytes;
}

std::shared_ptr<SnapshotStore> StorePool::get(const std::string& job, const std::string& key,
                                               const SnapshotLayout& layout) {
    std::lock_guard lock(mutex_);
    auto& store = stores_[key];
    const auto same = [&](const SnapshotLayout& a) {
        if (a.size() != layout.size()) return false;
        for (std::size_t i = 0; i < a.size(); ++i)
            if (a[i].name != layout[i].name || a[i].bytes != layout[i].bytes) return false;
        return true;
    };
    if (!store || store->job() != job || !same(store->layout()))
        store = std::make_shared<SnapshotStore>(job, key, layout, [this](std::size_t bytes) {
            std::optional<ShmSegment> taken;
            const auto it = std::find_if(blanks_.begin(), blanks_.end(),
                                         [&](const ShmSegment& b) { return b.size() == bytes; });
            if (it != blanks_.end()) {
                taken = std::move(*it);
                blanks_.erase(it);
                ++blanks_taken_;
            }
            return taken;
        });
    return store;
}

void StorePool::make_blanks(const std::string& job, const std::string& tag,
                            const std::vector<std::size_t>& slot_bytes) {
    if (!slot_bytes.empty()) (void)mark_for_epilog(job);
    for (std::size_t i = 0; i < slot_bytes.size(); ++i) {
        ShmSegment blank =
            ShmSegment::create(segment_name(job, std::string(kBlankKeyPrefix) + tag + "-" + std::to_string(i), 0),
                               slot_bytes[i]);
        std::lock_guard lock(mutex_);
        if (blanks_dropped_) {
            (void)unlink_segment(blank.name());
            return;
        }
        blanks_.push_back(std::move(blank));
    }
}

void StorePool::drop_blanks() {
    std::lock_guard lock(mutex_);
    blanks_dropped_ = true;
    for (const auto& blank : blanks_) (void)unlink_segment(blank.name());
    blanks_.clear();
}

int StorePool::blanks_taken() const {
    std::lock_guard lock(mutex_);
    return blanks_taken_;
}

std::size_t StorePool::blank_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t total = 0;
    for (const auto& blank : blanks_) total += blank.size();
    return total;
}

std::size_t StorePool::store_bytes() const {
    std::lock_guard lock(mutex_);
    std::size_t total = 0;
    for (const auto& [key, store] : stores_) total += store->bytes();
    return total;
}

std::shared_ptr<SnapshotStore> StorePool::find(const std::string& key) const {
    std::lock_guard lock(mutex_);
    const auto it = stores_.find(key);
    return it == stores_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<SnapshotStore>> StorePool::keep_only(const std::vector<std::string>& keys) {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<SnapshotStore>> dropped;
    for (auto it = stores_.begin(); it != stores_.end();) {
        if (std::find(keys.begin(), keys.end(), it->first) != keys.end()) {
            ++it;
            continue;
        }
        dropped.push_back(std::move(it->second));
        it = stores_.erase(it);
    }
    return dropped;
}

Protection::Protection(ProtectionSetup setup, Comm replication)
    : setup_(std::move(setup)), comm_(std::move(replication)) {
    if (setup_.chunk_bytes == 0 || setup_.chunk_bytes > (1u << 30))
        throw Error("protection.chunk_bytes must be between 1 byte and 1 GiB");
    if (!setup_.pool) setup_.pool = std::make_shared<StorePool>();
    if (!setup_.copier) {
        std::vector<LiveRegion> live;
        for (const auto& r : setup_.regions) live.push_back({r.data, r.bytes});
        setup_.copier = std::make_shared<HostRegionCopier>(std::move(live));
    }
    // Stores the pool keeps are taken now (a map lookup); new ones are made here, or by the
    // protection thread before its first snapshot.
    const std::string own_key = setup_.store_prefix + setup_.role_key;
    if (!setup_.open_new_stores_in_background || setup_.pool->find(own_key))
        own_ = setup_.pool->get(setup_.job, own_key, full_layout(setup_.regions));
    for (const auto& p : setup_.predecessors) {
        const std::string key = setup_.store_prefix + peer_role_key(p.role_key, setup_.role_key);
        held_[p.role_key] = !setup_.open_new_stores_in_background || setup_.pool->find(key)
                                ? setup_.pool->get(setup_.job, key, p.payload)
                                : nullptr;
    }
    thread_ = std::thread([this] { worker(); });
}

void Protection::open_stores() {
    if (!own_)
        own_ = setup_.pool->get(setup_.job, setup_.store_prefix + setup_.role_key,
                                full_layout(setup_.regions));
    for (const auto& p : setup_.predecessors) {
        auto& store = held_[p.role_key];
        if (!store)
            store = setup_.pool->get(
                setup_.job, setup_.store_prefix + peer_role_key(p.role_key, setup_.role_key), p.payload);
    }
    // Blanks this process made ahead (a hot spare's) that its stores did not take: no use now.
    setup_.pool->drop_blanks();
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
    return it == held_.end() ? nullptr : it->second.get();
}

std::size_t Protection::host_bytes() const {
    std::size_t total = own_ ? own_->bytes() : 0;
    for (const auto& [key, store] : held_) total += store ? store->bytes() : 0;
    for (const auto& buffer : landing_) total += buffer.size;
    return total;
}

void Protection::start_snapshot(std::int64_t step, std::int64_t epoch, SnapshotScope scope) {
    std::lock_guard lock(mutex_);
    if (failure_) return;  // wait() reports it
    next_step_ = step;
    next_epoch_ = epoch;
    next_scope_ = std::move(scope);
    pending_ = true;
    cv_.notify_all();
}

double Protection::wait() {
    const auto start = Clock::now();
    std::unique_lock lock(mutex_);
    step_waiting_ = true;
    cv_.wait(lock, [&] { return !pending_ || failure_; });
    step_waiting_ = false;
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
    // Linux nice values are per thread: this lowers only the protection thread. Best effort:
    // a container that forbids it leaves the thread at the trainer's priority.
    // After a repair (stores opened here) the first snapshot runs at the trainer's priority:
    // every rank waits for it at the first sync point (it makes a replacement's stores and
    // copies), so there is no step to stay out of the way of.
    bool lowered = false;
    const auto lower = [&] {
        if (!lowered && setup_.thread_nice > 0)
            (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), setup_.thread_nice);
        lowered = true;
    };
    if (!setup_.open_new_stores_in_background) lower();
    for (;;) {
        std::int64_t step = 0, epoch = 0;
        SnapshotScope scope;
        {
            std::unique_lock lock(mutex_);
            cv_.wait(lock, [&] { return stopping_ || (pending_ && !failure_); });
            if (stopping_) return;
            step = next_step_;
            epoch = next_epoch_;
            scope = std::exchange(next_scope_, SnapshotScope{});
        }
        try {
            open_stores();
            snapshot(step, epoch, scope);
        } catch (...) {
            // Wake the peers' threads too; the main thread learns of it in wait().
            comm_.revoke();
            std::lock_guard lock(mutex_);
            failure_ = std::current_exception();
            pending_ = false;
            cv_.notify_all();
            return;
        }
        lower();
        std::lock_guard lock(mutex_);
        pending_ = false;
        cv_.notify_all();
    }
}

void Protection::snapshot(std::int64_t step, std::int64_t epoch, const SnapshotScope& scope) {
    // After an abort, the first snapshots receive through private landing buffers (SnapshotRound).
    const bool via_landing = setup_.after_abort && count_ < kLandingSnapshotsAfterAbort;
    if (!via_landing) landing_.clear();
    else landing_.resize(setup_.predecessors.size());
    SnapshotRound round({setup_, comm_, *own_, held_, via_landing ? &landing_ : nullptr, aborted_, step_waiting_},
                        step, epoch, scope);
    last_ = round.run();
    accumulate(total_, last_);
    ++count_;
}

}  // namespace flashrec::ft
