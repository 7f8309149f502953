// dlrun executable: everything lives in the dlrun_core library so tests can link it.
#include "cli/app.h"

int main(int argc, char** argv) { return dlrun::cli::main(argc, argv); }
