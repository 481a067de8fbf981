// The entry point of native-agent's layer checks (native-agent/CMakeLists.txt): an executable
// that links one layer whole, to prove it needs nothing from the layers above it.
int main() { return 0; }
