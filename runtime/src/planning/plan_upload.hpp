// The one host-to-device copy of a plan: the plan is written into a pinned image of the int
// workspace, then copied asynchronously; an event guards the image until the copy is done, so
// the next plan waits only if it comes before the previous copy finished. Internal.
#pragma once
#include <cstddef>

#include <cuda.h>

#include "aotinfer/package.hpp"

namespace aotinfer::detail {

class PlanUpload {
 public:
  PlanUpload();
  ~PlanUpload();
  PlanUpload(const PlanUpload&) = delete;
  PlanUpload& operator=(const PlanUpload&) = delete;

  // A zeroed pinned image of at least `bytes`; waits for the previous copy first.
  char* image(std::size_t bytes);
  // The same, not zeroed (it holds what the last plan left): for callers that write every
  // byte the device reads, where clearing would only double the writes.
  char* raw_image(std::size_t bytes);
  // Copies the first `bytes` of the image to `device` on `stream`.
  void send(void* device, std::size_t bytes, Stream stream);

 private:
  void* staging_ = nullptr;
  std::size_t staging_bytes_ = 0;
  CUevent copy_done_ = nullptr;
  bool copy_pending_ = false;
};

}  // namespace aotinfer::detail
