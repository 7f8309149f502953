// The job layout from torchrun, Slurm and Open MPI variables (src/world/world.h).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>

#include "base/error.h"
#include "world/listen.h"
#include "world/world.h"

using dlrun::dist::World;
using dlrun::dist::world_from_env;

namespace {

World from(const std::map<std::string, std::string>& vars) {
  return world_from_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("no launcher variables: one process", "[dist]") {
  const World w = from({});
  CHECK(w.size == 1);
  CHECK(w.rank == 0);
  CHECK_FALSE(w.distributed());
  CHECK(w.launcher == "none");
}

TEST_CASE("the launcher is named: dlrun-launch, torchrun, or the variables set by hand", "[dist]") {
  CHECK(from({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RUN_ID", "x"}, {"DLRUN_LAUNCHER_PID", "7"}}).launcher ==
        "dlrun-launch");
  CHECK(from({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"TORCHELASTIC_RUN_ID", "none"}}).launcher == "torchrun");
  CHECK(from({{"RANK", "0"}, {"WORLD_SIZE", "1"}}).launcher == "RANK/WORLD_SIZE variables");
}

TEST_CASE("torchrun's variables", "[dist]") {
  const World w = from({{"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"},
                        {"MASTER_ADDR", "10.0.0.7"}, {"MASTER_PORT", "29600"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                        {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  CHECK(w.launcher == "torchrun");
  CHECK(w.rank == 5);
  CHECK(w.local_rank == 1);
  CHECK(w.size == 8);
  CHECK(w.local_size == 4);
  CHECK(w.nodes() == 2);
  CHECK(w.master_addr == "10.0.0.7");
  CHECK(w.master_port == 29600);
  CHECK(w.restart_count == 2);
  CHECK(w.agent_store);
}

TEST_CASE("Slurm's variables, the master being the first host of the node list", "[dist]") {
  const World w = from({{"SLURM_PROCID", "9"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "16"},
                        {"SLURM_NTASKS_PER_NODE", "8(x2)"}, {"SLURM_JOB_NODELIST", "gpu[003-004,009],login1"}});
  CHECK(w.launcher == "slurm");
  CHECK(w.rank == 9);
  CHECK(w.local_rank == 1);
  CHECK(w.size == 16);
  CHECK(w.local_size == 8);
  CHECK(w.master_addr == "gpu003");
  CHECK(w.master_port == 29500);
  // MASTER_ADDR / MASTER_PORT win when set.
  const World v = from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a,b"},
                        {"MASTER_ADDR", "head"}, {"MASTER_PORT", "4000"}});
  CHECK(v.master_addr == "head");
  CHECK(v.master_port == 4000);
}

TEST_CASE("the run id: torchrun's --rdzv-id, Slurm's job and step, none otherwise", "[dist]") {
  const std::map<std::string, std::string> torchrun = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                                                       {"MASTER_PORT", "1"}};
  auto with = [](std::map<std::string, std::string> m, const char* k, const char* v) {
    m[k] = v;
    return m;
  };
  CHECK(from(with(torchrun, "TORCHELASTIC_RUN_ID", "3f9a0c1de2b4a5c6")).run_id == "3f9a0c1de2b4a5c6");
  CHECK(from(with(torchrun, "TORCHELASTIC_RUN_ID", "none")).run_id.empty());  // torchrun's default
  CHECK(from(torchrun).run_id.empty());
  const std::map<std::string, std::string> slurm = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                                                    {"SLURM_JOB_NODELIST", "a"}, {"SLURM_JOB_ID", "4242"}};
  CHECK(from(slurm).run_id == "slurm-4242");
  CHECK(from(with(slurm, "SLURM_STEP_ID", "3")).run_id == "slurm-4242.3");
  CHECK(from(with(with(slurm, "SLURM_STEP_ID", "3"), "SLURM_HET_JOB_ID", "4240")).run_id == "slurm-4240.3");
  CHECK(from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).run_id.empty());
}

TEST_CASE("first_host of Slurm node lists", "[dist]") {
  using dlrun::dist::first_host;
  CHECK(first_host("node1") == "node1");
  CHECK(first_host("node1,node2") == "node1");
  CHECK(first_host("gpu[03-05,09]") == "gpu03");
  CHECK(first_host("gpu[7,9]-ib,x") == "gpu7-ib");
}

TEST_CASE("Open MPI's variables need MASTER_ADDR", "[dist]") {
  const World w = from({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"MASTER_ADDR", "h0"}});
  CHECK(w.launcher == "openmpi");
  CHECK(w.rank == 3);
  CHECK(w.local_rank == 1);
  CHECK(w.local_size == 2);
  CHECK(w.master_addr == "h0");
  CHECK_THROWS_WITH(from({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
                    Catch::Contains("MASTER_ADDR is not set"));
}

TEST_CASE("bad launcher variables are exit 2 naming the variable", "[dist]") {
  auto code = [](const std::map<std::string, std::string>& vars) {
    try {
      from(vars);
    } catch (const dlrun::Error& e) {
      return static_cast<int>(e.code());
    }
    return 0;
  };
  CHECK_THROWS_WITH(from({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), Catch::Contains("RANK=x"));
  CHECK_THROWS_WITH(from({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}}),
                    Catch::Contains("RANK=2 is not below the world size 2"));
  CHECK_THROWS_WITH(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}}), Catch::Contains("MASTER_ADDR or MASTER_PORT"));
  CHECK_THROWS_WITH(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "70000"}}),
                    Catch::Contains("MASTER_PORT=70000"));
  CHECK(code({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}) == 2);
}

TEST_CASE("the rendezvous store listens on MASTER_ADDR only, where that is this host's", "[dist][listen]") {
  auto bound = [](const dlrun::dist::Listener& l) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    REQUIRE(::getsockname(l.fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0);
    char buf[INET6_ADDRSTRLEN] = {};
    const void* a = ss.ss_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr)
                                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr);
    ::inet_ntop(ss.ss_family, a, buf, sizeof(buf));
    return std::string(buf);
  };
  SECTION("the single-host default: loopback only, never every interface") {
    const auto l = dlrun::dist::bind_listener("127.0.0.1", 0);
    REQUIRE(l.fd >= 0);
    CHECK(bound(l) == "127.0.0.1");
    CHECK(l.address == "127.0.0.1");
    ::close(l.fd);
    const auto h = dlrun::dist::bind_listener("localhost", 0);
    REQUIRE(h.fd >= 0);
    CHECK((bound(h) == "127.0.0.1" || bound(h) == "::1"));
    ::close(h.fd);
  }
  SECTION("an address that is not this host's: every interface, and why") {
    const auto l = dlrun::dist::bind_listener("192.0.2.1", 0);  // TEST-NET-1: documentation only, never local
    CHECK(l.fd == -1);
    CHECK_THAT(l.note, Catch::Contains("not an address of this host"));
  }
  SECTION("a port in use is an error naming it") {
    const auto l = dlrun::dist::bind_listener("127.0.0.1", 0);
    REQUIRE(l.fd >= 0);
    sockaddr_in sa{};
    socklen_t len = sizeof(sa);
    ::getsockname(l.fd, reinterpret_cast<sockaddr*>(&sa), &len);
    const int port = ntohs(sa.sin_port);
    try {
      dlrun::dist::bind_listener("127.0.0.1", port);
      FAIL("no error for a port in use");
    } catch (const dlrun::Error& e) {
      CHECK_THAT(e.message(), Catch::Contains(std::to_string(port)) && Catch::Contains("in use"));
    }
    ::close(l.fd);
  }
}
