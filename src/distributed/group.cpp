// The c10d process group behind dist::Group (see group.h): rendezvous, the backends and the
// collectives. This is the one translation unit that includes the backends' headers:
// ProcessGroupGloo needs gloo's headers (Debian's libgloo-dev; the compiled gloo is the copy inside
// libtorch_cpu, never Debian's library) and ProcessGroupNCCL needs USE_C10D_NCCL and nccl.h.
#include "distributed/group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/utils/tensor_flatten.h>
#include <c10/util/Logging.h>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <arpa/inet.h>
#include <cstdlib>
#include <fmt/ranges.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
#include "distributed/deadline.h"
#include "distributed/group_impl.h"
#include "distributed/rendezvous.h"
#include "preempt/preempt.h"
#include "world/listen.h"

namespace dlrun::dist {

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

/// A collective of `g`, issued: a PeerLost when a peer is known lost, the group's failure when
/// issuing it throws.
template <typename F>
c10::intrusive_ptr<c10d::Work> issue(Group::Impl& g, const char* what, const F& start) {
  if (g.lost) throw PeerLost(fmt::format("{} was not started: a peer is lost: {}", what, g.loss_text()));
  try {
    return start();
  } catch (const std::exception& e) {
    g.fail(what, e);
  }
}

/// The address of this host on the route to `host`:`port` (the one the other hosts reach it
/// at, the rendezvous store's host included); "127.0.0.1" when it cannot be told.
std::string local_address_towards(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr)
    return "127.0.0.1";
  std::string out = "127.0.0.1";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t n = sizeof local;
  char text[INET_ADDRSTRLEN] = {0};
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&  // (UDP: no packet is sent)
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &n) == 0 &&
      ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text) != nullptr)
    out = text;
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return out;
}

/// The tensors of `c` by dtype, each group in its order (what one flat message holds).
std::vector<std::pair<at::ScalarType, std::vector<at::Tensor>>> by_dtype(const std::vector<at::Tensor>& c) {
  std::vector<std::pair<at::ScalarType, std::vector<at::Tensor>>> out;
  for (const auto& t : c) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == t.scalar_type(); });
    if (it == out.end()) it = out.insert(out.end(), {t.scalar_type(), {}});
    it->second.push_back(t);
  }
  return out;
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

namespace {

// c10d logs every failure of a store it talks to -- a peer gone, a connection refused -- as a
// warning carrying the C++ backtrace of the exception: 30 to 110 lines a time, several times a
// second while a store is gone. dlrun says what happened in one line of its own (the heartbeat,
// the rescue, the error that ends the run), so c10's own log shows its fatal messages only,
// unless TORCH_CPP_LOG_LEVEL says otherwise (the user's choice, as PyTorch reads it).
void quiet_c10d_logs() {
  const char* level = std::getenv("TORCH_CPP_LOG_LEVEL");
  if (level == nullptr || *level == '\0') FLAGS_caffe2_log_level = 3;  // (0 info, 1 warning, 2 error, 3 fatal)
}

}  // namespace

std::unique_ptr<Group> Group::connect(const World& world, const DistOptions& opts, const torch::Device& device) {
  quiet_c10d_logs();
  auto impl = std::make_unique<Impl>();
  impl->world = world;
  impl->timeout = std::chrono::milliseconds(static_cast<int64_t>(opts.timeout_s * 1000));
  impl->peer_timeout_s = opts.peer_timeout_s;
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
                                          brief(e))
                            : fmt::format("rank {} could not reach the rendezvous store at {}:{} within "
                                          "dist.timeout_s={} s: {}",
                                          world.rank, world.master_addr, world.master_port, opts.timeout_s, brief(e)),
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
                 world.master_addr, world.master_port, brief(e));
  }
  // Under the run id as well: keys of two jobs never mix, even in a store they both reach.
  const std::string prefix =
      fmt::format("dlrun/{}/{}/", world.run_id.empty() ? "none" : world.run_id, world.restart_count);
  impl->store = c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
  impl->prefix = prefix;
  await_ranks(*impl->store, world, opts.timeout_s);
  if (impl->peer_timeout_s > 0 && world.size > 1) {  // where the survivors would meet without the store
    impl->store->set(fmt::format("addr/{}", world.rank), local_address_towards(world.master_addr, world.master_port));
    std::vector<int> hosts{1};
    for (int r = world.local_size; r < world.size; r += world.local_size)
      if (r != 1) hosts.push_back(r);
    for (int r : hosts) {
      const auto v = impl->store->get(fmt::format("addr/{}", r));
      impl->rescue_hosts.emplace_back(r, std::string(v.begin(), v.end()));
    }
  }
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
    fail_runtime("opening the {} process group of {} ranks failed: {}", impl->backend, world.size, brief(e));
  }
  return std::unique_ptr<Group>(new Group(std::move(impl)));
}

Group::Group(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// Destroyed while an exception unwinds (a failure anywhere in training) or after a failure was
// recorded: abort; else a clean shutdown.
Group::~Group() {
  const bool abort = impl_->failed || std::uncaught_exceptions() > 0;
  if (!abort) {  // a clean exit: the watches of the others (dist.peer_timeout_s) do not take it for a loss
    try {  // (with a deadline: a frozen store must not hold the exit)
      within(std::max(2.0, impl_->peer_timeout_s), "the rendezvous store",
             [store = impl_->store, key = fmt::format("left/{}", impl_->world.rank)] { store->set(key, "1"); });
    } catch (...) {
    }
  }
  impl_->close(abort);
}

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
  std::vector<at::Tensor> v{c};
  c10d::AllreduceOptions o;
  o.reduceOp = reduce_op(op);
  impl_->wait(issue(*impl_, "an all-reduce", [&] { return impl_->pg->allreduce(v, o); }), "an all-reduce");
  if (!c.is_same(t)) t.copy_(c);
}

void Group::broadcast(std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  std::vector<torch::Tensor> c;
  c.reserve(tensors.size());
  for (const auto& t : tensors) c.push_back(impl_->on_backend(t.is_contiguous() ? t : t.contiguous()));
  // Coalesced as c10d::broadcast_coalesced does (one flat message per dtype and 256 MB), each
  // message waited for through the group's wait, which a lost peer ends.
  for (const auto& [dtype, group] : by_dtype(c)) {
    for (size_t first = 0; first < group.size();) {
      size_t last = first, bytes = 0;
      while (last < group.size() && (last == first || bytes + group[last].nbytes() <= (256u << 20)))
        bytes += group[last++].nbytes();
      std::vector<at::Tensor> part(group.begin() + first, group.begin() + last);
      std::vector<at::Tensor> flat{torch::utils::flatten_dense_tensors(part)};
      impl_->wait(issue(*impl_, "a broadcast from rank 0", [&] { return impl_->pg->broadcast(flat); }),
                  "a broadcast from rank 0");
      const auto back = torch::utils::unflatten_dense_tensors(flat[0], part);
      for (size_t i = 0; i < part.size(); ++i) part[i].copy_(back[i]);
      first = last;
    }
  }
  for (size_t i = 0; i < c.size(); ++i)
    if (!c[i].is_same(tensors[i])) tensors[i].copy_(c[i]);
}

std::vector<torch::Tensor> Group::all_gather(const torch::Tensor& t) {
  auto c = impl_->on_backend(t).contiguous();
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size(); ++r) out[0].push_back(torch::empty_like(c));
  std::vector<at::Tensor> in{c};
  impl_->wait(issue(*impl_, "an all-gather", [&] { return impl_->pg->allgather(out, in); }), "an all-gather");
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

std::optional<Loss> Group::lost() const {
  std::lock_guard<std::mutex> lock(impl_->loss_mu);
  return impl_->loss;
}

void Group::report_failure(const std::string& what) noexcept {
  impl_->failed = true;
  try {
    impl_->store->set("failed", fmt::format("rank {} failed: {}", rank(), what.substr(0, 2000)));
  } catch (...) {
  }
}

}  // namespace dlrun::dist
