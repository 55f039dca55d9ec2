// The block-parallel snapshot checksum (ChecksumAlgorithm::xxh3_64_blocks) without a GPU: the
// portable code the CUDA kernel runs (ft/xxh3_blocks.hpp) against libxxhash, the kernel's
// thread decomposition emulated on the host against the host reference, and snapshot segments
// that record it (written as the GPU path writes them) verified, copied and refused when corrupt.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <xxhash.h>

#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "flashrec/ft/checksum.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/ft/xxh3_blocks.hpp"

#include "scratch_job.hpp"

using namespace flashrec::ft;

using flashrec::test::ScratchJob;

namespace {

constexpr xxh3::Keys kKeys = xxh3::make_keys();

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::vector<unsigned char> v(n);
    for (auto& b : v) b = static_cast<unsigned char>(rng());
    return v;
}

// What the kernel computes, thread by thread: 4 terms per block summed, then the digest.
std::vector<std::uint64_t> emulated_kernel_digests(const unsigned char* data, std::size_t bytes) {
    std::vector<std::uint64_t> digests(xxh3::block_count(bytes));
    for (std::size_t block = 0; block < digests.size(); ++block) {
        std::uint64_t sum = 0;
        for (unsigned pair = 0; pair < xxh3::kPairsPerBlock; ++pair) sum += xxh3::block_term(data, bytes, block, pair, kKeys);
        digests[block] = xxh3::block_digest(xxh3::block_length(bytes, block), sum);
    }
    return digests;
}

// The definition, spelled with libxxhash only.
std::uint64_t definition(const unsigned char* data, std::size_t bytes) {
    std::vector<std::uint64_t> digests;
    for (std::size_t off = 0; off < bytes; off += 4096) digests.push_back(XXH3_64bits(data + off, std::min<std::size_t>(4096, bytes - off)));
    return XXH3_64bits(digests.data(), digests.size() * 8);
}

}  // namespace

TEST_CASE("the portable XXH3-64 the kernel runs equals libxxhash at every length class and alignment") {
    const auto data = random_bytes(20000 + 64, 1);
    std::vector<std::size_t> lengths;
    for (std::size_t n = 0; n <= 2200; ++n) lengths.push_back(n);
    for (std::size_t n : {4095, 4096, 4097, 8191, 8192, 8193, 12345, 16384, 20000}) lengths.push_back(n);
    for (std::size_t misalign : {0, 1, 3, 8, 13}) {
        const unsigned char* in = data.data() + misalign;
        for (std::size_t n : lengths) {
            INFO("length " << n << ", offset " << misalign);
            REQUIRE(xxh3::hash64(in, n, kKeys) == XXH3_64bits(in, n));
        }
    }
}

TEST_CASE("the kernel's thread decomposition gives the host reference's digests and checksum") {
    const auto data = random_bytes((64 << 10) + 4096 + 100, 2);
    // Whole blocks, a long tail, a tail of <= 240 bytes (hashed by pair 0 alone), tiny buffers.
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{240}, std::size_t{241}, std::size_t{4096},
                              std::size_t{4096 + 1}, std::size_t{4096 + 240}, std::size_t{4096 + 241},
                              std::size_t{3 * 4096 + 17}, std::size_t{64 << 10}, data.size() - 7}) {
        for (std::size_t misalign : {0, 5}) {
            if (bytes + misalign > data.size()) continue;
            INFO(bytes << " bytes at offset " << misalign);
            const unsigned char* in = data.data() + misalign;
            const auto digests = emulated_kernel_digests(in, bytes);
            for (std::size_t b = 0; b < digests.size(); ++b)
                REQUIRE(digests[b] == XXH3_64bits(in + b * 4096, xxh3::block_length(bytes, b)));
            const std::uint64_t reference = block_checksum(in, bytes);
            CHECK(reference == definition(in, bytes));
            CHECK(combine_block_digests(digests.data(), digests.size()) == reference);
            CHECK(checksum_by(ChecksumAlgorithm::xxh3_64_blocks, in, bytes) == reference);
            CHECK(checksum_by(ChecksumAlgorithm::xxh3_64, in, bytes) == XXH3_64bits(in, bytes));
        }
    }
}

TEST_CASE("the streaming host reference equals the one-shot one for pieces of any size") {
    const auto data = random_bytes(5 * 4096 + 333, 3);
    const std::uint64_t whole = block_checksum(data.data(), data.size());
    for (std::size_t piece : {1, 7, 240, 4095, 4096, 4097, 10000, 1 << 20}) {
        BlockChecksumStream stream;
        for (std::size_t off = 0; off < data.size(); off += piece)
            stream.update(data.data() + off, std::min(piece, data.size() - off));
        INFO("piece " << piece);
        CHECK(stream.finish() == whole);
        stream.reset();
        stream.update(data.data(), data.size());
        CHECK(stream.finish() == whole);
    }
    // More than one batch of digests (512 per batch): 1 MiB + a tail is 257 blocks... and 2 MiB + 1 is 513.
    const auto big = random_bytes((2 << 20) + 1, 4);
    CHECK(block_checksum(big.data(), big.size()) == definition(big.data(), big.size()));
    // Every flipped block shows.
    auto flipped = big;
    flipped[(1 << 20) + 5] ^= 0x10;
    CHECK(block_checksum(flipped.data(), flipped.size()) != block_checksum(big.data(), big.size()));
}

TEST_CASE("algorithms have names and stored words; unknown words are refused") {
    CHECK(std::string(checksum_algorithm_name(ChecksumAlgorithm::xxh3_64)) == "xxh3-64");
    CHECK(std::string(checksum_algorithm_name(ChecksumAlgorithm::xxh3_64_blocks)) == "xxh3-64-blocks-4k");
    CHECK(checksum_algorithm_from(0) == ChecksumAlgorithm::xxh3_64);
    CHECK(checksum_algorithm_from(1) == ChecksumAlgorithm::xxh3_64_blocks);
    CHECK_FALSE(checksum_algorithm_from(2).has_value());
}

namespace {

const std::string kRole = "dp0.tp0.pp0";

// A version written as the GPU path writes it: the bytes copied in, buffer 0's checksum given
// (computed "at the source"), buffer 1 hashed by the store from the landed bytes.
void write_device_hashed(SnapshotStore& store, std::int64_t step, const std::vector<unsigned char>& device_bytes,
                         const std::vector<unsigned char>& host_bytes, std::optional<std::uint64_t> given = std::nullopt) {
    const WriteView view = store.begin_write(step, 0);
    std::memcpy(view.buffers[0].bytes.data(), device_bytes.data(), device_bytes.size());
    std::memcpy(view.buffers[1].bytes.data(), host_bytes.data(), host_bytes.size());
    store.note_written(1, 0, host_bytes.size());
    store.set_checksum(0, {ChecksumAlgorithm::xxh3_64_blocks,
                           given.value_or(block_checksum(device_bytes.data(), device_bytes.size()))});
    store.commit();
}

}  // namespace

TEST_CASE("a segment records each buffer's algorithm; readers verify device-hashed buffers on the host") {
    ScratchJob job;
    const auto device_bytes = random_bytes(3 * 4096 + 77, 5), host_bytes = random_bytes(1000, 6);
    const SnapshotLayout layout{{"params", device_bytes.size()}, {"adam_t", host_bytes.size()}};
    SnapshotStore store(job.name(), kRole, layout);
    write_device_hashed(store, 1, device_bytes, host_bytes);

    // Another reader (a fresh process, recovery, the HDF5 writer) sees and verifies it.
    const SnapshotReader reader(job.name(), kRole, layout);
    const SnapshotView view = reader.committed(1);
    REQUIRE_MESSAGE(view.ok, view.problem);
    CHECK(std::memcmp(view.buffers[0].bytes.data(), device_bytes.data(), device_bytes.size()) == 0);
    const auto header = reader.committed_header(1);
    REQUIRE(header);
    REQUIRE(header->algorithms.size() == 2);
    CHECK(header->algorithms[0] == ChecksumAlgorithm::xxh3_64_blocks);
    CHECK(header->algorithms[1] == ChecksumAlgorithm::xxh3_64);
    CHECK(header->checksums[0].second == block_checksum(device_bytes.data(), device_bytes.size()));
    CHECK(header->checksums[1].second == XXH3_64bits(host_bytes.data(), host_bytes.size()));

    // Restore: copied out in the pass that verifies it.
    std::vector<std::byte> out0(device_bytes.size()), out1(host_bytes.size());
    const std::vector<std::span<std::byte>> destinations{out0, out1};
    const SnapshotView copied = reader.copy_committed(1, destinations);
    REQUIRE_MESSAGE(copied.ok, copied.problem);
    CHECK(std::memcmp(out0.data(), device_bytes.data(), out0.size()) == 0);

    // The next version written by the host path only: the slot's words go back to XXH3-64.
    const WriteView next = store.begin_write(2, 0);
    std::memcpy(next.buffers[0].bytes.data(), device_bytes.data(), device_bytes.size());
    std::memcpy(next.buffers[1].bytes.data(), host_bytes.data(), host_bytes.size());
    store.commit();
    const auto host_header = reader.committed_header(2);
    REQUIRE(host_header);
    CHECK(host_header->algorithms[0] == ChecksumAlgorithm::xxh3_64);
    CHECK(reader.verify(2).ok);
    CHECK(reader.verify(1).ok);  // the other slot keeps its device-hashed version
}

TEST_CASE("landed bytes that differ from what the GPU hashed fail verification, naming the algorithm") {
    ScratchJob job;
    const auto device_bytes = random_bytes(2 * 4096, 7), host_bytes = random_bytes(8, 8);
    const SnapshotLayout layout{{"params", device_bytes.size()}, {"rng", host_bytes.size()}};
    SnapshotStore store(job.name(), kRole, layout);
    // The copy went wrong after the kernel hashed the source: one byte differs in the slot.
    auto landed = device_bytes;
    landed[4096 + 9] ^= 1;
    write_device_hashed(store, 3, landed, host_bytes, block_checksum(device_bytes.data(), device_bytes.size()));
    const SnapshotStatus status = store.verify(3);
    CHECK_FALSE(status.ok);
    CHECK(status.problem.find("buffer 'params' checksum mismatch") != std::string::npos);
    CHECK(status.problem.find("xxh3-64-blocks-4k") != std::string::npos);
}

TEST_CASE("set_checksum is checked like note_written") {
    ScratchJob job;
    SnapshotStore store(job.name(), kRole, {{"a", 10}});
    CHECK_THROWS_WITH_AS(store.set_checksum(0, {ChecksumAlgorithm::xxh3_64_blocks, 1}),
                         doctest::Contains("set_checksum() without begin_write()"), flashrec::Error);
    store.begin_write(1, 0);
    CHECK_THROWS_WITH_AS(store.set_checksum(1, {ChecksumAlgorithm::xxh3_64_blocks, 1}),
                         doctest::Contains("of a layout of 1 buffers"), flashrec::Error);
    CHECK_THROWS_WITH_AS(store.set_checksum(0, {static_cast<ChecksumAlgorithm>(9), 1}),
                         doctest::Contains("unknown algorithm"), flashrec::Error);
}
