#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "flashrec/ft/checksum.hpp"
#include "flashrec/ft/protection.hpp"
#include "flashrec/ft/snapshot.hpp"

#include "scratch_job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>

using namespace flashrec::ft;

using flashrec::test::ScratchJob;

namespace {

const std::string kRole = "dp3.tp0.pp0";

SnapshotLayout small_layout() { return {{"params", 4096}, {"adam_m", 1000}, {"adam_v", 1000}, {"rng", 8}}; }

std::byte pattern(std::int64_t step, std::size_t buffer, std::size_t position) {
    return static_cast<std::byte>((static_cast<std::size_t>(step) * 131 + buffer * 31 + position) & 0xff);
}

// Writes step's pattern into [0, fraction of) every buffer.
void fill(const WriteView& view, double fraction = 1.0) {
    for (std::size_t b = 0; b < view.buffers.size(); ++b) {
        const auto bytes = view.buffers[b].bytes;
        const auto end = static_cast<std::size_t>(static_cast<double>(bytes.size()) * fraction);
        for (std::size_t p = 0; p < end; ++p) bytes[p] = pattern(view.step, b, p);
    }
}

// True if every buffer of the view holds its step's pattern.
bool holds_its_step(const SnapshotView& view) {
    for (std::size_t b = 0; b < view.buffers.size(); ++b) {
        const auto bytes = view.buffers[b].bytes;
        for (std::size_t p = 0; p < bytes.size(); ++p)
            if (bytes[p] != pattern(view.step, b, p)) return false;
    }
    return true;
}

void write_step(SnapshotStore& store, std::int64_t step, std::int64_t epoch = 0) {
    fill(store.begin_write(step, epoch));
    store.commit();
}

// One line describing what a read found, compared as text across processes.
std::string describe(const SnapshotView& view) {
    if (!view.ok) return "not ok: " + view.problem;
    return "ok step " + std::to_string(view.step) + (holds_its_step(view) ? " intact" : " WRONG BYTES");
}

// Both ends closed on destruction.
class Pipe {
public:
    Pipe() { REQUIRE(::pipe(fds_) == 0); }
    Pipe(const Pipe&) = delete;
    Pipe& operator=(const Pipe&) = delete;
    ~Pipe() {
        close_read();
        close_write();
    }
    int read_end() const { return fds_[0]; }
    int write_end() const { return fds_[1]; }
    void close_read() { close_end(0); }
    void close_write() { close_end(1); }

private:
    void close_end(int end) {
        if (fds_[end] >= 0) ::close(fds_[end]);
        fds_[end] = -1;
    }
    int fds_[2] = {-1, -1};
};

void write_all(int fd, const std::string& text) {
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n <= 0) return;
        done += static_cast<std::size_t>(n);
    }
}

std::string read_all(int fd) {
    std::string text;
    char chunk[4096];
    ssize_t n;
    while ((n = ::read(fd, chunk, sizeof chunk)) > 0) text.append(chunk, static_cast<std::size_t>(n));
    return text;
}

// Reads until `text` has arrived (true) or the writer closed the pipe first (false).
bool read_all_until(int fd, const std::string& text) {
    std::string seen;
    char byte;
    while (seen.find(text) == std::string::npos) {
        if (::read(fd, &byte, 1) != 1) return false;
        seen.push_back(byte);
    }
    return true;
}

// Forks; the child runs `body` with the write end of a pipe and _exits (never returning into
// doctest). The caller owns the child.
pid_t fork_child(Pipe& to_parent, const std::function<void(int)>& body) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        to_parent.close_read();
        try {
            body(to_parent.write_end());
        } catch (const std::exception& e) {
            write_all(to_parent.write_end(), std::string("exception: ") + e.what());
            ::_exit(1);
        }
        ::_exit(0);
    }
    to_parent.close_write();
    return pid;
}

// Exit code, or 128 + signal.
int wait_for(pid_t pid) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `body` in a separate process and returns what it wrote.
std::string in_other_process(const std::function<std::string()>& body) {
    Pipe pipe;
    const pid_t pid = fork_child(pipe, [&](int out) { write_all(out, body()); });
    std::string text = read_all(pipe.read_end());
    CHECK(wait_for(pid) == 0);
    return text;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("names are checked and segments are named by job, role and slot") {
    CHECK(segment_name("job-1", "dp3.tp0.pp0", 1) == "/flashrec.job-1.dp3.tp0.pp0.1");
    CHECK(peer_role_key("dp0.tp0.pp0", "dp1.tp0.pp0") == "dp0.tp0.pp0@dp1.tp0.pp0");
    for (const char* bad : {"", "a/b", "a.b", "a b", "../x"})
        CHECK_THROWS_WITH_AS(validate_job_name(bad), doctest::Contains("is invalid"), flashrec::Error);
    CHECK_THROWS_AS(validate_job_name(std::string(101, 'j')), flashrec::Error);
    CHECK_THROWS_AS(validate_role_key("dp0/tp0"), flashrec::Error);
    CHECK_THROWS_AS(validate_role_key(std::string(64, 'r')), flashrec::Error);
    CHECK_THROWS_AS(segment_name("job", "role", 2), flashrec::Error);
    CHECK_THROWS_AS(remove_all(""), flashrec::Error);  // would otherwise match every job

    ScratchJob job;
    CHECK_THROWS_WITH_AS(SnapshotStore(job.name(), kRole, {{std::string(64, 'n'), 8}}),
                         doctest::Contains("1-63 printable"), flashrec::Error);
    CHECK_THROWS_WITH_AS(SnapshotStore(job.name(), kRole, {{"w", 8}, {"w", 8}}),
                         doctest::Contains("names buffer 'w' twice"), flashrec::Error);
    CHECK(list_segments(job.name()).empty());
}

TEST_CASE("write, commit and read back; buffers are aligned") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    CHECK(store.bytes() == 2 * snapshot_segment_bytes(small_layout()));
    CHECK(list_segments(job.name()).size() == 2);

    const SnapshotView empty = store.newest_committed();
    CHECK_FALSE(empty.ok);
    CHECK(empty.problem == "no committed version: slot 0 is empty, slot 1 is empty");

    const WriteView write = store.begin_write(7, 2);
    CHECK(reinterpret_cast<std::uintptr_t>(write.buffers[0].bytes.data()) % 4096 == 0);
    for (const WritableBuffer& buffer : write.buffers)
        CHECK(reinterpret_cast<std::uintptr_t>(buffer.bytes.data()) % 64 == 0);
    CHECK(write.buffer("adam_m").size() == 1000);
    fill(write);
    store.commit();

    const SnapshotView view = store.newest_committed();
    REQUIRE(view.ok);
    CHECK(view.step == 7);
    CHECK(view.epoch == 2);
    CHECK(view.slot == write.slot);
    CHECK(holds_its_step(view));
    CHECK(view.buffer("rng").size() == 8);
    CHECK_THROWS_AS(view.buffer("nope"), flashrec::Error);
    CHECK(store.committed(7).ok);
    CHECK(store.verify(7).ok);
    CHECK(verify_snapshot(job.name(), kRole).step == 7);
}

TEST_CASE("a store moves with its mappings; misuse is an error, not a crash") {
    ScratchJob job;
    SnapshotStore first(job.name(), kRole, small_layout());
    CHECK_THROWS_WITH_AS(first.commit(), doctest::Contains("commit() without begin_write()"), flashrec::Error);
    const WriteView write = first.begin_write(1, 0);
    SnapshotStore moved = std::move(first);
    fill(write);  // the spans stay valid: the mapping moved, it was not remapped
    moved.commit();
    CHECK(describe(moved.newest_committed()) == "ok step 1 intact");
    CHECK_THROWS_WITH_AS(first.begin_write(2, 0), doctest::Contains("moved from"), flashrec::Error);
    CHECK_THROWS_WITH_AS(first.commit(), doctest::Contains("moved from"), flashrec::Error);
}

TEST_CASE("ping-pong keeps the older committed version readable while the next is written") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    write_step(store, 1);
    const int first_slot = store.newest_committed().slot;

    const WriteView second = store.begin_write(2, 0);
    CHECK(second.slot == 1 - first_slot);
    fill(second, 0.5);
    CHECK(describe(store.newest_committed()) == "ok step 1 intact");
    const SnapshotView not_yet = store.committed(2);
    CHECK_FALSE(not_yet.ok);
    CHECK(contains(not_yet.problem, "step 2 is not held"));
    CHECK(contains(not_yet.problem, "slot " + std::to_string(second.slot) + " is being written"));
    fill(second);
    store.commit();

    const WriteView third = store.begin_write(3, 0);
    CHECK(third.slot == first_slot);
    CHECK(describe(store.newest_committed()) == "ok step 2 intact");
    CHECK(contains(store.committed(1).problem, "step 1 is not held"));
    fill(third);
    store.commit();
    CHECK(describe(store.newest_committed()) == "ok step 3 intact");
    CHECK(describe(store.committed(2)) == "ok step 2 intact");
}

TEST_CASE("after a rollback the abandoned newer version is the one overwritten") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    write_step(store, 5);
    write_step(store, 6);
    const int slot_of_6 = store.committed(6).slot;
    // Recovery agreed on R = 5: step 6 is recomputed, and 5 must survive until it commits.
    const WriteView redo = store.begin_write(6, 1);
    CHECK(redo.slot == slot_of_6);
    CHECK(describe(store.newest_committed()) == "ok step 5 intact");
    fill(redo);
    store.commit();
    CHECK(store.newest_committed().epoch == 1);
}

TEST_CASE("a view says when its slot was rewritten under it") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    write_step(store, 1);
    const SnapshotView view = store.newest_committed();
    write_step(store, 2);  // the other slot
    CHECK(view.unchanged());
    store.begin_write(3, 0);  // view's slot
    CHECK_FALSE(view.unchanged());
}

TEST_CASE("the checksum kernel this CPU runs computes XXH3-64 exactly, whole and in pieces") {
    // Expected values from libxxhash's XXH3_64bits (seed 0) over bytes i*7+3: every kernel
    // (AVX-512, AVX2, the library's) must give the bits written in existing segments and files.
    const std::pair<std::size_t, std::uint64_t> vectors[] = {
        {0, 0x2d06800538d394c2ULL},    {1, 0x13e608bc156defedULL},   {3, 0xa9088dda485b481cULL},
        {17, 0x714a04408e79b80fULL},   {129, 0xc664bf3311c6abc4ULL}, {240, 0x64556dc6b462a6cfULL},
        {241, 0x8beadd3a8874fe17ULL},  {1023, 0xd26986a0b85dcc44ULL}, {(1u << 20) + 7, 0x3e3b343c763535e7ULL}};
    INFO("kernel: " << checksum_kernel());
    for (const auto& [n, expected] : vectors) {
        std::vector<unsigned char> bytes(n);
        for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i * 7 + 3);
        CHECK(checksum(bytes.data(), n) == expected);
        for (const std::size_t piece : {std::size_t{1}, std::size_t{63}, std::size_t{4096}, std::size_t{256} << 10}) {
            ChecksumStream stream;
            for (std::size_t off = 0; off < n; off += piece) stream.update(bytes.data() + off, std::min(piece, n - off));
            CHECK(stream.digest() == expected);
            if (n > 100000 && piece == 1) break;  // a million 1-byte updates prove nothing more
        }
    }
}

TEST_CASE("checksums computed chunk by chunk match the reader's") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    const WriteView write = store.begin_write(4, 0);
    fill(write);
    store.note_written(0, 0, 1000);  // params, in order
    store.note_written(0, 1000, 3096);
    store.note_written(1, 500, 500);  // adam_m out of order: hashed whole at commit
    store.note_written(1, 0, 500);
    store.note_written(2, 0, 400);  // adam_v partly: hashed whole at commit
    CHECK_THROWS_AS(store.note_written(3, 4, 8), flashrec::Error);
    store.commit();
    CHECK(describe(SnapshotReader(job.name(), kRole).newest_committed()) == "ok step 4 intact");

    // A chunk changed after it was noted: the commit fails verification, it is never passed off.
    const WriteView again = store.begin_write(5, 0);
    fill(again);
    store.note_written(0, 0, 4096);
    again.buffer("params")[0] ^= std::byte{1};
    store.commit();
    CHECK(contains(store.committed(5).problem, "buffer 'params' checksum mismatch"));
}

TEST_CASE("a writer killed mid-write leaves the previous version readable in another process") {
    ScratchJob job;
    // Where the child stops, waiting for SIGKILL: 0 after begin_write, 1 after half the copy,
    // 2 after the whole copy (not committed), 3 after commit() of step 2.
    for (int stop_at = 0; stop_at < 4; ++stop_at) {
        CAPTURE(stop_at);
        const std::string role = "dp" + std::to_string(stop_at) + ".tp0.pp0";
        Pipe ready;
        Pipe never_written;  // the child blocks on it until killed
        const pid_t writer = fork_child(ready, [&](int out) {
            never_written.close_write();
            SnapshotStore store(job.name(), role, small_layout());
            write_step(store, 1);
            const WriteView view = store.begin_write(2, 0);
            if (stop_at >= 1) fill(view, 0.5);
            if (stop_at >= 2) fill(view);
            if (stop_at >= 3) store.commit();
            write_all(out, "paused");
            char byte;
            (void)!::read(never_written.read_end(), &byte, 1);
        });
        REQUIRE(read_all_until(ready.read_end(), "paused"));
        ::kill(writer, SIGKILL);
        CHECK(wait_for(writer) == 128 + SIGKILL);

        const std::string seen = in_other_process([&] {
            SnapshotReader reader(job.name(), role, small_layout());
            return describe(reader.newest_committed()) + " | " + reader.verify(2).problem;
        });
        if (stop_at < 3) {
            CHECK(contains(seen, "ok step 1 intact | step 2 is not held"));
            CHECK(contains(seen, "is being written"));
        } else {
            CHECK(seen == "ok step 2 intact | ");
        }
    }
}

// CPU time this process has used.
std::chrono::nanoseconds cpu_time() {
    timespec now{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

// Has the kernel send SIGKILL to this process once it has used `budget` more CPU time: the
// kill lands at a point of its own work that does not depend on how busy the machine is.
void arm_cpu_time_kill(std::chrono::nanoseconds budget) {
    sigevent event{};
    event.sigev_notify = SIGEV_SIGNAL;
    event.sigev_signo = SIGKILL;
    timer_t timer{};
    if (::timer_create(CLOCK_PROCESS_CPUTIME_ID, &event, &timer) != 0) throw std::runtime_error("timer_create");
    itimerspec when{};
    when.it_value.tv_sec = static_cast<time_t>(budget.count() / 1'000'000'000);
    when.it_value.tv_nsec = static_cast<long>(budget.count() % 1'000'000'000);
    if (::timer_settime(timer, 0, &when, nullptr) != 0) throw std::runtime_error("timer_settime");
}

TEST_CASE("a writer killed at an arbitrary instant never leaves a torn version readable") {
    ScratchJob job;
    const SnapshotLayout layout = {{"params", 1 << 20}, {"adam_m", 1 << 20}, {"adam_v", 1 << 20}};
    constexpr int kRounds = 24;
    int killed_mid_write = 0;
    for (int round = 0; round < kRounds; ++round) {
        CAPTURE(round);
        const std::string role = "r" + std::to_string(round);
        Pipe unused;
        // The writer times one step, then dies after round/kRounds of two more steps' CPU time:
        // across the rounds the kill sweeps every phase of begin_write, copy and commit of
        // both slots.
        const pid_t writer = fork_child(unused, [&](int) {
            SnapshotStore store(job.name(), role, layout);
            const auto before = cpu_time();
            write_step(store, 1);
            arm_cpu_time_kill((cpu_time() - before) * 2 * round / kRounds + std::chrono::microseconds(1));
            for (std::int64_t step = 2;; ++step) write_step(store, step);
        });
        CHECK(wait_for(writer) == 128 + SIGKILL);

        SnapshotReader reader(job.name(), role, layout);
        const SnapshotView newest = reader.newest_committed();
        REQUIRE_MESSAGE(newest.ok, newest.problem);
        CHECK(holds_its_step(newest));
        const std::string& other = newest.slot_status[1 - newest.slot];
        killed_mid_write += contains(other, "is being written");
        const bool consistent = contains(other, "holds step " + std::to_string(newest.step - 1)) ||
                                contains(other, "is being written") ||
                                (newest.step == 1 && contains(other, "is empty"));
        CHECK_MESSAGE(consistent, other);
    }
    CHECK(killed_mid_write > 0);  // the sweep did hit writes in progress
    MESSAGE(killed_mid_write << " of " << kRounds << " writers died mid-write");
}

TEST_CASE("a reader racing a live writer never gets wrong bytes from a view it checked") {
    ScratchJob job;
    const SnapshotLayout layout = {{"params", 256 << 10}, {"adam_m", 256 << 10}};
    Pipe started;
    const pid_t writer = fork_child(started, [&](int out) {
        SnapshotStore store(job.name(), kRole, layout);
        write_step(store, 1);
        write_all(out, "started");
        for (std::int64_t step = 2;; ++step) write_step(store, step);
    });
    REQUIRE(read_all_until(started.read_end(), "started"));
    SnapshotReader reader(job.name(), kRole, layout);
    int good = 0;
    int wrong = 0;
    for (int attempt = 0; attempt < 300; ++attempt) {
        const SnapshotView view = reader.newest_committed();
        if (!view.ok) continue;  // the writer overtook the read: callers retry
        const bool intact = holds_its_step(view);
        if (!view.unchanged()) continue;  // rewritten while it was compared: not a result
        (intact ? good : wrong) += 1;
    }
    ::kill(writer, SIGKILL);
    CHECK(wait_for(writer) == 128 + SIGKILL);
    CHECK(wrong == 0);
    CHECK(good > 0);
}

TEST_CASE("after every writer is gone a new process reopens the segments by name (warm relaunch)") {
    ScratchJob job;
    Pipe done;
    const pid_t first_job = fork_child(done, [&](int) {
        SnapshotStore store(job.name(), kRole, small_layout());
        write_step(store, 1);
        write_step(store, 2);
    });
    CHECK(wait_for(first_job) == 0);
    CHECK(read_all(done.read_end()).empty());
    CHECK(list_segments(job.name()).size() == 2);  // outlived their writer

    const std::string relaunched = in_other_process([&] {
        SnapshotStore store(job.name(), kRole, small_layout());
        std::string seen = describe(store.newest_committed());
        const int slot_of_1 = store.committed(1).slot;
        const WriteView next = store.begin_write(3, 1);
        seen += next.slot == slot_of_1 ? ", writes over step 1" : ", WRONG SLOT";
        fill(next);
        store.commit();
        return seen;
    });
    CHECK(relaunched == "ok step 2 intact, writes over step 1");
    const SnapshotStatus status = verify_snapshot(job.name(), kRole);
    CHECK(status.ok);
    CHECK(status.step == 3);
    CHECK(status.epoch == 1);
}

TEST_CASE("a flipped byte is reported with slot and buffer and never returned as ok") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    const WriteView first = store.begin_write(1, 0);
    fill(first);
    store.commit();
    const WriteView second = store.begin_write(2, 0);
    fill(second);
    store.commit();

    second.buffer("adam_m")[10] ^= std::byte{0x04};  // a stray write into committed memory
    const std::string slot2 = "slot " + std::to_string(second.slot);
    const SnapshotView corrupt = store.committed(2);
    CHECK_FALSE(corrupt.ok);
    CHECK(corrupt.buffers.empty());
    CHECK(contains(corrupt.problem, "step 2 is not usable: " + slot2 + ": buffer 'adam_m' checksum mismatch (stored "));
    CHECK(contains(corrupt.problem, ", computed "));

    // The newest complete version is then step 1, and the read says why step 2 was skipped.
    const SnapshotView newest = store.newest_committed();
    CHECK(describe(newest) == "ok step 1 intact");
    CHECK(contains(newest.slot_status[second.slot], "buffer 'adam_m' checksum mismatch"));

    const SnapshotStatus fresh = verify_snapshot(job.name(), kRole, 2);
    CHECK_FALSE(fresh.ok);
    CHECK(fresh.problem == corrupt.problem);

    first.buffer("rng")[0] ^= std::byte{0x80};
    const SnapshotView none = store.newest_committed();
    CHECK_FALSE(none.ok);
    CHECK(contains(none.problem, "no committed version: "));
    CHECK(contains(none.problem, "buffer 'rng' checksum mismatch"));
    CHECK(contains(none.problem, "buffer 'adam_m' checksum mismatch"));
}

TEST_CASE("a flipped byte in a header is reported as a header checksum mismatch") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    write_step(store, 1);
    const int slot = store.newest_committed().slot;
    {
        auto raw = ShmSegment::open(segment_name(job.name(), kRole, slot), ShmSegment::Access::read_write);
        REQUIRE(raw);
        raw->data()[72] ^= std::byte{1};  // the step field (docs/snapshots.md, header layout)
    }
    const SnapshotView view = store.newest_committed();
    CHECK_FALSE(view.ok);
    CHECK(contains(view.problem, "slot " + std::to_string(slot) + ": header checksum mismatch (stored "));
}

TEST_CASE("reopening with another layout names the buffer that differs") {
    ScratchJob job;
    { SnapshotStore store(job.name(), kRole, small_layout()); }

    SnapshotLayout resized = small_layout();
    resized[1].bytes = 2000;
    try {
        SnapshotStore store(job.name(), kRole, resized);
        FAIL("a layout mismatch was not detected");
    } catch (const SnapshotLayoutMismatch& e) {
        CHECK(e.buffer() == "adam_m");
        CHECK(contains(e.what(), "buffer 'adam_m' is 1000 bytes there, the caller expects 2000"));
        CHECK(contains(e.what(), segment_name(job.name(), kRole, 0)));
    }

    SnapshotLayout renamed = small_layout();
    renamed[2].name = "adam_w";
    CHECK_THROWS_WITH_AS(SnapshotStore(job.name(), kRole, renamed),
                         doctest::Contains("buffer 2 is 'adam_v' (1000 bytes) there, the caller expects 'adam_w'"),
                         SnapshotLayoutMismatch);

    SnapshotLayout longer = small_layout();
    longer.push_back({"master", 64});
    CHECK_THROWS_WITH_AS(SnapshotReader(job.name(), kRole, longer),
                         doctest::Contains("buffer 4 'master' is missing there"), SnapshotLayoutMismatch);
    CHECK(list_segments(job.name()).size() == 2);  // a failed open removes nothing it did not make
}

TEST_CASE("remove_all leaves nothing of the job in /dev/shm and nothing else is touched") {
    ScratchJob job;
    ScratchJob neighbour;
    const std::string similar = job.name() + "0";  // shares the text prefix, not the job
    {
        SnapshotStore own(job.name(), kRole, small_layout());
        SnapshotStore peer(job.name(), peer_role_key("dp2.tp0.pp0", kRole), small_layout());
        SnapshotStore other(neighbour.name(), kRole, small_layout());
        SnapshotStore close_name(similar, kRole, small_layout());
    }
    CHECK(list_segments(job.name()).size() == 4);
    CHECK(remove_all(job.name()) == 4);
    CHECK(list_segments(job.name()).empty());
    for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
        CHECK_FALSE(entry.path().filename().string().starts_with("flashrec." + job.name() + "."));
    CHECK(list_segments(neighbour.name()).size() == 2);
    CHECK(list_segments(similar).size() == 2);
    CHECK(remove_all(similar) == 2);
    CHECK(unlink_snapshot(neighbour.name(), kRole) == 2);
    CHECK(remove_all(neighbour.name()) == 0);
}

TEST_CASE("an impossible size throws a clear error and leaves no segment behind") {
    struct statvfs shm {};
    REQUIRE(::statvfs("/dev/shm", &shm) == 0);
    const std::size_t capacity = static_cast<std::size_t>(shm.f_blocks) * shm.f_frsize;
    if (capacity == 0) return;  // an unlimited tmpfs has no impossible size to try
    ScratchJob job;
    const std::size_t too_big = capacity + (std::size_t{1} << 30);
    try {
        SnapshotStore store(job.name(), kRole, {{"params", too_big}});
        FAIL("an impossible segment was created");
    } catch (const SnapshotAllocationError& e) {
        CHECK(e.segment() == segment_name(job.name(), kRole, 0));
        CHECK(e.bytes() >= too_big);
        CHECK(contains(e.what(), "cannot allocate " + std::to_string(e.bytes()) + " bytes"));
        CHECK(contains(e.what(), "/dev/shm has "));
        MESSAGE(std::string(e.what()));
    }
    CHECK(list_segments(job.name()).empty());
}

TEST_CASE("a store the pool creates takes blanks of its slot size; blanks not taken are unlinked") {
    ScratchJob job;
    StorePool pool;
    const std::size_t slot = snapshot_segment_bytes(small_layout());
    pool.make_blanks(job.name(), "spare4", {slot, slot + 4096, slot});
    CHECK(list_segments(job.name()).size() == 3);
    CHECK(pool.blank_bytes() == 3 * slot + 4096);

    // Both slots are blanks renamed: no segment is added, the odd-sized blank stays.
    const auto store = pool.get(job.name(), kRole, small_layout());
    CHECK(pool.blank_bytes() == slot + 4096);
    const auto names = list_segments(job.name());
    CHECK(names.size() == 3);
    for (int s = 0; s < 2; ++s)
        CHECK(std::find(names.begin(), names.end(), segment_name(job.name(), kRole, s)) != names.end());
    const WriteView write = store->begin_write(3, 0);
    fill(write);
    store->commit();
    CHECK(holds_its_step(store->newest_committed()));
    CHECK(verify_snapshot(job.name(), kRole).step == 3);  // another reader finds it by name

    // A layout no blank fits is created as before, and leaves the blank alone.
    const std::string peer = peer_role_key("dp2.tp0.pp0", kRole);
    pool.get(job.name(), peer, {{"params", 123}});
    CHECK(pool.blank_bytes() == slot + 4096);
    CHECK(list_segments(job.name()).size() == 5);

    pool.drop_blanks();
    CHECK(pool.blank_bytes() == 0);
    CHECK(list_segments(job.name()).size() == 4);
    CHECK(pool.get(job.name(), kRole, small_layout()) == store);  // kept, as before
}

TEST_CASE("copy_committed copies a version in the pass that verifies it, and refuses a corrupt one") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, small_layout());
    write_step(store, 1);
    const WriteView second = store.begin_write(2, 0);
    fill(second);
    store.commit();

    // A buffer of several 256 KiB pieces exercises the piecewise copy and hash.
    const SnapshotLayout big = {{"a", 700000}, {"b", 3}};
    ScratchJob big_job;
    SnapshotStore big_store(big_job.name(), kRole, big);
    write_step(big_store, 5);
    std::vector<std::vector<std::byte>> big_out{std::vector<std::byte>(700000), std::vector<std::byte>(3)};
    std::vector<std::span<std::byte>> big_dst{big_out[0], big_out[1]};
    const SnapshotView copied = big_store.copy_committed(5, big_dst);
    REQUIRE(copied.ok);
    for (std::size_t b = 0; b < big_out.size(); ++b)
        for (std::size_t p = 0; p < big_out[b].size(); ++p) REQUIRE(big_out[b][p] == pattern(5, b, p));
    const SnapshotReader reader(big_job.name(), kRole);
    CHECK(reader.copy_committed(5, big_dst).ok);

    std::vector<std::vector<std::byte>> small_out;
    std::vector<std::span<std::byte>> small_dst;
    for (const auto& b : small_layout()) small_out.emplace_back(b.bytes);
    for (auto& v : small_out) small_dst.emplace_back(v);
    second.buffer("adam_v")[999] ^= std::byte{0x01};  // a stray write into committed memory
    const SnapshotView corrupt = store.copy_committed(2, small_dst);
    CHECK_FALSE(corrupt.ok);
    CHECK(contains(corrupt.problem, "buffer 'adam_v' checksum mismatch"));
    CHECK(store.copy_committed(1, small_dst).ok);

    std::vector<std::span<std::byte>> wrong{small_dst[0]};
    CHECK_FALSE(store.copy_committed(1, wrong).ok);
}

TEST_CASE("under Slurm a node's segments are marked for the epilog, which removes that job's and nothing else") {
    namespace fs = std::filesystem;
    const char* before = std::getenv("SLURM_JOB_ID");
    const std::string saved = before ? before : "";
    // Made-up Slurm job ids (no Slurm here): the marker and the epilog act on names and owners.
    const std::string slurm_job = std::to_string(900000000 + ::getpid());
    const std::string other_slurm_job = std::to_string(800000000 + ::getpid());
    const std::string uid = std::to_string(::getuid());
    const auto epilog = [](const std::string& env) { return std::system((env + " " FLASHREC_EPILOG).c_str()); };
    ScratchJob job;
    ScratchJob neighbour;
    const std::string marker = "/dev/shm/flashrec-slurm-job." + slurm_job + "." + job.name();

    ::unsetenv("SLURM_JOB_ID");
    CHECK(epilog_marker_path(job.name()).empty());
    CHECK_FALSE(mark_for_epilog(job.name()));

    ::setenv("SLURM_JOB_ID", other_slurm_job.c_str(), 1);
    { SnapshotStore other(neighbour.name(), kRole, small_layout()); }
    ::setenv("SLURM_JOB_ID", slurm_job.c_str(), 1);
    CHECK(epilog_marker_path(job.name()) == marker);
    {
        SnapshotStore own(job.name(), kRole, small_layout());
        SnapshotStore peer(job.name(), peer_role_key("dp2.tp0.pp0", kRole), small_layout());
    }
    CHECK(fs::exists(marker));
    CHECK(list_segments(job.name()).size() == 4);

    SUBCASE("the epilog of this Slurm job removes the job's segments and the marker") {
        CHECK(epilog("SLURM_JOB_ID=" + slurm_job + " SLURM_JOB_UID=" + uid) == 0);
        CHECK(list_segments(job.name()).empty());
        CHECK_FALSE(fs::exists(marker));
        CHECK(list_segments(neighbour.name()).size() == 2);  // another Slurm job's
    }
    SUBCASE("another user's job, a bad id or no id: nothing is removed, and the epilog never fails") {
        CHECK(epilog("SLURM_JOB_ID=" + slurm_job + " SLURM_JOB_UID=" + std::to_string(::getuid() + 4242)) == 0);
        CHECK(epilog("SLURM_JOB_ID='" + slurm_job + " *' SLURM_JOB_UID=" + uid) == 0);
        CHECK(epilog("env -u SLURM_JOB_ID SLURM_JOB_UID=" + uid) == 0);
        CHECK(list_segments(job.name()).size() == 4);
        CHECK(fs::exists(marker));
        CHECK(remove_all(job.name()) == 4);  // the launcher's cleanup drops the marker too
        CHECK_FALSE(fs::exists(marker));
    }
    CHECK(remove_all(neighbour.name()) == 2);
    ::unlink(("/dev/shm/flashrec-slurm-job." + other_slurm_job + "." + neighbour.name()).c_str());
    if (before) ::setenv("SLURM_JOB_ID", saved.c_str(), 1); else ::unsetenv("SLURM_JOB_ID");
}

TEST_CASE("the epilog removes the job user's Open MPI sm segments that nothing maps, once a minute old") {
    namespace fs = std::filesystem;
    const std::string uid = std::to_string(::getuid());
    // Open MPI's names (sm_segment.<host>.<uid>.<jobid>.<rank>), with a host no machine has.
    const auto segment = [&](const char* which) {
        return "/dev/shm/sm_segment.t-epilog-" + std::to_string(::getpid()) + "." + uid + "." + which + ".0";
    };
    const auto make = [](const std::string& path, bool old) {
        const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_TRUNC, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(::ftruncate(fd, 4096) == 0);
        if (old) {
            const struct timespec times[2] = {{::time(nullptr) - 300, 0}, {::time(nullptr) - 300, 0}};
            REQUIRE(::futimens(fd, times) == 0);
        }
        return fd;
    };
    const std::string stale = segment("dead0001"), young = segment("dead0002"), mapped = segment("dead0003");
    ::close(make(stale, true));
    ::close(make(young, false));
    const int mapped_fd = make(mapped, true);
    void* map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, mapped_fd, 0);
    REQUIRE(map != MAP_FAILED);
    ::close(mapped_fd);
    const std::string slurm_job = std::to_string(600000000 + ::getpid());
    CHECK(std::system(("SLURM_JOB_ID=" + slurm_job + " SLURM_JOB_UID=" + std::to_string(::getuid() + 4242) + " " +
                       FLASHREC_EPILOG).c_str()) == 0);
    CHECK(fs::exists(stale));  // another user's job: none of this user's segments go
    CHECK(std::system(("SLURM_JOB_ID=" + slurm_job + " SLURM_JOB_UID=" + uid + " " FLASHREC_EPILOG).c_str()) == 0);
    CHECK_FALSE(fs::exists(stale));
    CHECK(fs::exists(young));   // a starting job's rank may not have mapped it yet
    CHECK(fs::exists(mapped));  // a live job's
    ::munmap(map, 4096);
    ::unlink(young.c_str());
    ::unlink(mapped.c_str());
}

TEST_CASE("the epilog without a Slurm job (a health check) keeps what it cannot prove gone") {
    // No controller answers here (squeue fails or is missing): every job counts as running.
    const std::string slurm_job = std::to_string(700000000 + ::getpid());
    const char* before = std::getenv("SLURM_JOB_ID");
    const std::string saved = before ? before : "";
    ::setenv("SLURM_JOB_ID", slurm_job.c_str(), 1);
    ScratchJob job;
    { SnapshotStore own(job.name(), kRole, small_layout()); }
    const std::string marker = epilog_marker_path(job.name());
    CHECK(std::system("env -u SLURM_JOB_ID -u SLURM_JOBID SLURM_CONF=/nonexistent/slurm.conf " FLASHREC_EPILOG) == 0);
    CHECK(list_segments(job.name()).size() == 2);
    CHECK(std::filesystem::exists(marker));
    CHECK(remove_all(job.name()) == 2);
    CHECK_FALSE(std::filesystem::exists(marker));
    if (before) ::setenv("SLURM_JOB_ID", saved.c_str(), 1); else ::unsetenv("SLURM_JOB_ID");
}
