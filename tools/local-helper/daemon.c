// The command daemon of a pod: one per pod, started by the first channel (channel.c), serving
// every channel of every replica on a unix socket in the private directory. It owns the
// commands (registry.c), so a channel or a replica dying ends none of them; a new channel can
// list them and re-attach by id, and the ring of each output stream replays what was missed.
//
// Frames (channel.h), replica -> daemon:
//   'S' start   id NUL cwd NUL timeout-ms NUL argc NUL argv... envc NUL env...  (stream: the caller's)
//               a last env entry "=sbx-label=<label>" is the command's label (returned by 'L'),
//               not a variable: no variable name is empty, and a daemon without labels passes it on;
//               one more field after env, "pty=COLS ROWS", runs it on a pseudo-terminal of that
//               window: its own session, the terminal as controlling tty and fds 0-2, one output
//               stream ('1'); 'E' then types the terminal's ^D, 'K' reaches its foreground job.
//               A daemon from before terminals refuses that frame as malformed (it counts fields)
//   'A' attach  id NUL stdout-offset NUL stderr-offset   (the new reader's stream; it may
//               write stdin too, against the credit its 'R' is followed by)
//   'I' stdin bytes   'E' end of stdin   'K' signal (decimal)   'D' detach (the command goes on)
//   'C' output credit (4 bytes): the stream may send that many more output bytes
//   'Z' window size of a pty ("COLS ROWS": TIOCSWINSZ; the kernel sends SIGWINCH)
//   'L' list
//   'P' tunnel  id NUL port: a TCP connection to the port on the pod's loopback (registry.c);
//               then 'I'/'E'/'C' as for a command's stdin and output, 'K' closes it
// daemon -> replica:
//   'R' running (pid; 0 for a tunnel, once connected)   'F' failed to start, attach or connect (text)   '1' stdout   '2' stderr
//   'X' exit (exit:N | signal:N | timeout:N | killed:N), after every output byte
//   'C' stdin credit (4 bytes): that many stdin bytes reached the pipe   'l' list (registry.c reg_list)
// Backpressure is per stream: a stream sends output only against credit, so a reader that
// stops reading stops only its command (its ring fills, then its pipe), never the other 199.
// One file over 400 lines on purpose: the frame handlers and the poll loop share the
// connection table, which no other file should reach into.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include "channel.h"
#include "registry.h"

#define MAX_CONNS 64
#define OUT_HIGH (512 * 1024) /* stop making output frames for a connection above this */
#define CHUNK (256 * 1024) /* largest output frame, and the most read from a pipe at once */
#define INQ_MAX (CH_WINDOW + CH_MAX_FRAME)
/** a pty's output after its exit is at its end once the terminal was this quiet (settle) */
#define PTY_QUIET_MS 100

struct conn {
  int fd;
  unsigned char *in;
  size_t in_len;
  char *out;
  size_t out_len, out_off, out_cap;
};
static struct conn conns[MAX_CONNS];

static void put(struct conn *k, char type, uint32_t stream, const void *data, size_t len) {
  if (k->out_len + CH_HEADER + len > k->out_cap) {
    k->out_cap = (k->out_len + CH_HEADER + len) * 2;
    k->out = realloc(k->out, k->out_cap);
  }
  ch_header((unsigned char *)k->out + k->out_len, type, stream, (uint32_t)len);
  if (len) memcpy(k->out + k->out_len + CH_HEADER, data, len);
  k->out_len += CH_HEADER + len;
}

static void put_u32(struct conn *k, char type, uint32_t stream, uint32_t v) {
  unsigned char b[4] = {v >> 24, v >> 16, v >> 8, v};
  put(k, type, stream, b, 4);
}

static void drop_conn(int i) {
  for (int j = 0; j < reg_count; j++) {
    if (reg_all[j]->conn != i) continue;
    if (reg_all[j]->tunnel) reg_signal(reg_all[j], SIGKILL); /* nobody can read it again */
    reg_all[j]->conn = -1;
  }
  close(conns[i].fd);
  free(conns[i].in);
  free(conns[i].out);
  memset(&conns[i], 0, sizeof conns[i]);
  conns[i].fd = -1;
}

// NUL-separated fields of a payload; returns how many, or -1 when more than max.
static int split(char *p, size_t len, char **f, int max) {
  int n = 0;
  for (char *e = p + len; p < e; p += strlen(p) + 1) {
    if (n == max) return -1;
    f[n++] = p;
  }
  return n;
}

/** "COLS ROWS", each 1..10000 (the replica validates to its own bound); -1 when malformed */
static int parse_window(const char *p, struct winsize *ws) {
  char *end;
  long cols = strtol(p, &end, 10), rows = *end == ' ' ? strtol(end + 1, &end, 10) : 0;
  if (*end || cols < 1 || cols > 10000 || rows < 1 || rows > 10000) return -1;
  *ws = (struct winsize){.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
  return 0;
}

static void attach(struct command *c, int k, uint32_t stream, uint64_t off_out, uint64_t off_err, int fresh) {
  if (c->conn >= 0 && conns[c->conn].fd >= 0 && !(c->conn == k && c->stream == stream))
    put(&conns[c->conn], 'F', c->stream, "attached by another reader", 26);
  c->conn = k;
  c->stream = stream;
  c->credit = CH_WINDOW;
  c->sent[0] = off_out < c->out[0].base ? c->out[0].base : off_out;
  c->sent[1] = off_err < c->out[1].base ? c->out[1].base : off_err;
  c->exit_sent = 0;
  char pid[24];
  put(&conns[k], 'R', stream, pid, (size_t)snprintf(pid, sizeof pid, "%d", (int)c->pid));
  // A start's reader begins with a window of stdin credit; a re-attached one begins with none
  // and gets here what the window has left beside the stdin an earlier reader queued, so the
  // queue stays under INQ_MAX (what drains of the old bytes is credited to the new reader).
  if (!fresh && c->in_fd >= 0 && !c->in_eof)
    put_u32(&conns[k], 'C', stream, c->inq_len >= CH_WINDOW ? 0 : (uint32_t)(CH_WINDOW - c->inq_len));
}

static void on_start(int k, uint32_t stream, char *p, uint32_t len) {
  static char *f[2 * 65536 + 8];
  int n = split(p, len, f, (int)(sizeof f / sizeof *f) - 1);
  long argc = n > 4 ? strtol(f[3], NULL, 10) : 0;
  long envc = argc > 0 && 4 + argc < n ? strtol(f[4 + argc], NULL, 10) : -1;
  long fields = 5 + argc + envc; /* without a terminal's field */
  int tty = envc >= 0 && fields + 1 == n && !strncmp(f[n - 1], PTY_FIELD, strlen(PTY_FIELD));
  struct winsize ws;
  if (argc < 1 || envc < 0 || fields + tty != n || strlen(f[0]) > ID_MAX || !f[0][0]) {
    put(&conns[k], 'F', stream, "malformed start frame", 21);
    return;
  }
  if (tty && parse_window(f[n - 1] + strlen(PTY_FIELD), &ws) < 0) {
    put(&conns[k], 'F', stream, "malformed pty size", 18);
    return;
  }
  if (reg_find(f[0])) {
    put(&conns[k], 'F', stream, "a command with this id exists", 29);
    return;
  }
  char **argv = &f[4], **env = &f[5 + argc];
  char *save = argv[argc], *label = NULL;
  argv[argc] = NULL; /* envc's slot; env ends at f[fields], which split (or this) left NULL */
  f[fields] = NULL;
  if (envc > 0 && !strncmp(f[fields - 1], LABEL_ENV, strlen(LABEL_ENV))) { /* the label, not a variable */
    label = f[fields - 1] + strlen(LABEL_ENV);
    f[fields - 1] = NULL;
  }
  struct command *c = reg_start(f[0], f[1], strtod(f[2], NULL), argv, env, tty ? &ws : NULL);
  argv[argc] = save;
  if (c && label && strlen(label) <= LABEL_MAX && !strpbrk(label, "\t\n")) c->label = strdup(label);
  if (!c) {
    char msg[128];
    put(&conns[k], 'F', stream, msg, (size_t)snprintf(msg, sizeof msg, "start: %s", strerror(errno)));
    return;
  }
  attach(c, k, stream, 0, 0, 1);
}

// The tunnel's 'R' waits for its connect (tunnel_ready), so the replica's open resolves only on
// a real connection and a refusal comes back as the open's 'F', not as a later reset.
static void on_tunnel(int k, uint32_t stream, char *p, uint32_t len) {
  char *f[2] = {0}, *end = NULL;
  long port = split(p, len, f, 2) == 2 ? strtol(f[1], &end, 10) : 0;
  if (!end || *end || port < 1 || port > 65535 || !f[0][0] || strlen(f[0]) > ID_MAX) {
    put(&conns[k], 'F', stream, "malformed tunnel frame", 22);
    return;
  }
  struct command *c = reg_find(f[0]) ? NULL : reg_tunnel(f[0], port);
  if (!c) {
    char msg[128];
    int e = reg_find(f[0]) ? EEXIST : errno;
    put(&conns[k], 'F', stream, msg, (size_t)snprintf(msg, sizeof msg, "connect:%d:%s", e, strerror(e)));
    return;
  }
  c->conn = k;
  c->stream = stream;
  c->credit = CH_WINDOW;
}

static void tunnel_ready(struct command *c) {
  int e = reg_tunnel_settle(c);
  if (e == EINPROGRESS || c->conn < 0) return;
  char msg[128];
  if (!e) return put(&conns[c->conn], 'R', c->stream, "0", 1);
  put(&conns[c->conn], 'F', c->stream, msg, (size_t)snprintf(msg, sizeof msg, "connect:%d:%s", e, strerror(e)));
  c->conn = -1; /* failed: no exit frame follows, and reg_expire frees it */
}

static void on_list(int k, uint32_t stream) {
  size_t len;
  char *buf = reg_list(&len);
  put(&conns[k], 'l', stream, buf, len);
  free(buf);
}

static void on_frame(int k, char type, uint32_t stream, char *p, uint32_t len) {
  if (type == 'S') return on_start(k, stream, p, len);
  if (type == 'L') return on_list(k, stream);
  if (type == 'P') return on_tunnel(k, stream, p, len);
  if (type == 'A') {
    char *f[3] = {0};
    struct command *c = split(p, len, f, 3) == 3 ? reg_find(f[0]) : NULL;
    if (!c || c->tunnel) put(&conns[k], 'F', stream, "no such command", 15);
    else attach(c, k, stream, strtoull(f[1], NULL, 10), strtoull(f[2], NULL, 10), 0);
    return;
  }
  struct command *c = reg_by_stream(k, stream);
  if (!c) return; /* a stream that ended: late stdin or credit */
  if (type == 'C' && len == 4) c->credit += ch_u32((unsigned char *)p);
  else if (type == 'D') c->conn = -1;
  else if (type == 'Z') {
    struct winsize ws;
    if (parse_window(p, &ws) == 0) reg_resize(c, &ws);
  } else if (type == 'E' && c->pty >= 0) {
    if (c->in_fd >= 0 && c->inq_len < INQ_MAX) { /* a terminal's end of input is the ^D typed into it */
      if (c->inq_len + 1 > c->inq_cap) c->inq = realloc(c->inq, c->inq_cap = c->inq_len + 1 + CHUNK);
      c->inq[c->inq_len++] = 4; /* credited back as written: one byte of slack in the replica's window */
    }
  } else if (type == 'K') {
    int sig = atoi(p);
    if (c->pty < 0 || sig == SIGKILL) c->killed = 1; /* a terminal's ^C is not the command's end */
    reg_signal(c, sig);
  } else if (type == 'E') c->in_eof = 1;
  else if (type == 'I' && c->in_fd >= 0) {
    if (c->inq_len + len > INQ_MAX) return drop_conn(k); /* past the window: a broken peer */
    if (c->inq_len + len > c->inq_cap) c->inq = realloc(c->inq, c->inq_cap = c->inq_len + len + CHUNK);
    memcpy(c->inq + c->inq_len, p, len);
    c->inq_len += len;
  }
}

static void read_conn(int k) {
  struct conn *c = &conns[k];
  ssize_t n = read(c->fd, c->in + c->in_len, CH_HEADER + CH_MAX_FRAME - c->in_len);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) return drop_conn(k);
  c->in_len += (size_t)n;
  size_t off = 0;
  while (c->in_len - off >= CH_HEADER) {
    unsigned char *h = c->in + off;
    uint32_t len = ch_u32(h + 5);
    if (len > CH_MAX_FRAME) return drop_conn(k);
    if (c->in_len - off < CH_HEADER + len) break;
    char saved = (char)h[CH_HEADER + len]; /* NUL-terminate in place; in has one spare byte */
    h[CH_HEADER + len] = 0;
    on_frame(k, (char)h[0], ch_u32(h + 1), (char *)h + CH_HEADER, len);
    if (conns[k].fd < 0) return;
    h[CH_HEADER + len] = (unsigned char)saved;
    off += CH_HEADER + len;
  }
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
}

static void flush_conn(int k) {
  struct conn *c = &conns[k];
  while (c->out_off < c->out_len) {
    ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n <= 0) return drop_conn(k);
    c->out_off += (size_t)n;
  }
  if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
}

/** output bytes the command's pipe may be read for now: unbounded (the ring overwrites) without a reader */
static size_t room(const struct command *c, int i) {
  if (c->conn < 0) return CHUNK;
  uint64_t held = c->out[i].end - c->sent[i];
  return held >= CH_RING ? 0 : (size_t)(CH_RING - held) < CHUNK ? (size_t)(CH_RING - held) : CHUNK;
}

static void read_output(struct command *c, int i) {
  size_t len;
  char *slot = ch_ring_slot(&c->out[i], room(c, i), &len);
  if (!slot || !len) return;
  ssize_t n = read(c->out_fd[i], slot, len);
  if (n > 0 && c->exited) c->quiet_from = ch_now_ms(); /* a pty's tail: settle waits for quiet */
  if (n > 0) ch_ring_commit(&c->out[i], (size_t)n);
  else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    close(c->out_fd[i]);
    c->out_fd[i] = -1;
  }
}

static void write_input(struct command *c) {
  ssize_t n = write(c->in_fd, c->inq, c->inq_len);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) { /* EPIPE: the command closed its stdin; what is left goes nowhere */
    close(c->in_fd);
    c->in_fd = -1;
    n = (ssize_t)c->inq_len;
  }
  memmove(c->inq, c->inq + n, c->inq_len - (size_t)n);
  c->inq_len -= (size_t)n;
  if (c->conn >= 0) put_u32(&conns[c->conn], 'C', c->stream, (uint32_t)n);
}

// After the command exited its own output is all in the pipes; background processes it left
// may keep them open, so an empty pipe is the end (as in sbx-helper.c's drain_output); a
// terminal's end is a quiet moment, or 2 s of output after the exit (sbx-helper.c drain_pty).
static void settle(struct command *c, double now) {
  if (c->connecting) return; /* its stdin (and end of stdin) waits for the connect */
  if (c->deadline && !c->exited && !c->timed_out && now >= c->deadline) {
    c->timed_out = 1;
    reg_signal(c, SIGKILL);
  }
  if (c->in_fd >= 0 && c->in_eof && !c->inq_len) {
    if (c->tunnel) shutdown(c->in_fd, SHUT_WR); /* the server reads its end; its answer still comes */
    close(c->in_fd);
    c->in_fd = -1;
  }
  // the server closed (or reset) the connection: the tunnel ends once what it sent is out
  if (c->tunnel && !c->connecting && !c->exited && c->out_fd[0] < 0) reg_signal(c, SIGKILL);
  for (int i = 0; i < 2 && c->exited; i++) {
    int avail = 0;
    if (c->out_fd[i] < 0 || ioctl(c->out_fd[i], FIONREAD, &avail) < 0 || avail) continue;
    // a terminal hands on what was written to it a moment later (the kernel's flip buffer), so
    // an empty one right at the exit may still have the last line coming: wait for quiet
    if (c->pty >= 0 && now < c->quiet_from + PTY_QUIET_MS && now < c->drain_until) continue;
    close(c->out_fd[i]);
    c->out_fd[i] = -1;
  }
}

static void emit(struct command *c) {
  struct conn *k = &conns[c->conn];
  for (int i = 0; i < 2 && c->credit > 0 && k->out_len < OUT_HIGH; i++) {
    size_t len;
    const char *p = ch_ring_peek(&c->out[i], &c->sent[i], (size_t)(c->credit < CHUNK ? c->credit : CHUNK), &len);
    if (!len) continue;
    put(k, i ? '2' : '1', c->stream, p, len);
    c->sent[i] += len;
    c->credit -= (int64_t)len;
  }
  int done = c->exited && c->out_fd[0] < 0 && c->out_fd[1] < 0;
  if (done && !c->exit_sent && c->sent[0] == c->out[0].end && c->sent[1] == c->out[1].end) {
    char ex[32];
    put(k, 'X', c->stream, ex, (size_t)reg_exit_text(c, ex, sizeof ex));
    c->exit_sent = 1;
    c->conn = -1;
  }
}

static int listen_on(const char *dir) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%.90s/sock", dir); /* channel.c refuses longer dirs */
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0) return -1;
  return fd;
}

static void accept_conn(int lfd) {
  int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) return;
  for (int i = 0; i < MAX_CONNS; i++) {
    if (conns[i].fd >= 0) continue;
    conns[i].fd = fd;
    conns[i].in = malloc(CH_HEADER + CH_MAX_FRAME + 1);
    return;
  }
  close(fd); /* more channels than any number of replicas opens: refuse */
}

/** poll timeout: the nearest deadline or expiry, at most a second */
static int next_wakeup(double now) {
  double t = now + 1000;
  for (int i = 0; i < reg_count; i++) {
    struct command *c = reg_all[i];
    if (c->deadline && !c->exited && c->deadline < t) t = c->deadline;
    double quiet = c->quiet_from + PTY_QUIET_MS; /* a pty's tail (settle) */
    if (c->pty >= 0 && c->exited && c->out_fd[0] >= 0 && quiet < t) t = quiet;
  }
  return t <= now ? 0 : (int)(t - now) + 1;
}

// One turn: poll everything, then move bytes: connections in and out, pipes into rings,
// queued stdin into pipes, rings out as frames against each stream's credit.
static void turn(int lfd, int sfd, struct pollfd *p, struct command **who, int *what) {
  int n = 0;
  p[n++] = (struct pollfd){lfd, POLLIN, 0};
  p[n++] = (struct pollfd){sfd, POLLIN, 0};
  for (int i = 0; i < MAX_CONNS; i++) {
    if (conns[i].fd < 0) continue;
    short ev = POLLIN | (conns[i].out_len > conns[i].out_off ? POLLOUT : 0);
    who[n] = NULL, what[n] = i, p[n++] = (struct pollfd){conns[i].fd, ev, 0};
  }
  for (int i = 0; i < reg_count; i++) {
    struct command *c = reg_all[i];
    if (c->connecting) {
      who[n] = c, what[n] = 3, p[n++] = (struct pollfd){c->in_fd, POLLOUT, 0};
      continue;
    }
    for (int s = 0; s < 2; s++)
      if (c->out_fd[s] >= 0 && room(c, s)) who[n] = c, what[n] = s, p[n++] = (struct pollfd){c->out_fd[s], POLLIN, 0};
    if (c->in_fd >= 0 && c->inq_len) who[n] = c, what[n] = 2, p[n++] = (struct pollfd){c->in_fd, POLLOUT, 0};
  }
  if (poll(p, (nfds_t)n, next_wakeup(ch_now_ms())) < 0 && errno != EINTR) return;
  if (p[0].revents) accept_conn(lfd);
  if (p[1].revents) {
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) > 0) {
    }
    reg_reap();
  }
  for (int i = 2; i < n; i++) {
    if (!p[i].revents) continue;
    if (!who[i]) {
      if (conns[what[i]].fd != p[i].fd) continue; /* dropped earlier in this turn */
      if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) read_conn(what[i]);
      if (conns[what[i]].fd == p[i].fd && (p[i].revents & POLLOUT)) flush_conn(what[i]);
    } else if (what[i] == 3) {
      if (who[i]->connecting) tunnel_ready(who[i]);
    } else if (what[i] == 2) {
      if (who[i]->in_fd >= 0) write_input(who[i]);
    } else if (who[i]->out_fd[what[i]] >= 0) {
      read_output(who[i], what[i]);
    }
  }
  double now = ch_now_ms();
  for (int i = 0; i < reg_count; i++) {
    struct command *c = reg_all[i];
    settle(c, now);
    if (c->conn >= 0 && conns[c->conn].fd >= 0) emit(c);
  }
  reg_expire(now);
  for (int i = 0; i < MAX_CONNS; i++)
    if (conns[i].fd >= 0 && conns[i].out_len > conns[i].out_off) flush_conn(i);
}

void sbx_daemon_main(const char *dir, int ready) {
  for (int i = 0; i < MAX_CONNS; i++) conns[i].fd = -1;
  // Off the exec's pipes, so the exec that started the daemon can end. No log file: DIR is
  // under /tmp, which pause snapshots, and a log that grows per pod would make every resumed
  // tree differ from the paused one; a failed start is reported by the channel (ready pipe).
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  dup2(null, 0), dup2(null, 1), dup2(null, 2);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  // orphans of commands (a daemonized server) are reparented here and reaped, not left as zombies
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);
  int sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
  int lfd = listen_on(dir);
  if (sfd < 0 || lfd < 0 || chdir("/") < 0) _exit(71); /* the channel sees the ready pipe close */
  if (write(ready, "ok", 2) < 0) _exit(71);
  close(ready);
  struct pollfd *p = NULL;
  struct command **who = NULL;
  int *what = NULL, cap = 0;
  for (;;) {
    int need = 2 + MAX_CONNS + 3 * reg_count;
    if (need > cap) {
      cap = need * 2;
      p = realloc(p, (size_t)cap * sizeof *p);
      who = realloc(who, (size_t)cap * sizeof *who);
      what = realloc(what, (size_t)cap * sizeof *what);
    }
    turn(lfd, sfd, p, who, what);
  }
}
