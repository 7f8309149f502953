// The loader (see loader.h for the sampling contract). A "task" is one micro-batch of this
// rank; task t of an epoch is produced by worker t % workers, each worker running at most
// `prefetch` tasks ahead of the consumer, and the consumer takes tasks strictly in order,
// so the output order never depends on timing. With workers = 0 tasks are produced inline.
// In device-resident mode the set is copied to the device once and every batch is gathered
// and augmented there (device_augment.h), inline.
#include "data/loader.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "data/device_augment.h"
#include "data/sampler.h"
#include "data/transforms.h"

namespace dlrun::data {

struct Loader::Impl {
  std::shared_ptr<Dataset> ds;
  DataOptions opts;
  LoaderSpec spec;
  Pipeline pipeline;
  SamplerGeometry geo;
  bool pin = false;
  bool encoded = false;  // image files, decoded here knowing each sample's crop
  bool skip_bad = false;  // data.on_bad_sample: skip
  static constexpr int64_t kSubstituteTries = 64;
  mutable std::set<int64_t> warned;  // an evaluation's bad samples already named (log_mu)

  // DLRUN_SAMPLE_LOG=PATH (a test flag): every sample this rank produces, as a line of
  // PATH.rank<r>: epoch, position in the epoch's order, dataset index, label and the SHA-256
  // of its transformed pixels -- what the resume tests compare across world sizes.
  std::FILE* sample_log = nullptr;
  mutable std::mutex log_mu;

  mutable std::mutex pool_mu;
  mutable std::vector<torch::Tensor> pool;  // host_batch()
  size_t pool_cap = 0;

  // Device-resident copies: (N, C, H, W) uint8 and (N) int64 on spec.device.
  torch::Tensor dev_images, dev_labels;

  // The current epoch.
  bool started = false;
  Position pos;  // what next() has handed out (Loader::position)
  int64_t epoch = 0, first_step = 0, ntasks = 0, next_task = 0;
  std::shared_ptr<const std::vector<int64_t>> perm;

  // Workers.
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, Result> ready;
  int64_t consumed = 0;  // tasks handed out by next()
  bool stop = false;

  // Repeated augmentation (data.repeated_aug): the epoch's order holds sample ids, id = index +
  // repeat x N, so that each copy of a sample draws its own augmentation (keyed by the id; the id
  // of a sample's first copy is its index: without repeats nothing changes).
  int64_t reps = 1;
  int64_t item(int64_t id) const { return id % geo.n; }

  /// The sample ids of task t, in order.
  std::vector<int64_t> task_indices(int64_t t, int64_t* step, int* micro) const {
    int64_t begin = 0, end = 0;
    geo.task(first_step, t, &begin, &end, step, micro);
    std::vector<int64_t> idx;
    const int64_t pitch = geo.pitch();
    idx.reserve(static_cast<size_t>((end - begin + pitch - 1) / pitch));
    for (int64_t i = begin; i < end; i += pitch) idx.push_back((*perm)[static_cast<size_t>(i)]);
    return idx;
  }

  /// Task t on the CPU: decode + transform each sample into a (pinned) host batch.
  Batch produce_cpu(int64_t t) const {
    Batch out;
    std::vector<int64_t> idx = task_indices(t, &out.step_in_epoch, &out.micro);
    const int64_t n = static_cast<int64_t>(idx.size()), c = pipeline.channels;
    const int64_t plane = c * pipeline.out_h * pipeline.out_w;
    auto fopt = torch::TensorOptions().dtype(torch::kFloat).pinned_memory(pin);
    out.x = pin ? torch::empty({n, c, pipeline.out_h, pipeline.out_w}, fopt)  // (b, C, H, W)
                : host_batch({n, c, pipeline.out_h, pipeline.out_w});
    out.y = torch::empty({n}, fopt.dtype(torch::kLong));                 // (b)
    float* xp = out.x.data_ptr<float>();
    int64_t* yp = out.y.data_ptr<int64_t>();
    int64_t begin = 0, end = 0, step = 0;
    int micro = 0;
    geo.task(first_step, t, &begin, &end, &step, &micro);
    for (int64_t i = 0; i < n; ++i) {
      int64_t id = idx[static_cast<size_t>(i)];
      const int64_t position = begin + i * geo.pitch();
      float* dst = xp + i * plane;
      try {
        yp[i] = produce_one(id, dst);
      } catch (const Error& e) {
        if (!skip_bad || e.code() != ExitCode::kBadInput) throw;
        out.bad.push_back({item(id), e.message()});
        if (spec.train) {
          id = substitute(position, e, dst, &yp[i]);
        } else {
          std::fill(dst, dst + plane, 0.0f);
          yp[i] = -1;
          warn_once(item(id), e.message());
        }
      }
      if (sample_log) log_sample(position, id, yp[i], dst, plane);
    }
    return out;
  }

  /// Sample id `id` (its dataset index item(id), its augmentation keyed by id) into out.
  int64_t produce_one(int64_t id, float* out) const {
    return encoded ? produce_encoded(id, out) : produce_decoded(id, out);
  }

  /// data.on_bad_sample: skip, training: the sample at `position` of the epoch's order failed
  /// with `first`; the next position whose sample decodes gives the image and label instead (a
  /// function of the data only, so workers, timing and resumes see the same). Returns its id.
  int64_t substitute(int64_t position, const Error& first, float* out, int64_t* label) const {
    const int64_t n = static_cast<int64_t>(perm->size());
    for (int64_t k = 1; k <= kSubstituteTries && k < n; ++k) {
      const int64_t id = (*perm)[static_cast<size_t>((position + k) % n)];
      try {
        *label = produce_one(id, out);
        return id;
      } catch (const Error& e) {
        if (e.code() != ExitCode::kBadInput) throw;  // (counted when its own position is read)
      }
    }
    fail_input("{}; and the {} samples after it in the epoch's order do not decode either "
               "(data.on_bad_sample: skip replaces a sample by the next one that does): the data is damaged beyond "
               "a few files; `dlrun data verify` lists them", first.message(), kSubstituteTries);
  }

  /// An evaluation's bad sample, named once per loader.
  void warn_once(int64_t index, const std::string& error) const {
    std::lock_guard<std::mutex> lock(log_mu);
    if (warned.insert(index).second)
      log::warn("evaluation: sample {} is left out (data.on_bad_sample: skip): {}", index, error);
  }

  /// A float batch of `sizes` in ordinary host memory, reused once nothing but this pool holds it:
  /// a batch of 224x224 images is tens of MB, which the C library maps fresh from the kernel and
  /// unmaps again for every batch, and the page faults of writing it cost ~10 % of a loader
  /// thread's time. (Pinned batches come from the CUDA host allocator, which caches them and
  /// waits for their copies: they are not pooled here.)
  torch::Tensor host_batch(std::vector<int64_t> sizes) const {
    std::lock_guard<std::mutex> lock(pool_mu);
    for (const torch::Tensor& t : pool)
      // Only the pool holds it: no other handle to the tensor, no view of its storage.
      if (t.sizes() == sizes && t.use_count() == 1 && t.storage().use_count() == 1) return t;
    torch::Tensor t = torch::empty(sizes, torch::kFloat);
    if (pool.size() < pool_cap) pool.push_back(t);
    return t;
  }

  void log_sample(int64_t position, int64_t id, int64_t label, const float* x, int64_t n) const {
    const std::string h = sha256_hex(x, static_cast<size_t>(n) * sizeof(float)).substr(0, 16);
    std::lock_guard<std::mutex> lock(log_mu);
    std::fprintf(sample_log, "%lld %lld %lld %lld %s\n", static_cast<long long>(epoch), static_cast<long long>(position),
                 static_cast<long long>(item(id)), static_cast<long long>(label), h.c_str());
    std::fflush(sample_log);
  }

  /// One image file, decoded knowing its crop (transforms.h transform_encoded).
  int64_t produce_encoded(int64_t id, float* out) const {
    EncodedSample es = ds->get_encoded(item(id));
    transform_encoded(es.bytes, es.name, pipeline, spec.seed, epoch, id, opts.jpeg_roi_decode, out);
    return es.label;
  }

  int64_t produce_decoded(int64_t id, float* out) const {
    const int64_t c = pipeline.channels, index = item(id);
    {
      auto [img, label] = ds->get(index);
      DLRUN_CHECK(img.dim() == 3 && img.size(0) == c && img.scalar_type() == torch::kUInt8, ExitCode::kRuntime,
                  "sample {} has shape {} (expected {} uint8 channels)", index, c10::str(img.sizes()), c);
      torch::Tensor src = img.contiguous();
      const int64_t h = src.size(1), w = src.size(2);
      SampleParams sp = draw_params(pipeline, spec.seed, epoch, id, h, w);
      apply_transforms(src.data_ptr<uint8_t>(), h, w, pipeline, sp, out);
      return label;
    }
  }

  /// Task t in device-resident mode: gather + augment on the device.
  Batch produce_resident(int64_t t) const {
    Batch out;
    std::vector<int64_t> ids = task_indices(t, &out.step_in_epoch, &out.micro);
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int64_t> idx;
    idx.reserve(ids.size());
    for (int64_t id : ids) idx.push_back(item(id));
    torch::Tensor it = to_device_async(torch::from_blob(idx.data(), {n}, torch::kLong), spec.device);
    std::vector<SampleParams> params;
    params.reserve(ids.size());
    for (int64_t id : ids)
      params.push_back(draw_params(pipeline, spec.seed, epoch, id, dev_images.size(2), dev_images.size(3)));
    out.x = augment_batch(dev_images.index_select(0, it), pipeline, params);
    out.y = dev_labels.index_select(0, it);
    return out;
  }

  void worker_loop(int w, int nworkers, int64_t prefetch) {
    for (int64_t t = w; t < ntasks; t += nworkers) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || t < consumed + nworkers * prefetch; });
        if (stop) return;
      }
      Result r;
      try {
        r.batch = produce_cpu(t);
      } catch (...) {
        r.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        ready.emplace(t, std::move(r));
      }
      cv.notify_all();
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    for (auto& th : threads) th.join();
    threads.clear();
    ready.clear();
    stop = false;
  }
};

Loader::Loader(std::shared_ptr<Dataset> dataset, const DataOptions& opts, const LoaderSpec& spec)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.ds = std::move(dataset);
  m.opts = opts;
  m.spec = spec;
  DatasetInfo info = m.ds->info();
  m.pipeline = make_pipeline(opts, info, spec.train);
  m.geo.n = m.ds->size();
  m.geo.world = spec.world_size;
  m.geo.rank = spec.rank;
  m.geo.train = spec.train;
  m.geo.accum = spec.train ? spec.grad_accum : 1;
  m.geo.batch = spec.train ? opts.batch_size : opts.eval_batch_size;
  m.reps = spec.train ? std::max<int64_t>(1, opts.repeated_aug) : 1;
  m.geo.interleave = m.reps > 1;
  DLRUN_CHECK(spec.world_size >= 1 && spec.rank >= 0 && spec.rank < spec.world_size && m.geo.accum >= 1,
              ExitCode::kRuntime, "loader: bad rank {} / world size {} / grad_accum {}", spec.rank, spec.world_size,
              m.geo.accum);
  if (spec.train) {
    const int64_t split = spec.world_size * m.geo.accum;
    DLRUN_CHECK_INPUT(opts.batch_size > 0 && opts.batch_size % split == 0,
                      "data.batch_size {} is not divisible by world size {} x train.grad_accum {}", opts.batch_size,
                      spec.world_size, m.geo.accum);
    DLRUN_CHECK_INPUT(m.geo.n >= opts.batch_size, "data.batch_size {} is larger than the training set ({} samples)",
                      opts.batch_size, m.geo.n);
  } else {
    DLRUN_CHECK_INPUT(opts.eval_batch_size > 0, "data.eval_batch_size must be > 0");
  }
  m.pin = spec.device.is_cuda() && opts.pin_memory;
  m.encoded = m.ds->encoded();
  m.skip_bad = opts.on_bad_sample == BadSamplePolicy::kSkip;
  // The batches in flight: every worker's prefetched ones, the one being consumed, and one held
  // by the step that ran before it.
  m.pool_cap = static_cast<size_t>(std::max<int64_t>(1, opts.workers) * std::max<int64_t>(1, opts.prefetch) + 2);
  if (const std::string p = env("DLRUN_SAMPLE_LOG"); !p.empty() && spec.train) {
    const std::string path = fmt::format("{}.rank{}", p, spec.rank);
    m.sample_log = std::fopen(path.c_str(), "a");
    DLRUN_CHECK(m.sample_log != nullptr, ExitCode::kRuntime, "DLRUN_SAMPLE_LOG: cannot open {}", path);
  }
  if (opts.device_resident) {
    auto [images, labels] = m.ds->all();
    DLRUN_CHECK_INPUT(images.defined() && labels.defined(),
                      "data.device_resident needs a dataset held in memory; data.name={} is read from files",
                      opts.name);
    m.dev_images = images.to(spec.device);
    m.dev_labels = labels.to(spec.device);
    log0::info("data: {} {} samples resident on {} ({:.1f} MiB)", spec.train ? "train" : "eval", m.geo.n,
               spec.device.str(), images.numel() / 1048576.0);
  }
}

Loader::~Loader() {
  impl_->stop_workers();
  if (impl_->sample_log) std::fclose(impl_->sample_log);
}

int64_t Loader::steps_per_epoch() const { return impl_->geo.steps(); }

void Loader::seek(Position p) {
  Impl& m = *impl_;
  m.stop_workers();
  const int64_t steps = m.geo.steps();
  DLRUN_CHECK_INPUT(p.cursor >= 0 && p.cursor % m.geo.batch == 0 && p.cursor / m.geo.batch <= steps,
                    "data cursor {} is not a multiple of the global batch {} within the epoch ({} steps)", p.cursor,
                    m.geo.batch, steps);
  m.pos = p;
  m.started = false;
}

Position Loader::position() const { return impl_->pos; }

bool Loader::epoch_consumed() const { return impl_->pos.cursor >= impl_->geo.steps() * impl_->geo.batch; }

void Loader::start_epoch(int64_t epoch, int64_t cursor) {
  Impl& m = *impl_;
  seek({epoch, cursor});
  m.epoch = epoch;
  m.first_step = cursor / m.geo.batch;
  std::vector<int64_t> order = m.ds->epoch_order(m.spec.seed, epoch, m.spec.train && m.opts.shuffle);
  if (m.reps > 1) {  // each sample reps times in a row, as sample ids; cut to the set's length
    std::vector<int64_t> repeated(order.size());
    for (size_t k = 0; k < repeated.size(); ++k)
      repeated[k] = order[k / static_cast<size_t>(m.reps)] + static_cast<int64_t>(k % static_cast<size_t>(m.reps)) * m.geo.n;
    order = std::move(repeated);
  }
  m.perm = std::make_shared<const std::vector<int64_t>>(std::move(order));
  m.ntasks = m.geo.tasks(m.first_step);
  m.next_task = 0;
  m.consumed = 0;
  m.started = true;
  const int nworkers = m.opts.device_resident ? 0 : static_cast<int>(std::min<int64_t>(m.opts.workers, m.ntasks));
  const int64_t prefetch = std::max<int64_t>(1, m.opts.prefetch);
  for (int w = 0; w < nworkers; ++w) m.threads.emplace_back([&m, w, nworkers, prefetch] { m.worker_loop(w, nworkers, prefetch); });
}

std::optional<Batch> Loader::next() {
  Impl& m = *impl_;
  if (!m.started) start_epoch(m.pos.epoch, m.pos.cursor);
  if (m.next_task >= m.ntasks) return std::nullopt;
  const int64_t t = m.next_task++;
  Batch b;
  if (m.opts.device_resident) {
    b = m.produce_resident(t);
  } else if (m.threads.empty()) {
    b = m.produce_cpu(t);
  } else {
    Impl::Result r;
    {
      std::unique_lock<std::mutex> lock(m.mu);
      m.cv.wait(lock, [&] { return m.ready.count(t) > 0; });
      auto it = m.ready.find(t);
      r = std::move(it->second);
      m.ready.erase(it);
      m.consumed = t + 1;
    }
    m.cv.notify_all();
    if (r.error) std::rethrow_exception(r.error);
    b = std::move(r.batch);
  }
  if (!b.x.device().is_cuda() && m.spec.device.is_cuda()) {
    b.x = b.x.to(m.spec.device, /*non_blocking=*/m.pin);
    b.y = b.y.to(m.spec.device, /*non_blocking=*/m.pin);
  }
  if (b.micro == m.geo.accum - 1) m.pos.cursor = (b.step_in_epoch + 1) * m.geo.batch;  // a whole step handed out
  return b;
}

bool each_batch(Loader& loader, const std::function<bool()>& stop,
                const std::function<void(const Batch&)>& fn) {
  loader.start_epoch(0, 0);
  while (true) {
    if (stop && stop()) return false;
    const std::optional<Batch> b = loader.next();
    if (!b) return true;
    fn(*b);
  }
}

}  // namespace dlrun::data
