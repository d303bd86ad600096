// SPDX-License-Identifier: MIT
#include "bench.h"
int cmd_micro(int argc, char **argv) { (void)argc; (void)argv; return 1; }
