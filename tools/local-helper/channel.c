// `sbx-helper channel DIR`: the process behind the replica's one long-lived exec into a pod.
// It makes sure the pod's daemon runs (starting it under a lock, so two channels opened at
// once start one daemon), sends a hello frame, then relays bytes between its stdin/stdout (the
// exec stream) and the daemon's unix socket until either side ends. It holds no state: the
// commands belong to the daemon, so this process dying (or the exec stream breaking) ends no
// command, and a new channel can list and re-attach them.
//
// Runs as whatever user the exec runs as (the pod's), with the pod's hardening untouched.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"

static int fail(const char *what, int err) {
  fprintf(stderr, "sbx-helper channel: %s: %s\n", what, strerror(err));
  return 71;
}

static int connect_daemon(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

// Double fork: the daemon is nobody's child in the exec's process tree and leads its own
// session, so the end of this exec (and a kubelet that kills the exec's group) leaves it be.
static int start_daemon(const char *dir) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) < 0) return -1;
  pid_t first = fork();
  if (first < 0) return -1;
  if (first == 0) {
    close(ready[0]);
    setsid();
    pid_t second = fork();
    if (second == 0) sbx_daemon_main(dir, ready[1]);
    _exit(second < 0 ? 1 : 0);
  }
  close(ready[1]);
  waitpid(first, NULL, 0);
  char ok[2] = {0};
  ssize_t n;
  while ((n = read(ready[0], ok, sizeof ok)) < 0 && errno == EINTR) {
  }
  close(ready[0]);
  return n == 2 && ok[0] == 'o' ? 0 : -1;
}

// The private directory: created 0700, and refused when it is not ours and private (another
// user of the pod must not be able to put a socket or a binary there for us to trust).
static int check_dir(const char *dir) {
  if (mkdir(dir, 0700) < 0 && errno != EEXIST) return -1;
  struct stat st;
  if (lstat(dir, &st) < 0) return -1;
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077)) {
    errno = EPERM;
    return -1;
  }
  return 0;
}

static int open_daemon(const char *dir) {
  char sock[200], lock[200];
  snprintf(sock, sizeof sock, "%s/sock", dir);
  snprintf(lock, sizeof lock, "%s/lock", dir);
  int fd = connect_daemon(sock);
  if (fd >= 0) return fd;
  int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lfd < 0 || flock(lfd, LOCK_EX) < 0) return -1;
  fd = connect_daemon(sock); /* another channel may have started it while we waited */
  if (fd < 0) {
    unlink(sock);
    if (start_daemon(dir) == 0) fd = connect_daemon(sock);
  }
  int e = errno;
  close(lfd); /* releases the lock */
  errno = e;
  return fd;
}

static int write_all(int fd, const char *p, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int hello(int fd) {
  struct ucred peer = {0};
  socklen_t l = sizeof peer;
  getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &l);
  char msg[128];
  int n = snprintf(msg, sizeof msg, "sbx-channel 1 channel=%d daemon=%d", (int)getpid(), (int)peer.pid);
  unsigned char frame[CH_HEADER + sizeof msg];
  ch_header(frame, 'H', 0, (uint32_t)n);
  memcpy(frame + CH_HEADER, msg, (size_t)n);
  return write_all(1, (char *)frame, CH_HEADER + (size_t)n);
}

// Plain byte relay. Blocking writes are the backpressure: while the daemon does not read, this
// does not read the exec stream, and the replica's writes wait in the stream's own windows.
static void relay(int sock) {
  static char buf[256 * 1024];
  struct pollfd p[2] = {{0, POLLIN, 0}, {sock, POLLIN, 0}};
  for (;;) {
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    for (int i = 0; i < 2; i++) {
      if (!p[i].revents) continue;
      ssize_t n = read(p[i].fd, buf, sizeof buf);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0 || write_all(i == 0 ? sock : 1, buf, (size_t)n) < 0) return;
    }
  }
}

int sbx_channel_main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: sbx-helper channel DIR\n");
    return 64;
  }
  signal(SIGPIPE, SIG_IGN);
  const char *dir = argv[2];
  if (strlen(dir) > 90) /* the socket path must fit sun_path */ return fail(dir, ENAMETOOLONG);
  if (check_dir(dir) < 0) return fail(dir, errno);
  int sock = open_daemon(dir);
  if (sock < 0) return fail("starting or reaching the daemon", errno);
  if (hello(sock) < 0) return 0;
  relay(sock);
  return 0;
}
