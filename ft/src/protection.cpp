#include "flashrec/ft/protection.hpp"

#include <mpi.h>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>
#include <utility>

#include <mpi-ext.h>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Time this thread has spent runnable but waiting for a core (the kernel's schedstat run_delay),
// in seconds; 0 where the kernel does not keep it.
double thread_run_delay_seconds() {
    std::FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
    if (!f) return 0;
    unsigned long long on_cpu = 0, waited = 0;
    const int got = std::fscanf(f, "%llu %llu", &on_cpu, &waited);
    std::fclose(f);
    return got == 2 ? static_cast<double>(waited) * 1e-9 : 0;
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
    total.copy_cpu_seconds += t.copy_cpu_seconds;
    total.replication_seconds += t.replication_seconds;
    total.replication_run_delay_seconds += t.replication_run_delay_seconds;
    total.sender_touched_bytes += t.sender_touched_bytes;
    total.holder_touched_bytes += t.holder_touched_bytes;
    total.hashed_in_cache_bytes += t.hashed_in_cache_bytes;
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

namespace {

// The own state's copy pieces: every region in messages of `message_bytes` (what one MPI
// send carries, and what the successor posts one receive for), each message in pieces of at
// most `piece_bytes`, copied and hashed in one pass while the piece is in cache.
struct Piece {
    SaveChunk chunk;
    bool ends_message = false;
    std::size_t message_offset = 0;  // where its message starts in the region
};

std::vector<Piece> plan_pieces(const RegionCopier& copier, std::span<const std::span<std::byte>> dst,
                               std::size_t message_bytes, std::size_t piece_bytes) {
    std::vector<Piece> pieces;
    for (std::size_t r = 0; r < dst.size(); ++r) {
        const std::size_t bytes = copier.region(r).bytes;
        if (dst[r].size() != bytes)
            throw Error("protection: staging buffer of region " + std::to_string(r) + " has " +
                        std::to_string(dst[r].size()) + " bytes, the region " + std::to_string(bytes));
        for (std::size_t m = 0; m < bytes; m += message_bytes) {
            const std::size_t end = std::min(bytes, m + message_bytes);
            for (std::size_t off = m; off < end; off += piece_bytes) {
                const std::size_t n = std::min(piece_bytes, end - off);
                pieces.push_back({{r, off, n, dst[r].data() + off}, off + n == end, m});
            }
        }
    }
    return pieces;
}

}  // namespace

void Protection::snapshot(std::int64_t step, std::int64_t epoch, const SnapshotScope& scope) {
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_seconds();
    SnapshotTiming timing;
    Clock::time_point first_send{};
    double first_send_run_delay = 0;
    const auto mark_first_send = [&] {
        first_send = Clock::now();
        first_send_run_delay = thread_run_delay_seconds();
    };
    const std::size_t chunk = setup_.chunk_bytes;
    Transfers transfers(comm_);

    // Predecessors' payloads are received straight into the staging slot of the peer store that
    // keeps them: the ping-pong slot is the landing buffer. The slot is committed only after
    // every byte arrived with its exact size and was hashed, so an abort mid-receive leaves the
    // other slot's committed version intact.
    //
    // After an abort, Open MPI may still write the fragments of a message it had matched before
    // the revoke into that message's buffer (seen here). For the first snapshots of a
    // Protection made after an abort (setup.after_abort, while the runtime keeps the aborted
    // one alive), payloads therefore land in a private buffer and are copied into the slot when
    // complete, so that such a late write can never reach a slot this object commits.
    const bool via_landing = setup_.after_abort && count_ < kLandingSnapshotsAfterAbort;
    if (!via_landing) landing_.clear();
    else landing_.resize(setup_.predecessors.size());
    struct Incoming {
        SnapshotStore* store;
        std::size_t buffer, offset, bytes;
    };
    std::vector<Incoming> incoming;                   // by transfer index; store null for a send
    std::vector<SnapshotStore*> held_stores;
    const auto wanted = [](const std::vector<bool>& which, std::size_t i) {
        return which.empty() || (i < which.size() && which[i]);
    };
    for (std::size_t p = 0; p < setup_.predecessors.size(); ++p) {
        const auto& pred = setup_.predecessors[p];
        SnapshotStore& store = *held_.at(pred.role_key);
        held_stores.push_back(wanted(scope.receive_from, p) ? &store : nullptr);
        if (!held_stores.back()) continue;  // it holds `step` already
        const WriteView view = store.begin_write(step, epoch);
        if (via_landing) {
            std::size_t bytes = 0;
            for (const auto& b : view.buffers) bytes += b.bytes.size();
            if (landing_[p].size != bytes)
                landing_[p] = {std::make_unique_for_overwrite<std::byte[]>(bytes), bytes};
        }
        std::size_t base = 0;
        for (std::size_t b = 0; b < view.buffers.size(); ++b) {
            const std::size_t size = view.buffers[b].bytes.size();
            std::byte* into = via_landing ? landing_[p].bytes.get() + base : view.buffers[b].bytes.data();
            for (std::size_t off = 0; off < size; off += chunk) {
                const std::size_t n = std::min(chunk, size - off);
                transfers.receive(into + off, n, pred.rank, static_cast<int>(b));
                incoming.push_back({&store, b, off, n});
            }
            timing.received_bytes += size;
            timing.holder_touched_bytes += size;  // MPI writes it once
            base += size;
        }
    }

    // A payload chunk is hashed as soon as it and every chunk before it in its buffer arrived
    // (chunks of one buffer come in order on one tag, but complete in any order).
    std::map<std::pair<SnapshotStore*, std::size_t>, std::size_t> next_hash;
    std::map<std::pair<SnapshotStore*, std::size_t>, std::map<std::size_t, std::size_t>> ready;
    const auto on_completed = [&](const std::vector<std::size_t>& done) {
        for (const std::size_t t : done) {
            if (t >= incoming.size() || incoming[t].store == nullptr) continue;  // a send
            if (via_landing) continue;  // hashed at the copy below
            const Incoming& in = incoming[t];
            const auto key = std::make_pair(in.store, in.buffer);
            ready[key][in.offset] = in.bytes;
            auto& cursor = next_hash[key];
            auto& waiting = ready[key];
            for (auto it = waiting.find(cursor); it != waiting.end(); it = waiting.find(cursor)) {
                in.store->note_written(in.buffer, it->first, it->second);
                // Hashed right after this thread's MPI progress wrote it: from cache if small.
                if (it->second <= kCacheResidentBytes) timing.hashed_in_cache_bytes += it->second;
                else timing.holder_touched_bytes += it->second;
                cursor += it->second;
                waiting.erase(it);
            }
        }
    };
    double progress_seconds = 0, progress_cpu = 0;  // inside the copy loop, not the copy's
    const auto progress = [&] {
        const auto t = Clock::now();
        const double c = thread_cpu_seconds();
        on_completed(transfers.test_some("replication", &aborted_));
        progress_seconds += seconds_since(t);
        progress_cpu += thread_cpu_seconds() - c;
    };

    // The rest of the transfers: test, hash what arrived, sleep a little longer each time
    // nothing did (Backoff): this thread never spins a core the step could use. Once the step
    // waits for this snapshot it polls without sleeping (setup.poll_while_step_waits).
    const auto drain = [&] {
        if (setup_.during_replication) setup_.during_replication(step);
        Backoff backoff;
        while (!transfers.done()) {
            const auto done = transfers.test_some("replication", &aborted_);
            if (done.empty()) {
                if (!(step_waiting_ && setup_.poll_while_step_waits)) backoff.sleep();
                continue;
            }
            backoff.reset();
            on_completed(done);
        }
        if (timing.sent_bytes > 0) {
            timing.replication_seconds = seconds_since(first_send);
            timing.replication_run_delay_seconds = thread_run_delay_seconds() - first_send_run_delay;
        }
        if (aborted_)
            throw CommRevoked(MPIX_ERR_REVOKED, MPIX_ERR_REVOKED, "replication", comm_.name(),
                              world_rank(), "cancelled by a failure elsewhere");
    };
    const std::size_t piece_bytes = std::min(chunk, kCacheResidentBytes);
    const auto commit_held = [&] {
        for (std::size_t p = 0; p < held_stores.size(); ++p) {
            if (held_stores[p] == nullptr) continue;
            SnapshotStore& store = *held_stores[p];
            if (via_landing) {
                const WriteView view = store.begin_write(step, epoch);
                std::size_t base = 0;
                for (std::size_t b = 0; b < view.buffers.size(); ++b) {
                    const auto& buffer = view.buffers[b];
                    for (std::size_t off = 0; off < buffer.bytes.size(); off += piece_bytes) {
                        const std::size_t n = std::min(piece_bytes, buffer.bytes.size() - off);
                        std::memcpy(buffer.bytes.data() + off, landing_[p].bytes.get() + base + off, n);
                        store.note_written(b, off, n);
                    }
                    base += buffer.bytes.size();
                    timing.holder_touched_bytes += 2 * buffer.bytes.size();  // landing -> slot
                    timing.hashed_in_cache_bytes += buffer.bytes.size();
                }
            }
            store.commit();
        }
    };
    const auto finish = [&] {
        timing.seconds = seconds_since(start);
        timing.cpu_seconds = thread_cpu_seconds() - cpu_start;
        last_ = timing;
        accumulate(total_, timing);
        ++count_;
    };

    // Own snapshot: one pass per piece that copies it (memcpy, or D2H on the copier's stream)
    // and hashes it while it is in cache; a payload message is sent from the staging slot as
    // soon as its last piece landed, and MPI is progressed after every piece so that sends and
    // receives move while the copy runs, not after it.
    const auto copy_start = Clock::now();
    const double copy_cpu_start = thread_cpu_seconds();
    const std::vector<int> payload_tag = payload_index(setup_.regions);  // -1: not sent
    std::vector<const RingPeer*> receivers;  // the successors this snapshot sends to
    for (std::size_t s = 0; s < setup_.successors.size(); ++s)
        if (wanted(scope.send_to, s)) receivers.push_back(&setup_.successors[s]);
    if (!scope.own) {
        // The own store holds `step` already (a repair's survivor): send the payload to the
        // successors that lack it from that committed slot, verified, without copying.
        if (!receivers.empty()) {
            const SnapshotView have = own_->committed(step);
            if (!have.ok) throw Error("protection: own snapshot of step " + std::to_string(step) +
                                      " to send is not there: " + have.problem);
            for (std::size_t b = 0; b < setup_.regions.size(); ++b) {
                if (payload_tag[b] < 0) continue;
                const auto bytes = have.buffers[b].bytes;
                for (std::size_t off = 0; off < bytes.size(); off += chunk)
                    for (const RingPeer* succ : receivers) {
                        if (timing.sent_bytes == 0) mark_first_send();
                        const std::size_t n = std::min(chunk, bytes.size() - off);
                        transfers.send(bytes.data() + off, n, succ->rank, payload_tag[b]);
                        incoming.push_back({nullptr, 0, 0, 0});
                        timing.sent_bytes += n;  // MPI reads it: the transport's pass, not counted here
                    }
            }
        }
        drain();
        commit_held();
        finish();
        return;
    }
    WriteView own = own_->begin_write(step, epoch);
    std::vector<std::span<std::byte>> destinations;
    for (std::size_t b = 0; b < setup_.regions.size(); ++b) destinations.push_back(own.buffers[b].bytes);
    // Host state: pieces small enough to stay in cache between copy and hash. A device copier's
    // D2H lands by DMA (not in this core's cache): pieces of a message, one event each.
    const bool host_copier = std::string_view(setup_.copier->kind()) == "host";
    const std::size_t piece = host_copier ? piece_bytes : chunk;
    const auto pieces = plan_pieces(*setup_.copier, destinations, chunk, piece);
    std::vector<SaveChunk> chunks;
    chunks.reserve(pieces.size());
    for (const Piece& p : pieces) chunks.push_back(p.chunk);
    setup_.copier->save(
        chunks,
        [&](std::size_t i) {
            const Piece& p = pieces[i];
            const SaveChunk& c = p.chunk;
            own_->note_written(c.region, c.offset, c.bytes);
            timing.copied_bytes += c.bytes;
            timing.sender_touched_bytes += 2 * c.bytes;  // the copy reads live, writes the slot
            if (host_copier && c.bytes <= kCacheResidentBytes) timing.hashed_in_cache_bytes += c.bytes;
            else timing.sender_touched_bytes += c.bytes;  // the hash reads it back from memory
            if (payload_tag[c.region] >= 0 && p.ends_message) {
                std::byte* message = destinations[c.region].data() + p.message_offset;
                const std::size_t bytes = c.offset + c.bytes - p.message_offset;
                for (const RingPeer* succ : receivers) {
                    if (timing.sent_bytes == 0) mark_first_send();
                    transfers.send(message, bytes, succ->rank, payload_tag[c.region]);
                    incoming.push_back({nullptr, 0, 0, 0});
                    timing.sent_bytes += bytes;  // MPI reads the slot: the transport's pass (sent_bytes)
                }
            }
            if (!transfers.done()) progress();
        },
        &aborted_);
    timing.copy_seconds = seconds_since(copy_start) - progress_seconds;
    timing.copy_cpu_seconds = thread_cpu_seconds() - copy_cpu_start - progress_cpu;
    const TransferTiming d2h = setup_.copier->last_transfer();
    timing.d2h_bytes = d2h.bytes;
    timing.d2h_seconds = d2h.seconds;
    drain();
    commit_held();
    own_->commit();
    finish();
}

}  // namespace flashrec::ft
