// parallel/comm/nccl/group.cpp — the NCCL calls, the fingerprint boards and the making of
// communicators that the nccl backend's files share (group.h).
#include "multigrad/parallel/comm/nccl/group.h"

#include <algorithm>

#include "multigrad/core/cuda_device_guard.h"
#include "multigrad/core/device.h"

namespace mg::parallel::nccl_backend {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Int64: return ncclInt64;
    default: MG_ERROR("nccl: no NCCL datatype for ", dtype);  // check_tensor rejects it earlier
  }
}

std::string nccl_error(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += detail::str_cat(" (", last, ")");
  return text;
}

ncclResult_t async_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
  return query != ncclSuccess ? query : state;
}

std::shared_ptr<FingerprintBoard> board_of(const ncclUniqueId& id, int size) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<FingerprintBoard>> boards;
  std::lock_guard<std::mutex> lock(mu);
  std::erase_if(boards, [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<FingerprintBoard>& slot = boards[std::string(id.internal, sizeof(id.internal))];
  std::shared_ptr<FingerprintBoard> board = slot.lock();
  if (!board) {
    board = std::make_shared<FingerprintBoard>(size);
    slot = board;
  }
  return board;
}

std::vector<int> physical_gpus(const char* fn, const std::vector<Device>& devices) {
  std::vector<int> gpus;
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = devices[i];
    MG_CHECK(d.is_cuda(), fn, ": ", d, " is not a CUDA device, and the nccl backend takes CUDA devices only; ",
             "run_ranks (local.h) and mpi_world (mpi.h) take CPU devices");
    check_device_exists(d);
    const int gpu = cuda_physical_index(d.index());
    for (size_t j = 0; j < i; ++j) {
      MG_CHECK(gpus[j] != gpu, fn, ": ", devices[j], " and ", d, " are both on GPU ", gpu,
               ", and NCCL needs a GPU of its own for every rank; run_ranks (the local backend) runs ranks that "
               "share a GPU, such as the logical devices of MG_CUDA_LOGICAL_DEVICES");
    }
    gpus.push_back(gpu);
  }
  return gpus;
}

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

void finish_init(const std::string& what, std::vector<ncclComm_t>& comms, ncclResult_t result) {
  const auto deadline = Clock::now() + kDefaultTimeout;
  std::string error;
  if (result != ncclSuccess && result != ncclInProgress) {
    error = nccl_error(result, nullptr);
  }
  for (ncclComm_t comm : comms) {
    if (!error.empty()) break;
    if (comm == nullptr) {
      error = "NCCL made no communicator";
      break;
    }
    result = settle(comm, async_state(comm), [&] { return Clock::now() >= deadline; });
    if (result == ncclInProgress) {
      error = detail::str_cat("timed out after ", kDefaultTimeout.count(), " ms");
    } else if (result != ncclSuccess) {
      error = nccl_error(result, comm);
    }
  }
  if (error.empty()) return;
  for (ncclComm_t comm : comms) {
    if (comm != nullptr) ncclCommAbort(comm);
  }
  MG_ERROR(what, " failed: ", error);
}

std::vector<std::shared_ptr<Handle>> handles_of(const std::vector<ncclComm_t>& comms) {
  std::vector<std::shared_ptr<Handle>> handles;
  for (ncclComm_t comm : comms) {
    handles.push_back(std::make_shared<Handle>());
    handles.back()->comm = comm;
  }
  return handles;
}

std::vector<std::shared_ptr<Handle>> make_communicators(const std::vector<Device>& devices,
                                                        const std::vector<int>& gpus) {
  const int n = int(gpus.size());
  ncclUniqueId id;
  const ncclResult_t got_id = ncclGetUniqueId(&id);
  MG_CHECK(got_id == ncclSuccess, "run_ranks_nccl: ncclGetUniqueId failed: ", nccl_error(got_id, nullptr));
  std::vector<ncclComm_t> comms(size_t(n), nullptr);
  ncclConfig_t config = non_blocking_config();
  ncclResult_t result = ncclGroupStart();
  if (result == ncclSuccess) {
    for (int r = 0; r < n && (result == ncclSuccess || result == ncclInProgress); ++r) {
      detail::CudaDeviceGuard on_gpu(gpus[size_t(r)]);  // NCCL takes the rank's GPU from the current device
      result = ncclCommInitRankConfig(&comms[size_t(r)], n, id, r, &config);
    }
    const ncclResult_t end = ncclGroupEnd();  // ncclInProgress: NCCL goes on making them in the background
    if (result == ncclSuccess || result == ncclInProgress) result = end;
  }
  std::string on;
  for (const Device& d : devices) on += detail::str_cat(on.empty() ? "" : ", ", d);
  finish_init(detail::str_cat("run_ranks_nccl: making the NCCL communicators of ", on), comms, result);
  return handles_of(comms);
}

}  // namespace mg::parallel::nccl_backend
