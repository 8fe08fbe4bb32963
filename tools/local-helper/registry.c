// The process registry of a pod's command daemon (see registry.h). Each command runs in its
// own session and process group, as the pod's user, with the daemon's environment (the
// container's, from the exec that started the daemon) plus the request's pairs plus
// SBX_EXEC_ID=<its id>: the marker by which a kill finds the processes that left its group,
// the same marker the per-exec websocket path uses (runtime/k8s/execKill.ts). A command runs on
// pipes, or on a pseudo-terminal the daemon opens for it (start_pty) when its start asks.
#define _GNU_SOURCE
#include "registry.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

extern char **environ;

struct command **reg_all;
int reg_count;
static int reg_cap;

/** how long a finished command stays: until its exit was read, or this long unread */
#define KEEP_UNREAD_MS (10 * 60 * 1000)
#define KEEP_READ_MS (30 * 1000)
#define SWEEP_ROUNDS 5
/** a pty's output after its exit: until EIO, or quiet this long, or at most this long (daemon.c settle) */
#define PTY_DRAIN_MS 2000

struct command *reg_find(const char *id) {
  for (int i = 0; i < reg_count; i++)
    if (!strcmp(reg_all[i]->id, id)) return reg_all[i];
  return NULL;
}

struct command *reg_by_stream(int conn, uint32_t stream) {
  for (int i = 0; i < reg_count; i++)
    if (reg_all[i]->conn == conn && reg_all[i]->stream == stream) return reg_all[i];
  return NULL;
}

// The daemon's environment with the request's pairs over it and the marker last. Pointers
// into environ and the request: they only need to live until posix_spawn returns.
static char **command_env(char **pairs, char *marker) {
  size_t n = 0, m = 0;
  while (environ[n]) n++;
  while (pairs[m]) m++;
  char **env = calloc(n + m + 2, sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t key = strcspn(environ[i], "=");
    int shadowed = !strncmp(environ[i], "SBX_EXEC_ID=", 12);
    for (size_t j = 0; j < m && !shadowed; j++) shadowed = !strncmp(environ[i], pairs[j], key + 1);
    if (!shadowed) env[k++] = environ[i];
  }
  for (size_t j = 0; j < m; j++) env[k++] = pairs[j];
  env[k++] = marker;
  return env;
}

// posix_spawn, not fork: glibc spawns with CLONE_VM|CLONE_VFORK, so the daemon's page tables
// are not copied for every command (fork was most of the daemon's CPU per command). Every
// signal goes back to its default (the daemon ignores SIGPIPE and SIGHUP; an ignored signal
// would stay ignored across exec) and none is blocked.
// A pty's command (slave: the terminal's path, in, out and err -1) opens it as fd 0 after the
// new session began (glibc runs POSIX_SPAWN_SETSID before the file actions), so it becomes the
// session's controlling terminal, and takes it as 1 and 2 too.
static int spawn(const char *id, const char *cwd, char **argv, char **pairs, int in, int out, int err,
                 const char *slave, pid_t *pid) {
  char marker[ID_MAX + 16];
  snprintf(marker, sizeof marker, "SBX_EXEC_ID=%s", id);
  char **env = command_env(pairs, marker);
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  posix_spawn_file_actions_init(&fa);
  if (slave) {
    posix_spawn_file_actions_addopen(&fa, 0, slave, O_RDWR, 0);
    posix_spawn_file_actions_adddup2(&fa, 0, 1);
    posix_spawn_file_actions_adddup2(&fa, 0, 2);
  } else {
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
  }
  posix_spawn_file_actions_addchdir_np(&fa, cwd);
  posix_spawnattr_init(&at);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  int rc = posix_spawnp(pid, argv[0], &fa, &at, argv, env);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  free(env);
  return rc;
}

// A command that could not start is an entry like any other that exited at once, with the
// code and the reason a shell gives: 126 cannot enter cwd or cannot run, 127 not found.
// On a terminal's one stream (stdout) for a pty, else on stderr.
static void failed(struct command *c, const char *what, const char *arg, int e, int code, int tty) {
  char msg[512];
  int n = snprintf(msg, sizeof msg, tty ? "sbx: %s %s: %s\r\n" : "sbx: %s %s: %s\n", what, arg, strerror(e));
  size_t len;
  char *slot = ch_ring_slot(&c->out[tty ? 0 : 1], (size_t)n, &len);
  if (slot) {
    memcpy(slot, msg, len);
    ch_ring_commit(&c->out[tty ? 0 : 1], len);
  }
  c->exited = 1;
  c->status = code << 8;
  c->expires = ch_now_ms() + KEEP_UNREAD_MS;
}

static struct command *add(struct command *c) {
  c->conn = -1;
  if (reg_count == reg_cap) {
    reg_cap = reg_cap ? reg_cap * 2 : 64;
    reg_all = realloc(reg_all, (size_t)reg_cap * sizeof *reg_all);
  }
  reg_all[reg_count++] = c;
  return c;
}

/** the terminal's main side, sized, and the path of its other side; -1 with errno */
static int open_pty(const struct winsize *ws, char *slave, size_t len) {
  int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (m < 0) return -1;
  if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, slave, len) != 0 || ioctl(m, TIOCSWINSZ, ws) < 0) {
    int e = errno;
    close(m);
    errno = e;
    return -1;
  }
  return m;
}

// A pty's command: the main side is its stdin (in_fd, closed by 'E' like a pipe would be: a
// pty's 'E' is queued as ^D instead, daemon.c), its one output stream (out_fd[0]: EIO once no
// process holds the terminal) and c->pty (window and foreground job), three fds of one terminal.
static int start_pty(struct command *c, const char *cwd, char **argv, char **env, const struct winsize *ws) {
  char slave[64];
  int m = open_pty(ws, slave, sizeof slave);
  if (m < 0) return errno;
  int rc = spawn(c->id, cwd, argv, env, -1, -1, -1, slave, &c->pid);
  if (rc) {
    close(m);
    return rc;
  }
  c->pty = m;
  c->in_fd = fcntl(m, F_DUPFD_CLOEXEC, 0);
  c->out_fd[0] = fcntl(m, F_DUPFD_CLOEXEC, 0);
  fcntl(m, F_SETFL, O_NONBLOCK); /* one open file: all three are non-blocking */
  return 0;
}

struct command *reg_start(const char *id, const char *cwd, double timeout_ms, char **argv, char **env,
                          const struct winsize *pty) {
  struct command *c = calloc(1, sizeof *c);
  snprintf(c->id, sizeof c->id, "%s", id);
  c->pty = c->in_fd = c->out_fd[0] = c->out_fd[1] = -1;
  struct stat st;
  int rc = stat(cwd, &st) < 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : 0;
  if (rc) failed(c, "cannot enter", cwd, rc, 126, pty != NULL);
  else if (pty && (rc = start_pty(c, cwd, argv, env, pty)))
    failed(c, "cannot run", argv[0], rc, rc == ENOENT ? 127 : 126, 1);
  if (pty || rc) {
    c->deadline = timeout_ms > 0 ? ch_now_ms() + timeout_ms : 0;
    return add(c);
  }
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) < 0) return free(c), NULL;
  if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) return free(c), NULL;
  if ((rc = spawn(id, cwd, argv, env, in[0], out[1], err[1], NULL, &c->pid)))
    failed(c, "cannot run", argv[0], rc, rc == ENOENT ? 127 : 126, 0);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  if (rc) { /* nothing runs: no pipes to read */
    close(in[1]), close(out[0]), close(err[0]);
    in[1] = out[0] = err[0] = -1;
  }
  c->in_fd = in[1];
  c->out_fd[0] = out[0];
  c->out_fd[1] = err[0];
  for (int i = 0; i < 3 && !rc; i++) {
    int fd = i == 0 ? c->in_fd : c->out_fd[i - 1];
    fcntl(fd, F_SETFL, O_NONBLOCK);
    // best effort, as in sbx-helper.c: past the uid's pipe allowance the kernel keeps 64 KiB
    fcntl(fd, F_SETPIPE_SZ, CH_RING);
  }
  c->deadline = timeout_ms > 0 ? ch_now_ms() + timeout_ms : 0;
  return add(c);
}

void reg_resize(struct command *c, const struct winsize *ws) {
  if (c->pty >= 0 && !c->exited) ioctl(c->pty, TIOCSWINSZ, ws);
}

// Tunnels (docs/kubernetes-runtime.md, "Ports over the channel"). The address is never the
// replica's to choose: loopback only, so the pod's own network namespace bounds what a tunnel
// reaches, as the local relay's (port-relay.c) does for a bubblewrap sandbox.
static int connect_loopback(struct command *c, int family) {
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)c->port)};
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)c->port)};
  a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a6.sin6_addr = in6addr_loopback;
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int rc = family == AF_INET ? connect(fd, (struct sockaddr *)&a4, sizeof a4)
                             : connect(fd, (struct sockaddr *)&a6, sizeof a6);
  if (rc < 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    return e;
  }
  if (c->in_fd >= 0) close(c->in_fd), close(c->out_fd[0]);
  c->in_fd = fd;
  c->out_fd[0] = fcntl(fd, F_DUPFD_CLOEXEC, 0); /* its own fd: the daemon closes reading apart */
  c->tunnel = family == AF_INET ? 4 : 6;
  c->connecting = 1;
  return 0;
}

struct command *reg_tunnel(const char *id, long port) {
  struct command *c = calloc(1, sizeof *c);
  snprintf(c->id, sizeof c->id, "%s", id);
  c->pty = c->in_fd = c->out_fd[0] = c->out_fd[1] = -1;
  c->port = (int)port;
  int e = connect_loopback(c, AF_INET);
  if (e == ECONNREFUSED) e = connect_loopback(c, AF_INET6) ? ECONNREFUSED : 0;
  if (e) {
    free(c);
    errno = e;
    return NULL;
  }
  return add(c);
}

int reg_tunnel_settle(struct command *c) {
  int e = 0;
  socklen_t len = sizeof e;
  if (getsockopt(c->in_fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0) e = errno;
  if (e == ECONNREFUSED && c->tunnel == 4 && connect_loopback(c, AF_INET6) == 0) return EINPROGRESS;
  if (e) {
    close(c->in_fd), close(c->out_fd[0]);
    c->in_fd = c->out_fd[0] = -1;
    c->exited = 1;
  }
  c->connecting = 0;
  return e;
}

// A tunnel's end: both directions closed now (a kill, or the replica's connection gone).
static void close_tunnel(struct command *c) {
  if (c->in_fd >= 0) close(c->in_fd);
  if (c->out_fd[0] >= 0) close(c->out_fd[0]);
  c->in_fd = c->out_fd[0] = -1;
  c->connecting = 0;
  c->exited = 1;
}

// Whether /proc/<pid>/environ holds exactly `marker` as one entry.
static int carries(const char *pid, const char *marker) {
  char path[64], buf[65536];
  snprintf(path, sizeof path, "/proc/%s/environ", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  size_t ml = strlen(marker);
  for (char *p = buf; p < buf + n; p += strlen(p) + 1)
    if (strlen(p) == ml && !memcmp(p, marker, ml)) return 1;
  return 0;
}

// Kills every process carrying the command's marker and each one's group, until none is
// left (a fork racing one round is caught by the next). What escapes: a process that left
// the group and dropped the marker; the pod's lifetime bounds those.
static void sweep(const struct command *c) {
  char marker[ID_MAX + 16];
  snprintf(marker, sizeof marker, "SBX_EXEC_ID=%s", c->id);
  for (int round = 0; round < SWEEP_ROUNDS; round++) {
    int found = 0;
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9' || !carries(e->d_name, marker)) continue;
      pid_t p = (pid_t)atoi(e->d_name);
      if (getpgid(p) == p) kill(-p, SIGKILL);
      if (kill(p, SIGKILL) == 0) found = 1;
    }
    if (d) closedir(d);
    if (!found) return;
  }
}

void reg_signal(struct command *c, int sig) {
  if (c->tunnel) return close_tunnel(c); /* any signal closes a tunnel: it has no process */
  if (c->exited && sig != SIGKILL) return;
  pid_t fg = c->pty >= 0 && sig != SIGKILL ? tcgetpgrp(c->pty) : -1;
  if (!c->exited && fg > 0) kill(-fg, sig);
  else if (!c->exited && c->pid > 0) { /* pid 0 would be our own group */
    kill(-c->pid, sig);
    kill(c->pid, sig);
  }
  if (sig == SIGKILL) sweep(c);
}

void reg_reap(void) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (int i = 0; i < reg_count; i++) {
      struct command *c = reg_all[i];
      if (c->pid != pid || c->exited) continue;
      c->exited = 1;
      c->status = status;
      c->expires = ch_now_ms() + KEEP_UNREAD_MS;
      c->quiet_from = ch_now_ms();
      c->drain_until = c->quiet_from + PTY_DRAIN_MS;
    }
  }
}

static void release(struct command *c) {
  for (int i = 0; i < 2; i++) {
    if (c->out_fd[i] >= 0) close(c->out_fd[i]);
    ch_ring_free(&c->out[i]);
  }
  if (c->in_fd >= 0) close(c->in_fd);
  if (c->pty >= 0) close(c->pty);
  free(c->inq);
  free(c->label);
  free(c);
}

void reg_expire(double now) {
  for (int i = 0; i < reg_count;) {
    struct command *c = reg_all[i];
    if (c->exit_sent && c->expires > now + KEEP_READ_MS) c->expires = now + KEEP_READ_MS;
    // a tunnel cannot be re-attached: it goes once its end was sent, or nobody is there to read it
    if (c->tunnel && c->exited && (c->exit_sent || c->conn < 0)) c->expires = now;
    if (c->exited && c->expires && c->expires <= now) {
      release(c);
      reg_all[i] = reg_all[--reg_count];
    } else {
      i++;
    }
  }
}

int reg_exit_text(const struct command *c, char *buf, size_t len) {
  int code = WIFSIGNALED(c->status) ? 128 + WTERMSIG(c->status) : WEXITSTATUS(c->status);
  const char *kind = c->timed_out ? "timeout" : c->killed ? "killed" : WIFSIGNALED(c->status) ? "signal" : "exit";
  return snprintf(buf, len, "%s:%d", kind, code);
}

// id TAB pid TAB state TAB exit TAB label, a line per command (tunnels are not commands). The
// label only while the command runs (what lists it), "-" without one, and "-" once labels would
// take the reply past one frame: a replica then misses a label, never the whole list. Labels
// are base64 (the replica's choice), so no TAB or newline; a replica that reads four fields
// ignores the fifth.
char *reg_list(size_t *len) {
  size_t cap = (size_t)reg_count * 160 + 1, at = 0;
  char *buf = malloc(cap), ex[32];
  for (int i = 0; i < reg_count; i++) {
    struct command *c = reg_all[i];
    if (c->tunnel) continue;
    if (c->exited) reg_exit_text(c, ex, sizeof ex);
    const char *label = !c->exited && c->label ? c->label : "-";
    if (at + 160 + strlen(label) > CH_MAX_FRAME) label = "-";
    if (at + 160 + strlen(label) > cap) buf = realloc(buf, cap = (at + 160 + strlen(label)) * 2);
    at += (size_t)snprintf(buf + at, cap - at, "%s\t%d\t%s\t%s\t%s\n", c->id, (int)c->pid,
                           c->exited ? "exited" : "running", c->exited ? ex : "-", label);
  }
  *len = at;
  return buf;
}
