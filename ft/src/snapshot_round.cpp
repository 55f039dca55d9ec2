#include "snapshot_round.hpp"

#include <mpi.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>

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

bool wanted(const std::vector<bool>& which, std::size_t i) {
    return which.empty() || (i < which.size() && which[i]);
}

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

SnapshotRound::SnapshotRound(Parts parts, std::int64_t step, std::int64_t epoch, const SnapshotScope& scope)
    : parts_(parts),
      step_(step),
      epoch_(epoch),
      scope_(scope),
      chunk_(parts.setup.chunk_bytes),
      piece_bytes_(std::min(chunk_, kCacheResidentBytes)),
      payload_tag_(payload_index(parts.setup.regions)),
      transfers_(parts.comm),
      start_(Clock::now()),
      cpu_start_(thread_cpu_seconds()) {
    for (std::size_t s = 0; s < parts_.setup.successors.size(); ++s)
        if (wanted(scope_.send_to, s)) receivers_.push_back(&parts_.setup.successors[s]);
}

SnapshotTiming SnapshotRound::run() {
    post_receives();
    if (scope_.own) copy_own_and_send();
    else send_committed_own();
    drain();
    commit_held();
    if (scope_.own) parts_.own.commit();
    timing_.seconds = seconds_since(start_);
    timing_.cpu_seconds = thread_cpu_seconds() - cpu_start_;
    return timing_;
}

// Predecessors' payloads are received straight into the staging slot of the peer store that
// keeps them: the ping-pong slot is the landing buffer. The slot is committed only after every
// byte arrived with its exact size and was hashed, so an abort mid-receive leaves the other
// slot's committed version intact.
//
// After an abort, Open MPI may still write the fragments of a message it had matched before
// the revoke into that message's buffer (seen here). For the first snapshots of a Protection
// made after an abort, payloads therefore land in a private buffer (parts_.landing) and are
// copied into the slot when complete, so that such a late write can never reach a slot this
// object commits.
void SnapshotRound::post_receives() {
    const auto& predecessors = parts_.setup.predecessors;
    for (std::size_t p = 0; p < predecessors.size(); ++p) {
        const auto& pred = predecessors[p];
        SnapshotStore& store = *parts_.held.at(pred.role_key);
        held_stores_.push_back(wanted(scope_.receive_from, p) ? &store : nullptr);
        if (!held_stores_.back()) continue;  // it holds `step` already
        const WriteView view = store.begin_write(step_, epoch_);
        LandingBuffer* landing = parts_.landing ? &parts_.landing->at(p) : nullptr;
        if (landing) {
            std::size_t bytes = 0;
            for (const auto& b : view.buffers) bytes += b.bytes.size();
            if (landing->size != bytes) *landing = {std::make_unique_for_overwrite<std::byte[]>(bytes), bytes};
        }
        std::size_t base = 0;
        for (std::size_t b = 0; b < view.buffers.size(); ++b) {
            const std::size_t size = view.buffers[b].bytes.size();
            std::byte* into = landing ? landing->bytes.get() + base : view.buffers[b].bytes.data();
            for (std::size_t off = 0; off < size; off += chunk_) {
                const std::size_t n = std::min(chunk_, size - off);
                transfers_.receive(into + off, n, pred.rank, static_cast<int>(b));
                posted_.push_back({&store, b, off, n});
            }
            timing_.received_bytes += size;
            timing_.holder_touched_bytes += size;  // MPI writes it once
            base += size;
        }
    }
}

void SnapshotRound::send(const std::byte* data, std::size_t bytes, int tag) {
    for (const RingPeer* successor : receivers_) {
        if (timing_.sent_bytes == 0) {
            first_send_ = Clock::now();
            first_send_run_delay_ = thread_run_delay_seconds();
        }
        transfers_.send(data, bytes, successor->rank, tag);
        posted_.push_back({});
        timing_.sent_bytes += bytes;  // MPI reads it: the transport's pass, not counted as touched
    }
}

void SnapshotRound::send_committed_own() {
    if (receivers_.empty()) return;
    const SnapshotView have = parts_.own.committed(step_);
    if (!have.ok)
        throw Error("protection: own snapshot of step " + std::to_string(step_) + " to send is not there: " +
                    have.problem);
    for (std::size_t b = 0; b < parts_.setup.regions.size(); ++b) {
        if (payload_tag_[b] < 0) continue;
        const auto bytes = have.buffers[b].bytes;
        for (std::size_t off = 0; off < bytes.size(); off += chunk_)
            send(bytes.data() + off, std::min(chunk_, bytes.size() - off), payload_tag_[b]);
    }
}

void SnapshotRound::copy_own_and_send() {
    const auto copy_start = Clock::now();
    const double copy_cpu_start = thread_cpu_seconds();
    RegionCopier& copier = *parts_.setup.copier;
    WriteView own = parts_.own.begin_write(step_, epoch_);
    std::vector<std::span<std::byte>> destinations;
    for (std::size_t b = 0; b < parts_.setup.regions.size(); ++b) destinations.push_back(own.buffers[b].bytes);
    // Host state: pieces small enough to stay in cache between copy and hash. A device copier's
    // D2H lands by DMA (not in this core's cache): pieces of a message, one event each.
    const bool host_copier = std::string_view(copier.kind()) == "host";
    const auto pieces = plan_pieces(copier, destinations, chunk_, host_copier ? piece_bytes_ : chunk_);
    std::vector<SaveChunk> chunks;
    chunks.reserve(pieces.size());
    for (const Piece& p : pieces) chunks.push_back(p.chunk);
    // Regions the copier hashes itself (on the GPU, before the bytes land): no note_written.
    std::vector<bool> hashed_by_copier(destinations.size());
    for (std::size_t r = 0; r < destinations.size(); ++r) hashed_by_copier[r] = copier.hashes_region(r);
    copier.save(
        chunks,
        [&](std::size_t i) {
            const Piece& p = pieces[i];
            const SaveChunk& c = p.chunk;
            timing_.copied_bytes += c.bytes;
            timing_.sender_touched_bytes += 2 * c.bytes;  // the copy reads live, writes the slot
            if (hashed_by_copier[c.region]) {
                timing_.hashed_at_source_bytes += c.bytes;  // the GPU read it: no host pass
            } else {
                parts_.own.note_written(c.region, c.offset, c.bytes);
                if (host_copier && c.bytes <= kCacheResidentBytes) timing_.hashed_in_cache_bytes += c.bytes;
                else timing_.sender_touched_bytes += c.bytes;  // the hash reads it back from memory
            }
            if (payload_tag_[c.region] >= 0 && p.ends_message)
                send(destinations[c.region].data() + p.message_offset, c.offset + c.bytes - p.message_offset,
                     payload_tag_[c.region]);
            if (!transfers_.done()) progress();
        },
        &parts_.aborted);
    for (std::size_t r = 0; r < destinations.size(); ++r)
        if (hashed_by_copier[r]) {
            const std::optional<BufferChecksum> sum = copier.region_checksum(r);
            // Without it (a copier that broke its promise) commit() hashes the landed bytes.
            if (sum) parts_.own.set_checksum(r, *sum);
        }
    timing_.copy_seconds = seconds_since(copy_start) - progress_seconds_;
    timing_.copy_cpu_seconds = thread_cpu_seconds() - copy_cpu_start - progress_cpu_;
    const TransferTiming d2h = copier.last_transfer();
    timing_.d2h_bytes = d2h.bytes;
    timing_.d2h_seconds = d2h.seconds;
}

// Chunks of one buffer come in order on one tag, but complete in any order.
void SnapshotRound::on_completed(const std::vector<std::size_t>& done) {
    if (parts_.landing) return;  // hashed at the copy into the slot (commit_held)
    for (const std::size_t t : done) {
        if (t >= posted_.size() || posted_[t].store == nullptr) continue;  // a send
        const Transfer& in = posted_[t];
        const auto key = std::make_pair(in.store, in.buffer);
        auto& waiting = arrived_[key];
        waiting[in.offset] = in.bytes;
        auto& cursor = hashed_up_to_[key];
        for (auto it = waiting.find(cursor); it != waiting.end(); it = waiting.find(cursor)) {
            in.store->note_written(in.buffer, it->first, it->second);
            // Hashed right after this thread's MPI progress wrote it: from cache if small.
            if (it->second <= kCacheResidentBytes) timing_.hashed_in_cache_bytes += it->second;
            else timing_.holder_touched_bytes += it->second;
            cursor += it->second;
            waiting.erase(it);
        }
    }
}

void SnapshotRound::progress() {
    const auto t = Clock::now();
    const double c = thread_cpu_seconds();
    on_completed(transfers_.test_some("replication", &parts_.aborted));
    progress_seconds_ += seconds_since(t);
    progress_cpu_ += thread_cpu_seconds() - c;
}

// This thread never spins a core the step could use (Backoff); once the step waits for this
// snapshot it polls without sleeping (setup.poll_while_step_waits).
void SnapshotRound::drain() {
    if (parts_.setup.during_replication) parts_.setup.during_replication(step_);
    Backoff backoff;
    while (!transfers_.done()) {
        const auto done = transfers_.test_some("replication", &parts_.aborted);
        if (done.empty()) {
            if (!(parts_.step_waiting && parts_.setup.poll_while_step_waits)) backoff.sleep();
            continue;
        }
        backoff.reset();
        on_completed(done);
    }
    if (timing_.sent_bytes > 0) {
        timing_.replication_seconds = seconds_since(first_send_);
        timing_.replication_run_delay_seconds = thread_run_delay_seconds() - first_send_run_delay_;
    }
    if (parts_.aborted)
        throw CommRevoked(MPIX_ERR_REVOKED, MPIX_ERR_REVOKED, "replication", parts_.comm.name(), world_rank(),
                          "cancelled by a failure elsewhere");
}

void SnapshotRound::commit_held() {
    for (std::size_t p = 0; p < held_stores_.size(); ++p) {
        SnapshotStore* store = held_stores_[p];
        if (store == nullptr) continue;
        if (parts_.landing) {
            const LandingBuffer& landing = parts_.landing->at(p);
            const WriteView view = store->begin_write(step_, epoch_);
            std::size_t base = 0;
            for (std::size_t b = 0; b < view.buffers.size(); ++b) {
                const auto& buffer = view.buffers[b];
                for (std::size_t off = 0; off < buffer.bytes.size(); off += piece_bytes_) {
                    const std::size_t n = std::min(piece_bytes_, buffer.bytes.size() - off);
                    std::memcpy(buffer.bytes.data() + off, landing.bytes.get() + base + off, n);
                    store->note_written(b, off, n);
                }
                base += buffer.bytes.size();
                timing_.holder_touched_bytes += 2 * buffer.bytes.size();  // landing -> slot
                timing_.hashed_in_cache_bytes += buffer.bytes.size();
            }
        }
        store->commit();
    }
}

}  // namespace flashrec::ft
