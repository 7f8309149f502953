// The c10d process group and DDP's Reducer behind dist::Group and dist::GradSync (see
// group.h). This is the one translation unit that includes c10d's headers: ProcessGroupGloo
// needs gloo's headers (Debian's libgloo-dev; the compiled gloo is the copy inside
// libtorch_cpu, never Debian's library) and ProcessGroupNCCL needs USE_C10D_NCCL and nccl.h.
#include "distributed/group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "base/clock.h"
#include "base/env.h"
#include "base/error.h"
#include "base/log.h"
#include "distributed/heartbeat.h"
#include "distributed/rendezvous.h"
#include "preempt/preempt.h"
#include "world/listen.h"

namespace dlrun::dist {

struct Group::Impl {
  World world;
  std::string backend;
  std::string nccl_version;
  torch::Device device = torch::kCPU;  ///< where the backend's tensors live
  std::chrono::milliseconds timeout{0};
  c10::intrusive_ptr<c10d::Store> store;  ///< dlrun's keys, under "dlrun/<run id>/<restart>/"
  c10::intrusive_ptr<c10d::ProcessGroup> pg;

  [[noreturn]] void fail(const char* what, const std::exception& e) {
    failed = true;
    std::string who;
    try {  // a rank that failed on its own says so in the store (report_failure); a fresh
           // connection: the main one may be the one stuck until dist.timeout_s
      const auto s = connect_again(2.0);
      if (s->check({"failed"})) {
        const auto v = s->get("failed");
        who = std::string(v.begin(), v.end());
      }
    } catch (const std::exception&) {
      who = world.rank != 0 ? "rank 0, which hosts the rendezvous store, is gone" : "";
    }
    if (who.empty()) who = silent();  // a peer lost without a word: name it
    throw Error(ExitCode::kRuntime,
                fmt::format("{} across {} ranks failed{}: {}", what, world.size, who.empty() ? "" : " (" + who + ")",
                            e.what()),
                "another rank failed or was killed (its own error is above, or in its log); dist.timeout_s bounds "
                "how long a rank waits for the others");
  }

  bool cpu_collectives = false;  ///< a CPU backend is registered too (gloo; beside NCCL for host tensors)

  std::string prefix;  ///< the job's keys in the store
  std::unique_ptr<Heartbeat> heartbeat;  ///< from when every rank has arrived (heartbeat.h)

  c10::intrusive_ptr<c10d::Store> connect_again(double timeout_s) const {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(world.master_port);
    o.isServer = false;
    o.waitWorkers = false;
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    return c10::make_intrusive<c10d::PrefixStore>(prefix, c10::make_intrusive<c10d::TCPStore>(world.master_addr, o));
  }

  void start_heartbeat() {
    heartbeat = std::make_unique<Heartbeat>(world, [this](double timeout_s) { return connect_again(timeout_s); });
    heartbeat->start();
  }

  void stop_heartbeat() {
    if (heartbeat) heartbeat->stop();
  }

  ~Impl() { stop_heartbeat(); }  // also when connect() fails after the heartbeat started

  /// Set by a failed collective and by report_failure: the group is closed by abort().
  std::atomic<bool> failed{false};

  /// Close the process group however the process leaves: shutdown() after a clean run (as
  /// destroy_process_group: NCCL's communicators finalised, its watchdog stopped), abort() after
  /// a failure here or in a peer -- a shutdown would wait on a collective a dead peer left
  /// pending, and the exit would hang. (No-ops for gloo.)
  void close(bool abort) noexcept {
    stop_heartbeat();
    if (!pg) return;
    try {
      abort ? pg->abort() : pg->shutdown();
      log::info("distributed: {} process group {}", backend,
                abort ? "aborted (this rank or a peer failed)" : "shut down");
    } catch (const std::exception& e) {
      log::warn("distributed: closing the {} process group: {}", backend, e.what());
    }
    pg.reset();
  }

  /// Group::silent_ranks().
  std::string silent() const noexcept {
    if (heartbeat) return heartbeat->silent();
    return Heartbeat(world, [this](double timeout_s) { return connect_again(timeout_s); }).silent();
  }

  /// `t` on a device the group has a backend for: itself, or a copy on the default backend's.
  torch::Tensor on_backend(const torch::Tensor& t) const {
    return t.device() == device || (cpu_collectives && t.is_cpu()) ? t : t.to(device);
  }
};

namespace {

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

/// The gloo transport device: GLOO_SOCKET_IFNAME as in PyTorch; loopback when the job runs
/// on this host alone; otherwise the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> gloo_device(const World& w) {
  if (const std::string ifname = env("GLOO_SOCKET_IFNAME"); !ifname.empty())
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (is_loopback(w.master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10d::ReduceOp reduce_op(Reduce op) {
  switch (op) {
    case Reduce::kMax: return c10d::ReduceOp::MAX;
    case Reduce::kMin: return c10d::ReduceOp::MIN;
    case Reduce::kSum: break;
  }
  return c10d::ReduceOp::SUM;
}

}  // namespace

std::unique_ptr<Group> Group::connect(const World& world, const DistOptions& opts, const torch::Device& device) {
  auto impl = std::make_unique<Impl>();
  impl->world = world;
  impl->timeout = std::chrono::milliseconds(static_cast<int64_t>(opts.timeout_s * 1000));
  const bool nccl = device.is_cuda() && opts.backend != DistBackend::kGloo;
  DLRUN_CHECK_INPUT(!(opts.backend == DistBackend::kNccl && !device.is_cuda()),
                    "dist.backend=nccl needs run.device cuda (this rank trains on {}); use dist.backend: gloo or auto",
                    device.str());
  impl->backend = nccl ? "nccl" : "gloo";
  impl->device = nccl ? device : torch::Device(torch::kCPU);

  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(world.master_port);
  so.isServer = world.rank == 0 && !world.agent_store;
  so.waitWorkers = false;  // await_ranks waits, and names who is missing
  so.timeout = impl->timeout;
  c10::intrusive_ptr<c10d::TCPStore> tcp;
  try {
    if (so.isServer) {  // listen on MASTER_ADDR only, where possible (world/listen.h)
      const Listener l = bind_listener(world.master_addr, world.master_port);
      if (l.fd >= 0) {
        so.masterListenFd = l.fd;
        log::info("rendezvous store on {}:{}", l.address, world.master_port);
      } else {
        log::info("rendezvous store on every interface, port {}: {}", world.master_port, l.note);
      }
    }
    if (so.isServer) {
      tcp = c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
    } else {
      // Connect in attempts of at most a second, so that a stop request is seen while rank 0's
      // store is not up yet (rank 0 may have been stopped by the same request before hosting it).
      const double deadline = mono_now() + opts.timeout_s;
      for (;;) {
        so.timeout = std::chrono::milliseconds(
            std::max<int64_t>(50, std::min<int64_t>(1000, static_cast<int64_t>((deadline - mono_now()) * 1000))));
        try {
          tcp = c10::make_intrusive<c10d::TCPStore>(world.master_addr, so);
          break;
        } catch (const std::exception&) {
          if (preempt::stop_requested())
            throw StoppedDuringRendezvous(fmt::format("{} received while connecting to the rendezvous store at {}:{}",
                                                      preempt::stop_reason(), world.master_addr, world.master_port));
          if (mono_now() >= deadline) throw;
        }
      }
      tcp->setTimeout(impl->timeout);
    }
  } catch (const StoppedDuringRendezvous&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ExitCode::kRuntime,
                so.isServer ? fmt::format("rank 0 could not host the rendezvous store on port {}: {}", world.master_port,
                                          e.what())
                            : fmt::format("rank {} could not reach the rendezvous store at {}:{} within "
                                          "dist.timeout_s={} s: {}",
                                          world.rank, world.master_addr, world.master_port, opts.timeout_s, e.what()),
                so.isServer ? "another job may use this port: pick another with --master-port (MASTER_PORT), or "
                              "start a single-node job with scripts/dlrun-launch --standalone, which picks a free one"
                            : "rank 0 hosts the store: is it running, is MASTER_ADDR its address, and is the port open?");
  }
  try {
    check_job(*tcp, world, so.isServer, opts.timeout_s);
  } catch (const Error&) {
    throw;
  } catch (const StoppedDuringRendezvous&) {
    throw;
  } catch (const std::exception& e) {
    fail_runtime("rank {} lost the rendezvous store at {}:{} while checking that it is this job's: {}", world.rank,
                 world.master_addr, world.master_port, e.what());
  }
  // Under the run id as well: keys of two jobs never mix, even in a store they both reach.
  const std::string prefix =
      fmt::format("dlrun/{}/{}/", world.run_id.empty() ? "none" : world.run_id, world.restart_count);
  impl->store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
  impl->prefix = prefix;
  await_ranks(*impl->store, world, opts.timeout_s);
  impl->start_heartbeat();

  auto pg_store = c10::make_intrusive<c10d::PrefixStore>(prefix + "pg/", tcp);
  impl->pg = c10::make_intrusive<c10d::ProcessGroup>(pg_store, world.rank, world.size);
  try {
    if (nccl) {
#ifdef USE_C10D_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = impl->timeout;
      auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(pg_store, world.rank, world.size, o);
      // Bound to this rank's GPU, as init_process_group(device_id=...) binds it: the
      // communicator is made now, on that device (not lazily on whichever device is current at
      // the first collective), and a failure to make it is an error here, at start.
      impl->pg->setBoundDeviceId(device);
      backend->setBoundDeviceId(device);
      backend->eagerConnectSingleDevice(device);
      impl->pg->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      impl->pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, backend);
      impl->nccl_version = c10d::getNcclVersion();
      // Host tensors (the per-step stop agreement, metrics) through gloo, as PyTorch's
      // "cpu:gloo,cuda:nccl": through NCCL they would be copied to the GPU and back, and each
      // copy waits for the queued step, a host-device synchronisation every step.
      auto go = c10d::ProcessGroupGloo::Options::create(impl->timeout);
      go->devices.push_back(gloo_device(world));
      auto cpu_store = c10::make_intrusive<c10d::PrefixStore>(prefix + "pg-cpu/", tcp);
      auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(cpu_store, world.rank, world.size, go);
      impl->pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
      impl->cpu_collectives = true;
#else
      fail_input("dist.backend: this dlrun was built without NCCL (LibTorch without CUDA); use dist.backend: gloo");
#endif
    } else {
      auto o = c10d::ProcessGroupGloo::Options::create(impl->timeout);
      o->devices.push_back(gloo_device(world));
      auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(pg_store, world.rank, world.size, o);
      impl->pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
      impl->pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, backend);
      // gloo all-reduces CUDA tensors too (through host staging), as PyTorch's gloo backend
      // does for a model on a GPU: without this the Reducer's CUDA buckets have no backend.
      impl->pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, backend);
      impl->cpu_collectives = true;
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail_runtime("opening the {} process group of {} ranks failed: {}", impl->backend, world.size, e.what());
  }
  return std::unique_ptr<Group>(new Group(std::move(impl)));
}

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// Destroyed while an exception unwinds (a failure anywhere in training) or after a failure was
// recorded: abort; else a clean shutdown.
Group::~Group() { impl_->close(impl_->failed || std::uncaught_exceptions() > 0); }

std::string Group::silent_ranks() noexcept { return impl_->silent(); }

int Group::rank() const { return impl_->world.rank; }
int Group::size() const { return impl_->world.size; }
const World& Group::world() const { return impl_->world; }
const std::string& Group::backend() const { return impl_->backend; }

std::string Group::describe() const {
  const World& w = impl_->world;
  return fmt::format("distributed: {}{}, world size {} ({} node(s) x {} process(es), launched by {}), rendezvous "
                     "{}:{}{}{}",
                     impl_->backend, impl_->nccl_version.empty() ? "" : " (NCCL " + impl_->nccl_version + ")", w.size,
                     w.nodes(), w.local_size, w.launcher, w.master_addr, w.master_port,
                     w.run_id.empty() ? "" : ", run id " + printable(w.run_id),
                     w.restart_count > 0 ? fmt::format(", restart {}", w.restart_count) : "");
}

void Group::all_reduce(torch::Tensor& t, Reduce op) {
  auto c = impl_->on_backend(t);
  try {
    std::vector<at::Tensor> v{c};
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op(op);
    impl_->pg->allreduce(v, o)->wait();
  } catch (const std::exception& e) {
    impl_->fail("an all-reduce", e);
  }
  if (!c.is_same(t)) t.copy_(c);
}

void Group::broadcast(std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> c;
  c.reserve(tensors.size());
  for (const auto& t : tensors) c.push_back(impl_->on_backend(t.is_contiguous() ? t : t.contiguous()));
  try {
    c10d::broadcast_coalesced(impl_->pg, c, 256u << 20, 0);
  } catch (const std::exception& e) {
    impl_->fail("a broadcast from rank 0", e);
  }
  for (size_t i = 0; i < c.size(); ++i)
    if (!c[i].is_same(tensors[i])) tensors[i].copy_(c[i]);
}

std::vector<torch::Tensor> Group::all_gather(const torch::Tensor& t) {
  auto c = impl_->on_backend(t).contiguous();
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size(); ++r) out[0].push_back(torch::empty_like(c));
  try {
    std::vector<at::Tensor> in{c};
    impl_->pg->allgather(out, in)->wait();
  } catch (const std::exception& e) {
    impl_->fail("an all-gather", e);
  }
  if (t.device() != c.device())
    for (auto& o : out[0]) o = o.to(t.device());
  return out[0];
}

bool Group::any(bool flag) {
  auto t = torch::full({1}, flag ? 1 : 0, torch::kInt32);
  all_reduce(t, Reduce::kMax);
  return t.item<int>() != 0;
}

std::string Group::share(const std::string& key, const std::string& text) {
  try {
    if (rank() == 0) {
      impl_->store->set("share/" + key, std::vector<uint8_t>(text.begin(), text.end()));
      return text;
    }
    const auto v = impl_->store->get("share/" + key);  // waits for rank 0, up to dist.timeout_s
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    impl_->fail(("sharing " + key + " from rank 0").c_str(), e);
  }
}

std::string Group::share_when_ready(const std::string& key, const std::string& text) {
  if (rank() == 0) return share(key, text);
  const std::string k = "share/" + key;
  const double until = mono_now() + std::max(3600.0, impl_->timeout.count() / 1000.0);
  try {
    int64_t beats = -1;
    double moved = mono_now(), looked = 0;
    while (!impl_->store->check({k})) {
      const double now = mono_now();
      if (now - looked >= Heartbeat::kBeatS) {  // rank 0's heartbeat: still there?
        const int64_t b = impl_->store->add("alive/0", 0);
        if (b != beats) moved = now;
        beats = b;
        looked = now;
      }
      if (now - moved > 3 * Heartbeat::kBeatS || now > until)
        throw std::runtime_error(now > until ? "gave up after an hour"
                                             : fmt::format("rank 0's heartbeat stopped {:.0f} s ago", now - moved));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const auto v = impl_->store->get(k);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    impl_->fail(("waiting for rank 0's " + key).c_str(), e);
  }
}

void Group::acknowledge(const std::string& key) noexcept {
  try {
    impl_->store->set(fmt::format("ack/{}/{}", key, rank()), "1");
  } catch (...) {
  }
}

std::vector<int> Group::await_acknowledged(const std::string& key, double seconds) noexcept {
  std::vector<int> missing;
  for (int r = 1; r < size(); ++r) missing.push_back(r);
  const double until = mono_now() + seconds;
  try {
    for (;;) {
      std::vector<int> still;
      for (int r : missing)
        if (!impl_->store->check({fmt::format("ack/{}/{}", key, r)})) still.push_back(r);
      missing = std::move(still);
      if (missing.empty() || mono_now() >= until) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (...) {
  }
  return missing;
}

void Group::report_failure(const std::string& what) noexcept {
  impl_->failed = true;
  try {
    impl_->store->set("failed", fmt::format("rank {} failed: {}", rank(), what.substr(0, 2000)));
  } catch (...) {
  }
}

// ---- gradient averaging ---------------------------------------------------------------

struct GradSync::State {
  Group* group = nullptr;
  std::shared_ptr<c10d::Reducer> reducer;
  size_t buckets = 0;
};

GradSync::GradSync(Group& group, std::vector<torch::Tensor> params, double bucket_mb)
    : state_(std::make_unique<State>()) {
  state_->group = &group;
  // Buckets as PyTorch DDP ends up with them once it has rebuilt them in gradient-ready
  // order after its first step: filled from the last parameter backwards (backward produces
  // the last layers' gradients first), the first bucket capped at 1 MiB so communication
  // starts early, the others at bucket_mb MiB. Bucket 0 is ready first and all-reduced first.
  const auto cap = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  const int64_t first = 1024 * 1024;
  const std::vector<bool> sparse(params.size(), false);
  std::vector<int64_t> backward_order;  // the original index of each tensor in `reversed`
  std::vector<torch::Tensor> reversed;
  for (size_t i = params.size(); i-- > 0;) {
    backward_order.push_back(static_cast<int64_t>(i));
    reversed.push_back(params[i]);
  }
  auto [indices, limits] = c10d::compute_bucket_assignment_by_size(
      reversed, {static_cast<size_t>(first), static_cast<size_t>(std::max<int64_t>(cap, 1))}, sparse, backward_order);
  std::vector<int64_t> limit_list(limits.begin(), limits.end());
  state_->buckets = indices.size();
  state_->reducer = std::make_shared<c10d::Reducer>(
      std::move(params), std::move(indices), group.impl_->pg, sparse, cap, /*find_unused_parameters=*/false,
      /*gradient_as_bucket_view=*/false, std::unordered_map<size_t, std::string>{}, first,
      /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false, std::move(limit_list));
}

GradSync::~GradSync() = default;

void GradSync::prepare(const torch::Tensor& loss) {
  // As DDP before each forward: after the first synchronised backward the Reducer re-buckets in
  // the order the gradients arrived (a collective: every rank reaches it at the same step). Until
  // it has, each backward appends every parameter to its record of that order, which would
  // grow by a few KB a step for the whole run.
  if (state_->reducer->rebuild_buckets())
    log0::info("dist: gradient buckets rebuilt in the order the first step's gradients arrived");
  state_->reducer->prepare_for_forward();
  state_->reducer->prepare_for_backward({loss});
}

size_t GradSync::buckets() const { return state_->buckets; }

torch::Tensor GradSync::any_rank(const torch::Tensor& flag) {
  auto t = flag.to(torch::kInt32);
  state_->group->all_reduce(t, Reduce::kMax);
  return t.gt(0);
}

void GradSync::average(const std::vector<torch::Tensor>& grads) {
  // One tensor at a time, in place: no copy of all the gradients at once, in a step that has
  // just run out of memory (a contiguous copy only for a tensor that is not).
  const double n = state_->group->size();
  for (const auto& g : grads) {
    torch::Tensor t = g.is_contiguous() ? g : g.contiguous();
    state_->group->all_reduce(t, Reduce::kSum);
    t.div_(n);
    if (!t.is_same(g)) g.copy_(t);
  }
}

}  // namespace dlrun::dist
