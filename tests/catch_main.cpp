// main() of the test programs, for Catch2 2 (which compiles its runner here) and 3 (whose runner
// is in the library find_package found).
#define CATCH_CONFIG_RUNNER
#include "catch.hpp"

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
