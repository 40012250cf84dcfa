#pragma once
// For tests of what used to crash or hang: the case runs in a forked child process, so
// that a regression fails the calling test instead of killing the whole suite.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

namespace reel::test {

// Runs `body` in a forked child process, which ends when body returns (exit status 0),
// by an exception (status 3, its message on standard error) or by being killed after
// `seconds`. Returns how it ended: "exit 0", "exit 3", "signal 11 (Segmentation fault)",
// "signal 14 (Alarm clock)" for a timeout. body must not use doctest's checks (the
// child's results are not the parent's): it reports by exiting (or throwing).
inline std::string run_in_child(const std::function<void()>& body, int seconds = 60) {
  std::fflush(nullptr);  // (what the parent has buffered is not written twice)
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(fmt::format("run_in_child: fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    alarm(static_cast<unsigned>(seconds));  // SIGALRM's default action ends the child
    int status = 0;
    try {
      body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "run_in_child: %s\n", e.what());
      status = 3;
    }
    std::fflush(nullptr);
    _exit(status);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw std::runtime_error(fmt::format("run_in_child: waitpid failed: {}", std::strerror(errno)));
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("status {}", status);
}

}  // namespace reel::test
