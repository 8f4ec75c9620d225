// data/dataloader.cpp — cuts the sampler's order into batches and assembles them ahead of the
// training loop on worker threads.
//
// Design: batch k of an epoch is order[k * B, (k + 1) * B) (the last one partial unless
// drop_last). With W workers, worker w assembles batches w, w + W, w + 2W, ... in that order
// into its own queue of at most `prefetch` batches, and next() takes batch k from queue k mod W.
// So batch k is the same batch whatever W is, and next() returns them strictly in order. A
// worker that throws puts the exception in its queue in place of the batch and stops; next()
// rethrows it when the caller reaches that batch (and again on every later call, until
// start_epoch). next() before the first start_epoch is an error, not an empty epoch. Stopping
// (start_epoch, the destructor) sets a flag that every wait checks, then joins the workers:
// nobody blocks on a queue that will never move. An epoch started at batch F (a run resumed
// mid-epoch) runs the same scheme over batches F, F + 1, ...: worker w makes those k with
// k mod W == w, and batch k is still the batch k of the uninterrupted epoch.
//
// Assembly of one batch: get_batch (one gather), the transforms, a copy into pinned host memory
// when pin_memory, then the copy to the device. With W = 0 it all happens inside next().
//
// CUDA: the copy to the device runs on the loader's own copy stream, so it overlaps the
// compute the caller has already queued. Ordering, without record_stream:
//   1. the device tensors are allocated on the compute stream (the caller's current stream of
//      the device when it called start_epoch), whose pool hands a block back only to later
//      compute work, so freeing them is safe;
//   2. the copy stream waits for an event on the compute stream: the block's previous users
//      (kernels still queued when it was freed) are done before the copy overwrites it;
//   3. the compute stream waits for an event after the copy: everything the caller enqueues
//      once next() has returned the batch runs after the data arrived;
//   4. a pinned source is copied without blocking, and goes back to its cache only once the copy
//      finished (the assembler waits on that event alone; on a worker this costs the caller
//      nothing), also when the second copy fails after the first was queued.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "multigrad/core/allocator.h"
#include "multigrad/core/stream.h"
#include "multigrad/data/data.h"
#include "multigrad/kernels/kernels.h"

namespace mg::data {
namespace {

// A contiguous copy of t in page-locked host memory (device cpu:0), from which a CUDA copy can
// run asynchronously.
Tensor pinned_copy(const Tensor& t) {
  Tensor src = t.contiguous();
  size_t nbytes = size_t(src.numel()) * src.element_size();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(nbytes, Device(DeviceType::CPU, 0), pinned_allocator());
  impl->shape = src.shape();
  impl->strides = contiguous_strides(src.shape());
  impl->dtype = src.dtype();
  if (nbytes > 0) std::memcpy(impl->storage->data(), src.data_ptr(), nbytes);
  return Tensor(std::move(impl));
}

// One worker's batches, in the order it made them; an entry is a batch or the exception that
// replaced it.
struct Slot {
  std::optional<Batch> batch;
  std::exception_ptr error;
};

struct WorkerQueue {
  std::deque<Slot> slots;
  std::condition_variable changed;  // a slot was pushed or popped, or stop was set
};

}  // namespace

struct DataLoader::Impl {
  std::shared_ptr<const Dataset> dataset;
  DataLoaderOptions options;
  std::shared_ptr<const Sampler> sampler;
  Stream copy_stream;     // CUDA devices: host-to-device copies (see the top of the file)
  Stream compute_stream;  // the caller's current stream at start_epoch: where batches are used

  int64_t epoch = 0;
  std::vector<int64_t> order;  // the sampler's indices of this epoch
  bool started = false;
  int64_t first_batch = 0;  // of this epoch: written before the workers start, then only read
  int64_t next_batch = 0;
  std::exception_ptr failed;  // the exception next() rethrows until start_epoch

  std::mutex mutex;  // guards every WorkerQueue and `stop`
  bool stop = false;
  std::vector<WorkerQueue> queues;
  std::vector<std::thread> workers;

  int64_t num_batches() const {
    int64_t n = int64_t(order.size()), b = options.batch_size;
    return options.drop_last ? n / b : (n + b - 1) / b;
  }

  Batch assemble(int64_t k) const {
    auto first = order.begin() + std::ptrdiff_t(k * options.batch_size);
    auto last = order.begin() + std::ptrdiff_t(std::min<int64_t>((k + 1) * options.batch_size, int64_t(order.size())));
    Batch batch;
    batch.indices.assign(first, last);
    Example e = dataset->get_batch(batch.indices);
    Tensor inputs = e.input;
    if (options.normalize) inputs = (*options.normalize)(inputs);
    if (options.flip) inputs = (*options.flip)(inputs, batch.indices, epoch);
    Tensor targets = e.target;
    if (options.pin_memory) {
      inputs = pinned_copy(inputs);
      targets = pinned_copy(targets);
    }
    if (!options.device.is_cuda()) {
      batch.inputs = inputs.to(options.device);
      batch.targets = targets.to(options.device);
      return batch;
    }
    // The steps of the CUDA copy are numbered at the top of the file.
    const Stream& compute = compute_stream;
    {
      StreamGuard on_compute_stream(compute);                                            // 1.
      batch.inputs = Tensor::empty(inputs.shape(), {inputs.dtype(), options.device});
      batch.targets = Tensor::empty(targets.shape(), {targets.dtype(), options.device});
    }
    Event blocks_free(options.device);                                                   // 2.
    blocks_free.record(compute);
    blocks_free.wait(copy_stream);
    {
      StreamGuard on_copy_stream(copy_stream);
      const bool non_blocking = options.pin_memory;
      try {
        if (inputs.numel() > 0) kernels::copy_across_devices(inputs.contiguous(), batch.inputs, non_blocking);
        if (targets.numel() > 0) kernels::copy_across_devices(targets.contiguous(), batch.targets, non_blocking);
      } catch (...) {
        // The first copy may still be queued, reading a pinned block that unwinding is about to
        // hand back to its cache: wait for it. The error to report is the one in flight.
        try {
          copy_stream.synchronize();
        } catch (...) {
        }
        throw;
      }
    }
    Event copied(options.device);                                                        // 3.
    copied.record(copy_stream);
    copied.wait(compute);
    if (options.pin_memory) copied.synchronize();                                        // 4.
    return batch;
  }

  Slot assemble_slot(int64_t k) const {
    Slot slot;
    try {
      slot.batch = assemble(k);
    } catch (...) {
      slot.error = std::current_exception();
    }
    return slot;
  }

  void work(size_t w) {
    const int64_t stride = int64_t(queues.size());
    const int64_t first = first_batch + ((int64_t(w) - first_batch) % stride + stride) % stride;  // = w mod stride
    for (int64_t k = first; k < num_batches(); k += stride) {
      Slot slot = assemble_slot(k);
      std::unique_lock<std::mutex> lock(mutex);
      WorkerQueue& q = queues[w];
      q.changed.wait(lock, [&] { return stop || int64_t(q.slots.size()) < options.prefetch; });
      if (stop) return;
      bool failed_here = slot.error != nullptr;
      q.slots.push_back(std::move(slot));
      q.changed.notify_all();
      if (failed_here) return;
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
      for (WorkerQueue& q : queues) q.changed.notify_all();
    }
    for (std::thread& t : workers) t.join();
    workers.clear();
    queues.clear();
    stop = false;
  }

  void start(int64_t e, int64_t first) {
    stop_workers();
    started = false;  // stays false if the sampler or the check throws
    epoch = e;
    if (options.device.is_cuda()) compute_stream = current_stream(options.device);
    order = sampler->indices(e);
    MG_CHECK(first >= 0 && first <= num_batches(), "DataLoader::start_epoch: first batch ", first,
             " is outside the epoch's ", num_batches(), " batches");
    started = true;
    first_batch = next_batch = first;
    failed = nullptr;
    if (options.num_workers == 0) return;
    queues = std::vector<WorkerQueue>(size_t(options.num_workers));
    for (size_t w = 0; w < queues.size(); ++w) workers.emplace_back([this, w] { work(w); });
  }

  // Batch k from its worker's queue, waiting until the worker has made it.
  Slot take(int64_t k) {
    std::unique_lock<std::mutex> lock(mutex);
    WorkerQueue& q = queues[size_t(k) % queues.size()];
    q.changed.wait(lock, [&] { return !q.slots.empty(); });
    Slot slot = std::move(q.slots.front());
    q.slots.pop_front();
    q.changed.notify_all();
    return slot;
  }

  std::optional<Batch> next() {
    MG_CHECK(started, "DataLoader::next: no epoch started (call start_epoch first)");
    if (failed) std::rethrow_exception(failed);
    if (next_batch >= num_batches()) return std::nullopt;
    int64_t k = next_batch++;
    Slot slot = workers.empty() ? assemble_slot(k) : take(k);
    if (slot.error) {
      failed = slot.error;
      std::rethrow_exception(failed);
    }
    return std::move(slot.batch);
  }
};

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options,
                       std::shared_ptr<const Sampler> sampler)
    : impl_(std::make_unique<Impl>()) {
  MG_CHECK(dataset != nullptr, "DataLoader: dataset is null");
  MG_CHECK(options.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", options.batch_size);
  MG_CHECK(options.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options.num_workers);
  MG_CHECK(options.prefetch >= 1, "DataLoader: prefetch must be >= 1, got ", options.prefetch);
  check_device_exists(options.device);
  if (options.device.is_cuda()) impl_->copy_stream = Stream::create(options.device);
  if (!sampler) {
    int64_t n = dataset->size();
    if (options.shuffle)
      sampler = std::make_shared<RandomSampler>(n, options.seed);
    else
      sampler = std::make_shared<SequentialSampler>(n);
  }
  impl_->dataset = std::move(dataset);
  impl_->options = options;
  impl_->sampler = std::move(sampler);
  // The sizes num_batches() and num_examples() report before the first start_epoch.
  impl_->order = impl_->sampler->indices(0);
}

DataLoader::~DataLoader() { impl_->stop_workers(); }

void DataLoader::start_epoch(int64_t epoch, int64_t first_batch) { impl_->start(epoch, first_batch); }

std::optional<Batch> DataLoader::next() { return impl_->next(); }

int64_t DataLoader::num_batches() const { return impl_->num_batches(); }

int64_t DataLoader::num_examples() const { return int64_t(impl_->order.size()); }

}  // namespace mg::data
