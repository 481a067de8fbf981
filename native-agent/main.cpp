// quiver-agent: wires the pieces together; the commands live in cli.cpp and cmd_*.cpp.
#include "native-agent/cli.h"

int main(int argc, char** argv) { return quiver::run_cli(argc, argv); }
