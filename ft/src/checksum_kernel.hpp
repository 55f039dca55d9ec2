// XXH3-64 compiled for one instruction set (checksum_avx2.cpp, checksum_avx512.cpp); checksum.cpp
// picks the widest this CPU runs. Every kernel computes the same hash: XXH3's result does not
// depend on the vector width, only its speed does (the distribution's libxxhash is built for
// SSE2: 21 GB/s from cache here, AVX2 62, AVX-512 93).
#pragma once
#include <cstddef>
#include <cstdint>

namespace flashrec::ft::detail {

struct ChecksumKernel {
    const char* name;
    std::uint64_t (*hash)(const void* data, std::size_t bytes);
    void* (*create)();  // an XXH3 state, reset
    void (*destroy)(void* state);
    void (*reset)(void* state);
    void (*update)(void* state, const void* data, std::size_t bytes);
    std::uint64_t (*digest)(const void* state);
};

// Null where the compiler cannot build that kernel (not x86-64 GCC/Clang).
const ChecksumKernel* avx2_kernel();
const ChecksumKernel* avx512_kernel();

}  // namespace flashrec::ft::detail

// The body of a kernel's translation unit: XXH3 inlined under a private namespace (so it never
// clashes with libxxhash's symbols), for the vector unit the including file selected.
#define FLASHREC_CHECKSUM_KERNEL(NAME, FUNCTION)                                                  \
    namespace flashrec::ft::detail {                                                              \
    const ChecksumKernel* FUNCTION() {                                                            \
        static const ChecksumKernel kernel{                                                       \
            NAME,                                                                                 \
            [](const void* data, std::size_t bytes) -> std::uint64_t {                            \
                return XXH3_64bits(data, bytes);                                                  \
            },                                                                                    \
            []() -> void* {                                                                       \
                XXH3_state_t* state = XXH3_createState();                                         \
                if (state) XXH3_64bits_reset(state);                                              \
                return state;                                                                     \
            },                                                                                    \
            [](void* state) { XXH3_freeState(static_cast<XXH3_state_t*>(state)); },               \
            [](void* state) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state)); },           \
            [](void* state, const void* data, std::size_t bytes) {                                \
                XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, bytes);               \
            },                                                                                    \
            [](const void* state) -> std::uint64_t {                                              \
                return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));               \
            }};                                                                                   \
        return &kernel;                                                                           \
    }                                                                                             \
    }
