/*
 * sluice-pause: the sandbox ("pause") process for the local test cluster.
 *
 * It holds a pod's namespaces open, exits cleanly on SIGINT/SIGTERM and, as
 * PID 1 of a pod that shares its PID namespace, reaps orphaned children.
 * Built as a static binary by hack/build-images.sh; written for this project.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-v") == 0) {
    puts("sluice-pause 3.10");
    return 0;
  }
  if (getpid() != 1) {
    fprintf(stderr, "sluice-pause: warning: not running as PID 1\n");
  }
  struct sigaction term = {0};
  term.sa_handler = on_term;
  sigemptyset(&term.sa_mask);
  if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0) {
    perror("sluice-pause: sigaction");
    return 1;
  }
  struct sigaction child = {0};
  child.sa_handler = on_child;
  sigemptyset(&child.sa_mask);
  child.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("sluice-pause: sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
