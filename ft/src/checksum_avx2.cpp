// XXH3-64 for AVX2 (see checksum_kernel.hpp). Only this file is compiled for it;
// checksum.cpp calls it only on a CPU that has it. The body: checksum_vector_kernel.inc.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FLASHREC_VECTOR_KERNEL 1
#pragma GCC target("avx2")
#else
#define FLASHREC_VECTOR_KERNEL 0
#endif
#define FLASHREC_XXH_VECTOR XXH_AVX2
#define FLASHREC_XXH_NAMESPACE flashrec_avx2_
#define FLASHREC_KERNEL_NAME "avx2"
#define FLASHREC_KERNEL_FUNCTION avx2_kernel
#include "checksum_vector_kernel.inc"
