// The process group, DDP's gradient averaging and synchronised BatchNorm, with two ranks in
// one process: two threads, each with its own dist::Group over gloo on 127.0.0.1. Catch2
// assertions are not thread-safe, so the ranks return what they saw and the test thread
// checks it.
#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "distributed/group.h"
#include "support/capture.h"
#include "distributed/sync_bn.h"
#include "models/batchnorm.h"
#include "models/model.h"

namespace {

using dlrun::dist::Group;

// c10d's flight recorder, one per process, notes each group's first collective in a std::map
// before it takes its lock (torch 2.11, FlightRecorder::recordWithResetEnabled). Two groups in
// one process starting collectives at once corrupted that map: a rare SIGSEGV in std::map's
// insert under the sync BatchNorm and GradSync cases. A dlrun process holds one gloo group, so
// only these threads-as-ranks meet it; the recorder is off here, set before any group makes it.
const bool kFlightRecorderOff = setenv("TORCH_FR_BUFFER_SIZE", "0", 1) == 0;

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

dlrun::dist::World world(int rank, int size, int port) {
  dlrun::dist::World w;
  w.rank = w.local_rank = rank;
  w.size = w.local_size = size;
  w.master_port = port;
  w.launcher = "test";
  return w;
}

/// Run `f(group)` as each of `n` ranks, one thread each; returns their results in rank order.
template <typename R, typename F>
std::vector<R> on_ranks(int n, F f, double timeout_s = 60) {
  const int port = free_port();
  std::vector<R> out(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  // No rank closes its group while another may still be inside a collective: gloo returns
  // from an operation once this rank has what it needs, possibly with its own last send to a
  // peer still queued. Separate processes end that way too, but in one process a group torn
  // down under a peer's running all-reduce took the whole test binary down (a rare SIGSEGV in
  // CI). Every rank waits here for all others to finish before its group is destroyed.
  std::mutex m;
  std::condition_variable cv;
  int finished = 0;
  auto all_finished = [&] {
    std::unique_lock<std::mutex> lock(m);
    if (++finished == n) cv.notify_all();
    cv.wait(lock, [&] { return finished >= n; });
  };
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Group> g;
      try {
        dlrun::DistOptions o;
        o.timeout_s = timeout_s;
        g = Group::connect(world(r, n, port), o, torch::kCPU);
        out[r] = f(*g);
      } catch (...) {
        errors[r] = std::current_exception();
      }
      all_finished();
      g.reset();
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

torch::nn::Sequential small_net() {
  // The ranks build theirs at the same time: seeding and drawing from the global generator
  // must not interleave, or the ranks start from different weights.
  static std::mutex global_rng;
  std::lock_guard<std::mutex> lock(global_rng);
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(6, 16), torch::nn::Tanh(), torch::nn::Linear(16, 4));
}

std::vector<torch::Tensor> grads_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> g;
  for (auto& p : m.parameters()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace

TEST_CASE("collectives across two ranks", "[dist]") {
  struct Seen {
    double sum = 0, max = 0;
    bool any_one = false, any_none = true;
    std::vector<float> broadcast, gathered;
    std::string shared;
  };
  const auto seen = on_ranks<Seen>(2, [](Group& g) {
    Seen s;
    auto t = torch::full({3}, static_cast<double>(g.rank() + 1), torch::kFloat64);
    g.all_reduce(t);
    s.sum = t[0].item<double>();
    auto m = torch::full({1}, static_cast<float>(g.rank() * 7));
    g.all_reduce(m, dlrun::dist::Reduce::kMax);
    s.max = m.item<double>();
    s.any_one = g.any(g.rank() == 1);
    s.any_none = g.any(false);
    std::vector<torch::Tensor> b{torch::full({2}, static_cast<float>(10 + g.rank())), torch::full({1}, g.rank() + 0.5f)};
    g.broadcast(b);
    s.broadcast = {b[0][0].item<float>(), b[0][1].item<float>(), b[1][0].item<float>()};
    for (const auto& x : g.all_gather(torch::full({1}, static_cast<float>(100 + g.rank()))))
      s.gathered.push_back(x.item<float>());
    s.shared = g.share("greeting", g.rank() == 0 ? "from rank 0" : "ignored");
    return s;
  });
  for (const auto& s : seen) {
    CHECK(s.sum == 3.0);
    CHECK(s.max == 7.0);
    CHECK(s.any_one);
    CHECK_FALSE(s.any_none);
    CHECK(s.broadcast == std::vector<float>{10, 10, 0.5f});
    CHECK(s.gathered == std::vector<float>{100, 101});
    CHECK(s.shared == "from rank 0");
  }
}

TEST_CASE("GradSync: every rank ends with the gradient of the whole batch, also with accumulation", "[dist]") {
  torch::manual_seed(11);
  const auto x = torch::randn({8, 6});
  const auto y = torch::randint(0, 4, {8});
  auto loss_of = [](torch::nn::Sequential& net, const torch::Tensor& xs, const torch::Tensor& ys) {
    return torch::nn::functional::cross_entropy(net->forward(xs), ys);
  };
  auto reference = small_net();  // one process, the whole batch
  loss_of(reference, x, y).backward();
  const auto expected = grads_of(*reference);

  for (const int accum : {1, 2}) {
    const auto got = on_ranks<std::vector<torch::Tensor>>(2, [&](Group& g) {
      auto net = small_net();
      dlrun::dist::GradSync sync(g, net->parameters(), 25.0);
      // This rank's 4 samples, in `accum` micro-batches of the layout the data loader uses.
      const int64_t micro = 4 / accum;
      for (int m = 0; m < accum; ++m) {
        const int64_t at = (m * 2 + g.rank()) * micro;
        auto loss = loss_of(net, x.narrow(0, at, micro), y.narrow(0, at, micro)) / accum;
        if (m + 1 == accum) sync.prepare(loss);  // only the last micro-batch all-reduces
        loss.backward();
      }
      return grads_of(*net);
    });
    INFO("grad_accum " << accum);
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(torch::equal(got[0][i], got[1][i]));  // identical on every rank
      CHECK(torch::allclose(got[0][i], expected[i], 1e-5, 1e-6));
    }
  }
}

TEST_CASE("synchronised BatchNorm equals BatchNorm over the global batch, forward and backward", "[dist]") {
  torch::manual_seed(5);
  const auto x = torch::randn({6, 3, 4, 5}) * 3 + 1;
  const auto w_out = torch::randn({6, 3, 4, 5});  // loss = sum(y * w_out)
  auto make_bn = [] {
    dlrun::models::BatchNorm2d bn(3);
    torch::NoGradGuard no_grad;
    bn->weight.copy_(torch::tensor({0.5f, 1.5f, -1.0f}));
    bn->bias.copy_(torch::tensor({0.1f, 0.0f, 2.0f}));
    return bn;
  };
  auto ref = make_bn();
  auto xr = x.clone().requires_grad_(true);
  auto yr = ref->forward(xr);
  (yr * w_out).sum().backward();

  struct Seen {
    torch::Tensor y, dx, dw, db, running_mean, running_var;
  };
  const auto seen = on_ranks<Seen>(2, [&](Group& g) {
    auto bn = make_bn();
    REQUIRE(dlrun::models::set_batchnorm_sync(*bn, dlrun::dist::sync_batchnorm(g)) == 1);
    const int64_t n = g.rank() == 0 ? 2 : 4;  // unequal slices: the counts weigh the statistics
    const int64_t at = g.rank() == 0 ? 0 : 2;
    auto xs = x.narrow(0, at, n).clone().requires_grad_(true);
    auto ys = bn->forward(xs);
    (ys * w_out.narrow(0, at, n)).sum().backward();
    return Seen{ys.detach(), xs.grad(), bn->weight.grad(), bn->bias.grad(), bn->running_mean.clone(),
                bn->running_var.clone()};
  });
  CHECK(torch::allclose(torch::cat({seen[0].y, seen[1].y}), yr.detach(), 1e-5, 1e-5));
  CHECK(torch::allclose(torch::cat({seen[0].dx, seen[1].dx}), xr.grad(), 1e-4, 1e-5));
  // Weight and bias gradients are per rank; their sum is the whole batch's (DDP averages).
  CHECK(torch::allclose(seen[0].dw + seen[1].dw, ref->weight.grad(), 1e-4, 1e-5));
  CHECK(torch::allclose(seen[0].db + seen[1].db, ref->bias.grad(), 1e-4, 1e-5));
  for (const auto& s : seen) {
    CHECK(torch::allclose(s.running_mean, ref->running_mean, 1e-5, 1e-6));
    CHECK(torch::allclose(s.running_var, ref->running_var, 1e-5, 1e-6));
  }
}

TEST_CASE("the process group is shut down after a clean run and aborted after a failure", "[dist]") {
  // Two ranks per round, each on its own thread; the group is destroyed as a rank's scope ends.
  // round(how_rank0, how_rank1) says how each rank leaves: 0 returns, 1 throws (the group
  // destroyed while the exception unwinds), 2 records its failure (report_failure) and returns.
  auto round = [](int how_rank0, int how_rank1) {
    const int port = free_port();
    std::mutex m;
    std::condition_variable cv;
    int arrived = 0;
    return dlrun::testing::capture_stderr([&] {
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r)
        threads.emplace_back([&, r] {
          try {
            dlrun::DistOptions o;
            o.timeout_s = 30;
            auto g = Group::connect(world(r, 2, port), o, torch::kCPU);
            auto t = torch::ones({2});
            g->all_reduce(t);
            {  // both done with the collective before either group goes (see on_ranks)
              std::unique_lock<std::mutex> lock(m);
              if (++arrived == 2) cv.notify_all();
              cv.wait(lock, [&] { return arrived == 2; });
            }
            const int how = r == 0 ? how_rank0 : how_rank1;
            if (how == 1) throw std::runtime_error("this rank fails");
            if (how == 2) g->report_failure("this rank failed");
          } catch (const std::exception&) {
          }
        });
      for (auto& t : threads) t.join();
    });
  };
  auto count = [](const std::string& log, const std::string& what) {
    size_t n = 0;
    for (auto at = log.find(what); at != std::string::npos; at = log.find(what, at + 1)) ++n;
    return n;
  };
  const auto clean = round(0, 0);
  CHECK(count(clean, "gloo process group shut down") == 2);
  CHECK(count(clean, "aborted") == 0);
  const auto failed = round(2, 1);
  CHECK(count(failed, "gloo process group aborted (this rank or a peer failed)") == 2);
  CHECK(count(failed, "shut down") == 0);
}

TEST_CASE("a rank that never arrives is named within dist.timeout_s", "[dist]") {
  dlrun::DistOptions o;
  o.timeout_s = 1.5;
  const auto start = std::chrono::steady_clock::now();
  try {
    Group::connect(world(0, 3, free_port()), o, torch::kCPU);
    FAIL("connect returned without ranks 1 and 2");
  } catch (const dlrun::Error& e) {
    CHECK(e.code() == dlrun::ExitCode::kRuntime);
    CHECK_THAT(e.message(), Catch::Contains("rank(s) 1, 2 of 3 did not arrive within dist.timeout_s=1.5 s"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("resnet18 with synchronised BatchNorm and GradSync: one step's gradients equal one process's", "[dist]") {
  // In float64: in float32 this model's gradient at initialisation moves by up to a few percent
  // when the input moves by one rounding step (activations cross ReLU kinks), so float32
  // runs that differ only in rounding (another thread count, another world size) cannot be
  // compared tightly. In float64 the only differences left are rounding ones, ~1e-14.
  const int ranks = GENERATE(1, 2, 4);
  dlrun::ModelOptions mo;
  mo.name = "resnet18";
  mo.stem = dlrun::ResnetStem::kCifar;
  mo.in_channels = 1;
  mo.num_classes = 10;
  mo.dtype = dlrun::ModelDtype::kFloat64;
  torch::manual_seed(11);
  const auto x = torch::randn({32, 1, 16, 16});  // float32: forward() converts it
  const auto y = torch::randint(0, 10, {32});
  auto ref = dlrun::models::build(mo, 1, 16);
  ref->train();
  torch::nn::functional::cross_entropy(ref->forward(x), y).backward();
  std::vector<torch::Tensor> expected;
  for (auto& p : ref->parameters()) expected.push_back(p.grad().clone());
  const int64_t per_rank = 32 / ranks;
  const auto got = on_ranks<std::vector<torch::Tensor>>(ranks, [&](Group& g) {
    auto net = dlrun::models::build(mo, 1, 16);
    net->train();
    dlrun::models::set_batchnorm_sync(*net, dlrun::dist::sync_batchnorm(g));
    dlrun::dist::GradSync sync(g, net->parameters(), 25.0);
    auto loss = torch::nn::functional::cross_entropy(net->forward(x.narrow(0, g.rank() * per_rank, per_rank)),
                                                     y.narrow(0, g.rank() * per_rank, per_rank));
    sync.prepare(loss);
    loss.backward();
    std::vector<torch::Tensor> grads;
    for (auto& p : net->parameters()) grads.push_back(p.grad().clone());
    return grads;
  });
  INFO(ranks << " ranks");
  for (size_t i = 0; i < expected.size(); ++i) {
    REQUIRE(expected[i].scalar_type() == torch::kFloat64);
    for (int r = 1; r < ranks; ++r) CHECK(torch::equal(got[0][i], got[r][i]));
    const double scale = expected[i].abs().max().item<double>() + 1e-12;
    CHECK((got[0][i] - expected[i]).abs().max().item<double>() / scale < 1e-10);
  }
}

TEST_CASE("each family's smallest member under DDP (synchronised BatchNorm where it has BatchNorm): one step's "
          "gradients and running statistics equal one process's", "[dist]") {
  // Float64 as above; 2 ranks of 4 samples against one process of 8. Stochastic depth off (its
  // draws are per process by design); the transformers have no BatchNorm to synchronise, so
  // they check the gradient averaging over their parameters (layer scales, position
  // embeddings, Swin's bias tables, ViT's class token).
  const std::string name = GENERATE("mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny",
                                    "vit_b_32", "swin_t");
  dlrun::ModelOptions mo;
  mo.name = name;
  mo.in_channels = 3;
  mo.num_classes = 5;
  mo.image_size = 32;
  mo.stochastic_depth = 0;
  mo.dtype = dlrun::ModelDtype::kFloat64;
  torch::manual_seed(12);
  const auto x = torch::randn({8, 3, 32, 32});
  const auto y = torch::randint(0, 5, {8});
  auto ref = dlrun::models::build(mo, 1, 32);
  ref->train();
  torch::nn::functional::cross_entropy(ref->forward(x), y).backward();
  std::vector<torch::Tensor> expected;
  for (auto& p : ref->parameters()) expected.push_back(p.grad().clone());
  for (auto& b : ref->buffers())
    if (b.is_floating_point()) expected.push_back(b.clone());
  struct Seen {
    std::vector<torch::Tensor> tensors;
    int synced = 0;
  };
  const auto got = on_ranks<Seen>(2, [&](Group& g) {
    auto net = dlrun::models::build(mo, 1, 32);
    net->train();
    Seen s;
    s.synced = dlrun::models::set_batchnorm_sync(*net, dlrun::dist::sync_batchnorm(g));
    dlrun::dist::GradSync sync(g, net->parameters(), 25.0);
    auto loss = torch::nn::functional::cross_entropy(net->forward(x.narrow(0, g.rank() * 4, 4)),
                                                     y.narrow(0, g.rank() * 4, 4));
    sync.prepare(loss);
    loss.backward();
    for (auto& p : net->parameters()) s.tensors.push_back(p.grad().clone());
    for (auto& b : net->buffers())
      if (b.is_floating_point()) s.tensors.push_back(b.clone());
    return s;
  });
  INFO(name);
  const bool has_batchnorm = name.rfind("convnext", 0) != 0 && name.rfind("vit", 0) != 0 && name.rfind("swin", 0) != 0;
  CHECK((got[0].synced > 0) == has_batchnorm);
  REQUIRE(got[0].tensors.size() == expected.size());
  // A gradient that is zero in exact arithmetic is rounding noise on both sides (the bias of a
  // BatchNorm whose output reaches another BatchNorm through a linear conv: the second one's mean
  // removes it), so each tensor is compared relative to the larger of its own scale and a
  // thousandth of the largest gradient's.
  double largest = 0;
  for (size_t i = 0; i < expected.size(); ++i) largest = std::max(largest, expected[i].abs().max().item<double>());
  for (size_t i = 0; i < expected.size(); ++i) {
    INFO("tensor " << i << " of " << expected.size());
    CHECK(torch::equal(got[0].tensors[i], got[1].tensors[i]));
    const double scale = std::max(expected[i].abs().max().item<double>(), 1e-3 * largest);
    CHECK((got[0].tensors[i] - expected[i]).abs().max().item<double>() / scale < 1e-10);
  }
}
