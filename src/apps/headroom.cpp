// The `headroom` command.
#include <cstdio>

int main() {
  std::puts("headroom: no commands yet");
  return 0;
}
