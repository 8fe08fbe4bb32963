// The port relay: one helper connection carries one TCP connection to a port inside the sandbox's
// own network namespace (docs/ports.md). The host asks with a 'T' frame whose payload is the port
// in decimal; the relay answers 'C' (connected) or 'F' (stage:errno:text) and from then on the
// connection is a plain byte pipe in both directions, with no framing: the host's side of an
// HTTP request or a websocket is exactly what the server inside reads.
//
// Why it can reach nothing but the sandbox: the address is not the host's to choose (always
// loopback, 127.0.0.1 then ::1), and the helper lives in the sandbox's network namespace, whose
// only interface is its own lo. The relay runs under the tenant's syscall filter too (it needs
// only socket, connect, poll, read, send, shutdown), so a bug here gives no more than a tenant has.
#define _GNU_SOURCE
#include "port-relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "seccomp.h"

// Per direction: what was read and not yet written. Backpressure is this buffer: a side is read
// only while its buffer is empty, so a slow reader on one end stops the other end's sender
// through TCP's (or the unix socket's) own window, and the relay never holds more than this.
#define RELAY_BUF 65536

struct direction {
  int from, to;
  size_t len, off;
  int done; /* end of input seen and passed on as a half close */
  char buf[RELAY_BUF];
};

static int send_frame_raw(int fd, char type, const char *data, uint32_t len) {
  unsigned char hdr[5] = {(unsigned char)type, len >> 24, len >> 16, len >> 8, len};
  if (send(fd, hdr, 5, MSG_NOSIGNAL) != 5) return -1;
  return len && send(fd, data, len, MSG_NOSIGNAL) != (ssize_t)len ? -1 : 0;
}

static __attribute__((noreturn)) void refuse(int sock, const char *stage, int err) {
  char msg[160];
  int n = snprintf(msg, sizeof msg, "%s:%d:%s", stage, err, strerror(err));
  send_frame_raw(sock, 'F', msg, (uint32_t)n);
  shutdown(sock, SHUT_WR);
  _exit(0);
}

static int connect_loopback(long port) {
  struct sockaddr_in a4;
  memset(&a4, 0, sizeof a4);
  a4.sin_family = AF_INET;
  a4.sin_port = htons((uint16_t)port);
  a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&a4, sizeof a4) == 0) return fd;
  int err = errno;
  close(fd);
  if (err != ECONNREFUSED) {
    errno = err;
    return -1;
  }
  // a server bound to ::1 only (some dev servers resolve "localhost" to it)
  struct sockaddr_in6 a6;
  memset(&a6, 0, sizeof a6);
  a6.sin6_family = AF_INET6;
  a6.sin6_port = htons((uint16_t)port);
  a6.sin6_addr = in6addr_loopback;
  fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    errno = ECONNREFUSED;
    return -1;
  }
  if (connect(fd, (struct sockaddr *)&a6, sizeof a6) == 0) return fd;
  close(fd);
  errno = ECONNREFUSED;
  return -1;
}

// One step of a direction whose fds poll reported ready. Returns -1 when the pipe is broken.
static int step(struct direction *d, short revents_from, short revents_to) {
  if (d->len == d->off && revents_from) {
    ssize_t n = read(d->from, d->buf, sizeof d->buf);
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (n == 0) {
      d->done = 1;
      shutdown(d->to, SHUT_WR);
      return 0;
    }
    d->len = (size_t)n;
    d->off = 0;
    revents_to = POLLOUT; /* try at once: usually the other side has room */
  }
  if (d->len > d->off && revents_to) {
    ssize_t n = send(d->to, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) return errno == EAGAIN || errno == EINTR ? 0 : -1;
    d->off += (size_t)n;
    if (d->off == d->len) d->len = d->off = 0;
  }
  return 0;
}

static __attribute__((noreturn)) void pump(int sock, int tcp) {
  fcntl(sock, F_SETFL, fcntl(sock, F_GETFL) | O_NONBLOCK);
  fcntl(tcp, F_SETFL, fcntl(tcp, F_GETFL) | O_NONBLOCK);
  static struct direction up, down; /* static: 128 KiB off the stack */
  up = (struct direction){.from = sock, .to = tcp};
  down = (struct direction){.from = tcp, .to = sock};
  struct direction *dirs[2] = {&up, &down};
  while (!(up.done && down.done)) {
    struct pollfd p[2];
    int idx[2];
    int np = 0;
    for (int i = 0; i < 2; i++) {
      struct direction *d = dirs[i];
      idx[i] = -1;
      if (d->done) continue;
      int waiting_out = d->len > d->off;
      p[np] = (struct pollfd){waiting_out ? d->to : d->from, waiting_out ? POLLOUT : POLLIN, 0};
      idx[i] = np++;
    }
    if (poll(p, (nfds_t)np, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (idx[i] < 0) continue;
      struct direction *d = dirs[i];
      short r = p[idx[i]].revents;
      if (!r) continue;
      int waiting_out = d->len > d->off;
      if ((r & (POLLERR | POLLNVAL)) && waiting_out) _exit(0);
      if (step(d, waiting_out ? 0 : r, waiting_out ? r : 0) < 0) _exit(0);
    }
  }
  _exit(0);
}

void port_relay(int sock, const char *payload, uint32_t len) {
  char digits[8];
  if (len == 0 || len >= sizeof digits) refuse(sock, "port", EINVAL);
  memcpy(digits, payload, len);
  digits[len] = 0;
  char *end = NULL;
  long port = strtol(digits, &end, 10);
  if (*end || port < 1 || port > 65535) refuse(sock, "port", EINVAL);
  if (sbx_seccomp_apply() < 0) refuse(sock, "seccomp", errno);
  int tcp = connect_loopback(port);
  if (tcp < 0) refuse(sock, "connect", errno);
  if (send_frame_raw(sock, 'C', NULL, 0) < 0) _exit(0);
  pump(sock, tcp);
}
