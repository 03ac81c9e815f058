#include "planning/plan_upload.hpp"

#include <cstring>

#include "loading/driver.hpp"

namespace aotinfer::detail {

PlanUpload::PlanUpload() = default;

PlanUpload::~PlanUpload() {
  try {
    if (copy_pending_) driver().cuEventSynchronize(copy_done_);
    if (copy_done_) driver().cuEventDestroy(copy_done_);
    if (staging_) driver().cuMemFreeHost(staging_);
  } catch (...) {
  }
}

char* PlanUpload::image(std::size_t bytes) {
  char* image = raw_image(bytes);
  std::memset(image, 0, bytes);
  return image;
}

char* PlanUpload::raw_image(std::size_t bytes) {
  if (copy_pending_) check(driver().cuEventSynchronize(copy_done_), "waiting for the previous plan's copy");
  copy_pending_ = false;
  if (staging_bytes_ < bytes) {
    if (staging_) check(driver().cuMemFreeHost(staging_), "cuMemFreeHost");
    staging_ = nullptr;
    staging_bytes_ = 0;
    check(driver().cuMemHostAlloc(&staging_, bytes, 0), "allocating pinned plan staging");
    staging_bytes_ = bytes;
  }
  return static_cast<char*>(staging_);
}

void PlanUpload::send(void* device, std::size_t bytes, Stream stream) {
  // Created on first use: the caller's context is current by then.
  if (!copy_done_) check(driver().cuEventCreate(&copy_done_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  check(driver().cuMemcpyHtoDAsync(CUdeviceptr(device), staging_, bytes, stream), "copying the plan to the device");
  check(driver().cuEventRecord(copy_done_, stream), "cuEventRecord");
  copy_pending_ = true;
}

}  // namespace aotinfer::detail
