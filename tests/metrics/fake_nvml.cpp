// A stand-in for the driver's libnvidia-ml.so.1, for tests/metrics/nvml_test.cpp: the NVML
// entry points dlrun's loader binds, answering for one GPU at PCI bus id 0000:3B:00.0 (index
// 0) with fixed readings. FAKE_NVML_NO_POWER=1: power reads "not supported" (NVML's 3), as on
// boards without a power sensor. FAKE_NVML_INIT_FAILS=1: nvmlInit fails (no driver loaded).
// FAKE_NVML_COUNT=N: nvmlDeviceGetCount reports N GPUs (default 1; only index 0 answers).
#include <cstdlib>
#include <cstring>

namespace {
int the_device;  // its address is the handle
bool env(const char* name) { return std::getenv(name) && std::strcmp(std::getenv(name), "1") == 0; }
struct Utilization {
  unsigned int gpu, memory;
};
struct Memory {
  unsigned long long total, free, used;
};
}  // namespace

extern "C" {
int nvmlInit_v2() { return env("FAKE_NVML_INIT_FAILS") ? 9 : 0; }  // 9: NVML_ERROR_DRIVER_NOT_LOADED
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int rc) { return rc == 9 ? "Driver Not Loaded" : rc == 6 ? "Not Found" : "Unknown Error"; }
int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** device) {
  if (std::strcmp(id, "0000:3B:00.0") != 0) return 6;  // NVML_ERROR_NOT_FOUND
  *device = &the_device;
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  *count = std::getenv("FAKE_NVML_COUNT") ? static_cast<unsigned>(std::atoi(std::getenv("FAKE_NVML_COUNT"))) : 1;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (index != 0) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &the_device;
  return 0;
}
int nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  if (device != &the_device) return 2;
  std::strncpy(name, "Fake GPU 80GB", length);
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  if (device != &the_device) return 2;
  *u = {87, 41};
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
  if (device != &the_device) return 2;
  m->total = 80ull << 30;
  m->used = 3ull << 29;  // 1.5 GiB
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* mw) {
  if (env("FAKE_NVML_NO_POWER")) return 3;  // NVML_ERROR_NOT_SUPPORTED
  *mw = 312500;
  return 0;
}
int nvmlDeviceGetTemperature(void* device, int sensor, unsigned int* c) {
  if (sensor != 0) return 2;
  *c = 64;
  return 0;
}
}
