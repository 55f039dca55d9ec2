// XXH3-64 for AVX2 (see checksum_kernel.hpp). Only this file is compiled for it;
// checksum.cpp calls it only on a CPU that has it.
#include "checksum_kernel.hpp"

// GCC only: clang (which also defines __GNUC__) has neither `#pragma GCC target` nor GCC's
// warning groups; a clang build uses the portable kernel (checksum.cpp), same hash.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("avx2")
// GCC 12 reports uninitialised variables inside its own AVX-512 intrinsics where XXH3 uses them
// (a known false positive): for the whole file, as the middle end reports it after the include.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Wuseless-cast"
#include <immintrin.h>
#define XXH_VECTOR XXH_AVX2
#define XXH_INLINE_ALL
#define XXH_NAMESPACE flashrec_avx2_
#include <xxhash.h>
#pragma GCC diagnostic pop

FLASHREC_CHECKSUM_KERNEL("avx2", avx2_kernel)
#else
namespace flashrec::ft::detail {
const ChecksumKernel* avx2_kernel() { return nullptr; }
}  // namespace flashrec::ft::detail
#endif
