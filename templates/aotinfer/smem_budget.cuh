// Dynamic shared memory one CTA may use, for every chip the code of this compile pass runs on.
// Kernels size their pipelines from it; each arch's cubin exports its own launch info, so the
// runtime requests what that cubin was built for. seal checks the result against every chip.
#pragma once

namespace aotinfer {

constexpr int kSmemPerCta =
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && __CUDA_ARCH__ < 1200
    // Hopper, datacenter Blackwell, Thor: 227 KiB, less the 1 KiB the system reserves there in
    // the static section of every kernel that uses shared memory (seal counts it).
    227 * 1024 - 1024;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    64 * 1024;  // Turing
#else
    // 8.x code also runs on the 99 KiB chips of its generation (8.6, 8.8, 8.9), 12.x code is
    // consumer Blackwell; the host pass takes the same (it never launches anything).
    99 * 1024;
#endif

}  // namespace aotinfer
