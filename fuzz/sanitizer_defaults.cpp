// Default sanitizer options of the hardening build's test executables, compiled into them so
// that every way of starting them (ctest, Catch2's test discovery at build time, by hand) gets
// the same: no leak report at exit (LibTorch's uninstrumented one-time allocations would be
// reported; the torch-free fuzz targets keep leak checking), stop at the first error, and
// an allocation too large for memory throws std::bad_alloc as it does without ASan (a damaged
// tensor file can make LibTorch's unpickler ask for 30 GB; dlrun reports that as bad input).
extern "C" const char* __asan_default_options() { return "detect_leaks=0:halt_on_error=1:allocator_may_return_null=1"; }
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }
