// quiver-agent: wires the pieces together. Nothing else lives here.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
    std::puts("usage: quiver-agent <command>\n\ncommands will appear here as they land.");
    return argc < 2 ? 2 : 0;
  }
  std::fprintf(stderr, "quiver-agent: unknown command '%s'\n", argv[1]);
  return 2;
}
