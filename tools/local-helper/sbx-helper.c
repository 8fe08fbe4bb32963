// sbx-helper: the init process of one local sandbox (PID 1 of its pid namespace).
//
// Started by bubblewrap as root inside the sandbox's namespaces, it (1) joins the sandbox's
// cgroups through directory fds the host passed in, (2) binds the exec socket in a directory
// only root can reach, (3) drops every privilege for good (bounding set, ambient, inheritable,
// uid/gid to the sandbox's unprivileged uid, no_new_privs, not dumpable), (4) reports ready,
// then serves exec requests: one relay process per connection forks the command into its own
// sub-cgroup (delegated to the sandbox uid) and multiplexes stdin/stdout/stderr/exit over the
// connection as frames: type (1 byte) + length (4 bytes, big endian) + payload.
//
//   host -> relay  'R' request (NUL-separated: "exec", cgroup name, cwd, argc, argv..., envc, env...),
//                  or "pty", cols, rows, then the same fields: the command gets a pseudo-terminal
//                  (its own session, the terminal as its controlling one and as fds 0-2, the
//                  window size asked for); its output is one merged stream of '1' frames
//                  'W' watch (no payload; the connection closes when the sandbox dies)
//                  'T' tunnel to a port of the sandbox's loopback (payload: the port; port-relay.c)
//                  'I' stdin bytes, 'E' end of stdin (a pty: the terminal's end-of-file, ^D)
//                  'Z' window size ("cols rows", a pty only: TIOCSWINSZ, the kernel sends SIGWINCH)
//                  'K' signal (decimal): to the terminal's foreground group (a pty), else the command's
//   relay -> host  'P' started (pid inside the sandbox), 'F' could not start (stage:errno:text),
//                  '1' stdout bytes, '2' stderr bytes, 'X' finished ("exit:N" or "signal:N")
//                  'C' tunnel connected (then raw bytes both ways)
//
// Written in C because it must start in about a millisecond and fork cheaply: it is on the
// path of every create and every exec.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/loop.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "blob.h"
#include "channel.h"
#include "port-relay.h"
#include "seccomp.h"

#define MAX_CG 8
#define MAX_UNMOUNT 4
#define MAX_REQUEST (1 << 20)
#define CHUNK 65536
// Largest frame either side sends (the host refuses nothing; this relay refuses larger stdin
// frames), and the size asked for the command's stdin and stdout pipes. Bulk data (tar
// streams of pause, resume and sbx cp) moves between the connection and these pipes with
// splice, so it is never copied through the relay's memory; a pipe this size lets a frame
// carry up to a megabyte, so a gigabyte costs about a thousand frames, not sixteen thousand.
#define MAX_FRAME (1 << 20)

extern char **environ;
static int cg_fds[MAX_CG];
static int n_cg;

static void die(const char *what) {
  fprintf(stderr, "sbx-helper: %s: %s\n", what, strerror(errno));
  exit(70);
}

static int write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == ENOTSOCK) n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

// Opens the file through which a process joins the cgroup `sub` of hierarchy dirfd. cgroup v1's
// per-thread "tasks" is preferred: the helper and a freshly forked command are single-threaded,
// and writing cgroup.procs takes the global threadgroup lock, which waits for an RCU grace
// period (tens of ms on a busy host) on every create and exec. v2 has only cgroup.procs.
static int open_join(int dirfd, const char *sub) {
  char path[300];
  snprintf(path, sizeof path, "%s/tasks", sub);
  int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC);
  if (fd >= 0 || errno != ENOENT) return fd;
  snprintf(path, sizeof path, "%s/cgroup.procs", sub);
  return openat(dirfd, path, O_WRONLY | O_CLOEXEC);
}

static int send_frame(int fd, char type, const void *data, uint32_t len) {
  unsigned char hdr[5] = {(unsigned char)type, len >> 24, len >> 16, len >> 8, len};
  if (write_all(fd, hdr, 5) < 0) return -1;
  return len ? write_all(fd, data, len) : 0;
}

static int read_full(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

// Reads one frame header; returns the type, or -1 on EOF/error. *len gets the payload length.
static int read_header(int fd, uint32_t *len) {
  unsigned char hdr[5];
  if (read_full(fd, hdr, 5) < 0) return -1;
  *len = ((uint32_t)hdr[1] << 24) | ((uint32_t)hdr[2] << 16) | ((uint32_t)hdr[3] << 8) | hdr[4];
  return hdr[0];
}

static void drop_privileges(uid_t uid, gid_t gid) {
  for (int cap = 0; cap <= 63; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) die("drop bounding capability");
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) die("clear ambient capabilities");
  if (setgroups(0, NULL) < 0) die("setgroups");
  if (setresgid(gid, gid, gid) < 0) die("setresgid");
  if (setresuid(uid, uid, uid) < 0) die("setresuid");
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  if (syscall(SYS_capset, &hdr, data) < 0) die("capset");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) die("dumpable");
  // Verify rather than trust: a privilege that survived is a reason not to start at all.
  if (syscall(SYS_capget, &hdr, data) < 0) die("capget");
  for (int i = 0; i < 2; i++) {
    if (data[i].effective || data[i].permitted || data[i].inheritable) {
      errno = EPERM;
      die("capabilities survived the drop");
    }
  }
  if (setuid(0) == 0) {
    errno = EPERM;
    die("could regain uid 0");
  }
}

// Mounts the workspace image (an ext4 file the host passed as an fd) on /workspace inside the
// sandbox's own mount namespace, through a loop device with autoclear: the mount and the device go
// away with the namespace, so nothing of the sandbox stays mounted on the host, even when the
// service crashes. The loop device is reached through an fd of the host's /dev that the host
// passed and that is closed before anything else runs; /dev itself is never mounted in here.
static void mount_workspace(int img_fd, int dev_fd, const char *target, uid_t uid, gid_t gid) {
  int ctl = openat(dev_fd, "loop-control", O_RDWR | O_CLOEXEC);
  if (ctl < 0) die("/dev/loop-control");
  int lfd = -1;
  char name[32];
  for (int attempt = 0; attempt < 64 && lfd < 0; attempt++) {
    int n = ioctl(ctl, LOOP_CTL_GET_FREE);
    if (n < 0) die("LOOP_CTL_GET_FREE");
    snprintf(name, sizeof name, "loop%d", n);
    int fd = -1;
    for (int i = 0; i < 100 && (fd = openat(dev_fd, name, O_RDWR | O_CLOEXEC)) < 0 && errno == ENOENT; i++) usleep(1000);
    if (fd < 0) die(name);
    struct loop_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.fd = (uint32_t)img_fd;
    cfg.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    if (ioctl(fd, LOOP_CONFIGURE, &cfg) == 0) {
      lfd = fd;
    } else {
      if (errno != EBUSY) die("LOOP_CONFIGURE");
      close(fd); /* another process took it between GET_FREE and CONFIGURE: try the next */
    }
  }
  if (lfd < 0) die("no free loop device");
  char source[64];
  snprintf(source, sizeof source, "/proc/self/fd/%d", lfd);
  if (mount(source, target, "ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, NULL) < 0) die("mount workspace");
  close(lfd);
  close(ctl);
  close(img_fd);
  close(dev_fd);
  char lf[300];
  snprintf(lf, sizeof lf, "%s/lost+found", target);
  rmdir(lf);
  if (chown(target, uid, gid) < 0 || chmod(target, 0700) < 0) die("chown workspace");
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void on_sigchld(int sig) {
  (void)sig;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

// ---- relay: one per connection -------------------------------------------------------------

struct request {
  char *cg, *cwd;
  char **argv, **envp;
  int pty;                   /* 1: run it on a pseudo-terminal of ws's size */
  struct winsize ws;
};

/** a window size field: 1..MAX_WINDOW (the host validates; this refuses what slipped past) */
#define MAX_WINDOW 10000
static int window_field(const char *f, unsigned short *out) {
  char *end;
  long v = strtol(f, &end, 10);
  if (*end || v < 1 || v > MAX_WINDOW) return -1;
  *out = (unsigned short)v;
  return 0;
}

static int parse_request(char *buf, uint32_t len, struct request *r) {
  char *end = buf + len, *p = buf;
  memset(&r->ws, 0, sizeof r->ws);
  r->pty = !strcmp(p, "pty"); /* relay() NUL-terminated the payload */
  if (r->pty) { /* "pty", cols, rows, then an exec request's fields after its "exec" */
    char *f[3];
    for (int i = 0; i < 3; i++) {
      if (p >= end) return -1;
      f[i] = p;
      p += strnlen(p, (size_t)(end - p)) + 1;
    }
    if (window_field(f[1], &r->ws.ws_col) < 0 || window_field(f[2], &r->ws.ws_row) < 0) return -1;
  } else if (strcmp(p, "exec") != 0) {
    return -1;
  } else {
    p += strnlen(p, (size_t)(end - p)) + 1;
  }
  char *fields[4] = {"exec"};
  for (int i = 1; i < 4; i++) {
    if (p >= end) return -1;
    fields[i] = p;
    p += strnlen(p, (size_t)(end - p)) + 1;
  }
  r->cg = fields[1];
  r->cwd = fields[2];
  for (const char *c = r->cg; *c; c++) {
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-')) return -1;
  }
  long argc = strtol(fields[3], NULL, 10);
  if (argc < 1 || argc > 65536) return -1;
  r->argv = calloc((size_t)argc + 1, sizeof(char *));
  for (long i = 0; i < argc; i++) {
    if (p >= end) return -1;
    r->argv[i] = p;
    p += strnlen(p, (size_t)(end - p)) + 1;
  }
  if (p >= end) return -1;
  long envc = strtol(p, NULL, 10);
  p += strnlen(p, (size_t)(end - p)) + 1;
  if (envc < 0 || envc > 65536) return -1;
  r->envp = calloc((size_t)envc + 1, sizeof(char *));
  for (long i = 0; i < envc; i++) {
    if (p >= end) return -1;
    r->envp[i] = p;
    p += strnlen(p, (size_t)(end - p)) + 1;
  }
  return 0;
}

// Ends a connection after the last frame without losing it: closing a unix socket that still
// has unread input (stdin the command never took) resets it, and the host could miss the frame.
// So: stop sending, discard input until the host closes (it does on 'X' and 'F'), then exit.
static void finish_connection(int sock) {
  shutdown(sock, SHUT_WR);
  char buf[4096];
  struct pollfd p = {sock, POLLIN, 0};
  while (poll(&p, 1, 5000) > 0 && read(sock, buf, sizeof buf) > 0) {
  }
  _exit(0);
}

static void fail_start(int sock, const char *stage, int err) {
  char msg[256];
  int n = snprintf(msg, sizeof msg, "%s:%d:%s", stage, err, strerror(err));
  send_frame(sock, 'F', msg, (uint32_t)n);
  finish_connection(sock);
}

struct child_error {
  int stage; /* 1 cgroup, 2 chdir, 3 exec, 4 seccomp */
  int err;
};

// A pty's command (slave: the terminal's path) opens it as the first terminal of its new session,
// which makes it the controlling terminal (TIOCSCTTY says so explicitly), and uses it as 0-2.
static void run_child(struct request *r, int in, int out, int err, int *procs, int errpipe, const char *slave) {
  struct child_error ce = {0, 0};
  setsid();
  if (slave) {
    int t = open(slave, O_RDWR);
    if (t < 0 || ioctl(t, TIOCSCTTY, 0) < 0) {
      ce = (struct child_error){5, errno};
      goto fail;
    }
    in = out = err = t;
  }
  for (int i = 0; i < n_cg; i++) {
    if (write(procs[i], "0", 1) < 0) {
      ce = (struct child_error){1, errno};
      goto fail;
    }
    close(procs[i]);
  }
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, "0", 1) < 0) { /* best effort: the helper is -1000, commands are not */
    }
    close(fd);
  }
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, NULL);
  signal(SIGPIPE, SIG_DFL);
  signal(SIGCHLD, SIG_DFL);
  if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
    ce = (struct child_error){3, errno};
    goto fail;
  }
  if (slave && in > 2) close(in);
  if (chdir(r->cwd) < 0) {
    ce = (struct child_error){2, errno};
    goto fail;
  }
  environ = r->envp;
  // last step before exec: the filter (seccomp.c) covers the command and all it starts
  if (sbx_seccomp_apply() < 0) {
    ce = (struct child_error){4, errno};
    goto fail;
  }
  execvp(r->argv[0], r->argv);
  ce = (struct child_error){3, errno};
fail:
  if (write(errpipe, &ce, sizeof ce) < 0) {
  }
  _exit(127);
}

// Moves exactly len bytes from the pipe `from` to the socket; the bytes are known to be in the
// pipe (FIONREAD said so and only this process reads it). splice hands the pipe's pages to the
// socket; a kernel that cannot splice into this socket gets a plain read and send.
static int splice_out(int from, int sock, size_t len) {
  while (len > 0) {
    ssize_t n = splice(from, NULL, sock, NULL, len, SPLICE_F_MOVE);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
      char buf[CHUNK];
      n = read(from, buf, len < sizeof buf ? len : sizeof buf);
      if (n <= 0 || write_all(sock, buf, (size_t)n) < 0) return -1;
    } else if (n <= 0) {
      return -1;
    }
    len -= (size_t)n;
  }
  return 0;
}

// Relays what the command's output pipe holds as one frame. Returns 0 at end of output.
static int relay_output_once(int sock, int fd, char type) {
  int avail = 0;
  if (ioctl(fd, FIONREAD, &avail) < 0 || avail <= 0) {
    // nothing buffered: end of output, or a wakeup without data
    char buf[CHUNK];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (send_frame(sock, type, buf, (uint32_t)n) < 0) _exit(0);
      return 1;
    }
    return n < 0 && (errno == EINTR || errno == EAGAIN) ? 1 : 0;
  }
  uint32_t len = avail > MAX_FRAME ? MAX_FRAME : (uint32_t)avail;
  unsigned char hdr[5] = {(unsigned char)type, len >> 24, len >> 16, len >> 8, len};
  if (write_all(sock, hdr, 5) < 0 || splice_out(fd, sock, len) < 0) _exit(0);
  return 1;
}

static void relay_output(int sock, int *fd, char type) {
  if (!relay_output_once(sock, *fd, type)) {
    close(*fd);
    *fd = -1;
  }
}

// After the command exited: relays what its pipe still holds (background processes it left may
// keep the pipe open, so the end of output is not waited for).
static void drain_output(int sock, int fd, char type) {
  if (fd < 0) return;
  int avail = 0;
  while (ioctl(fd, FIONREAD, &avail) == 0 && avail > 0) relay_output_once(sock, fd, type);
}

// Discards n payload bytes of a stdin frame whose command no longer reads its input.
static int skip_input(int sock, uint32_t n) {
  char buf[CHUNK];
  while (n > 0) {
    ssize_t r = read(sock, buf, n < sizeof buf ? n : sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    n -= (uint32_t)r;
  }
  return 0;
}

// The host dropped the connection before the command ended (it gave up on it, or the service
// died): ends every process of the command, also those that left its process group, through its
// cgroup (the cgroup dirs are the sandbox uid's, as are the processes). The command itself is
// this relay's child and is reaped here; what else dies is reaped by the init. Bounded rounds:
// a killed process cannot fork, so the list empties at once unless something is stuck.
static void kill_cgroup(const char *cg, pid_t child) {
  char path[300];
  for (int round = 0; round < 50; round++) {
    int found = 0;
    for (int i = 0; i < n_cg; i++) {
      snprintf(path, sizeof path, "%s/cgroup.kill", cg);
      int kfd = openat(cg_fds[i], path, O_WRONLY | O_CLOEXEC); /* v2: the kernel kills them all */
      if (kfd >= 0) {
        if (write(kfd, "1", 1) < 0) {
        }
        close(kfd);
      }
      snprintf(path, sizeof path, "%s/cgroup.procs", cg);
      int fd = openat(cg_fds[i], path, O_RDONLY | O_CLOEXEC);
      FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
      long p;
      while (f && fscanf(f, "%ld", &p) == 1) {
        if (p > 0 && kill((pid_t)p, SIGKILL) == 0) found = 1;
      }
      if (f) fclose(f);
      else if (fd >= 0) close(fd);
    }
    waitpid(child, NULL, WNOHANG);
    if (!found) return;
    usleep(1000);
  }
}

// ---- a command on a pseudo-terminal ----------------------------------------------------------

/** how long the end of a pty's output is waited for after its command exited (see drain_pty) */
#define PTY_QUIET_MS 100
#define PTY_DRAIN_MS 2000

struct pty_input {
  char buf[CHUNK];
  size_t len, off; /* read from the socket, not yet taken by the terminal */
  uint32_t left;   /* bytes of the current 'I' frame still in the socket */
};

/** the terminal's output as one '1' frame; 0 once no process holds the terminal (EIO) */
static int pty_output(int sock, int master) {
  char buf[CHUNK];
  ssize_t n = read(master, buf, sizeof buf);
  if (n > 0) return send_frame(sock, '1', buf, (uint32_t)n) < 0 ? -1 : 1;
  return n < 0 && (errno == EINTR || errno == EAGAIN) ? 1 : 0;
}

static void pty_write(struct pty_input *in, int master) {
  while (in->off < in->len) {
    ssize_t n = write(master, in->buf + in->off, in->len - in->off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return; /* the terminal's input queue is full: poll for room */
    if (n <= 0) { /* nobody holds the terminal any more: the input goes nowhere */
      in->off = in->len;
      return;
    }
    in->off += (size_t)n;
  }
  in->off = in->len = 0;
}

// A control frame of a pty: 'Z' window size, 'K' signal, 'E' end of input (the terminal's
// end-of-file character, as a user typing ^D). Unknown types are skipped. -1: the host is gone.
static int pty_control(int sock, int type, uint32_t len, int master, pid_t pid, struct pty_input *in) {
  char arg[64] = {0};
  if (len >= sizeof arg) return skip_input(sock, len);
  if (len && read_full(sock, arg, len) < 0) return -1;
  if (type == 'Z') {
    struct winsize ws = {0};
    char *rows = strchr(arg, ' ');
    if (rows && !window_field(rows + 1, &ws.ws_row) && (*rows = 0, !window_field(arg, &ws.ws_col)))
      ioctl(master, TIOCSWINSZ, &ws);
  } else if (type == 'K') {
    int sig = atoi(arg);
    pid_t fg = tcgetpgrp(master); /* the job in front: what ^C would reach */
    if (sig > 0 && sig < 65) fg > 0 ? kill(-fg, sig) : kill(-pid, sig);
  } else if (type == 'E' && in->len < sizeof in->buf) {
    in->buf[in->len++] = 4;
    pty_write(in, master);
  }
  return 0;
}

static int pty_socket(int sock, int master, pid_t pid, struct pty_input *in) {
  if (in->left > 0) {
    ssize_t n = read(sock, in->buf, in->left < sizeof in->buf ? in->left : sizeof in->buf);
    if (n < 0 && errno == EINTR) return 0;
    if (n <= 0) return -1;
    in->left -= (uint32_t)n;
    in->len = (size_t)n;
    in->off = 0;
    pty_write(in, master);
    return 0;
  }
  uint32_t len;
  int type = read_header(sock, &len);
  if (type < 0 || len > MAX_FRAME) return -1;
  if (type == 'I') in->left = len;
  else return pty_control(sock, type, len, master, pid, in);
  return 0;
}

// After the command exited: what the terminal still delivers, until it is quiet for a moment,
// closed (EIO), or a bound passed (a background process may hold it and write forever).
static void drain_pty(int sock, int master) {
  double until = now_ms() + PTY_DRAIN_MS;
  struct pollfd p = {master, POLLIN, 0};
  while (now_ms() < until && poll(&p, 1, PTY_QUIET_MS) > 0)
    if (pty_output(sock, master) <= 0) return;
}

// The loop of a pty's command: the terminal's output out as '1' frames, input frames in (read
// and written: neither end is a pipe, so no splice), control frames applied. Returns at the
// command's exit (0), or -1 when the host went away.
static int relay_pty(int sock, int pidfd, pid_t pid, int master) {
  static struct pty_input in;
  int open_out = 1;
  for (;;) {
    int pending = in.off < in.len;
    struct pollfd p[3] = {{pidfd, POLLIN, 0}, {-1, 0, 0}, {-1, 0, 0}};
    if (open_out) p[1] = (struct pollfd){master, (short)(POLLIN | (pending ? POLLOUT : 0)), 0};
    if (!pending) p[2] = (struct pollfd){sock, POLLIN, 0};
    if (poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (p[1].revents & POLLOUT) pty_write(&in, master);
    if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      int r = pty_output(sock, master);
      if (r < 0) return -1;
      if (r == 0) open_out = 0, in.off = in.len = 0;
    }
    if (p[2].revents && pty_socket(sock, master, pid, &in) < 0) return -1;
    if (p[0].revents) {
      drain_pty(sock, master);
      return 0;
    }
  }
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
  fcntl(m, F_SETFL, O_NONBLOCK);
  return m;
}

static void relay_exec(int sock, char *buf, uint32_t len) {
  struct request r;
  if (parse_request(buf, len, &r) < 0) fail_start(sock, "request", EINVAL);
  int procs[MAX_CG];
  for (int i = 0; i < n_cg; i++) {
    if (mkdirat(cg_fds[i], r.cg, 0755) < 0 && errno != EEXIST) fail_start(sock, "cgroup", errno);
    procs[i] = open_join(cg_fds[i], r.cg);
    if (procs[i] < 0) fail_start(sock, "cgroup", errno);
  }
  int in[2], out[2], err[2], ep[2], master = -1;
  char slave[64];
  if (r.pty && (master = open_pty(&r.ws, slave, sizeof slave)) < 0) fail_start(sock, "pty", errno);
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0)
    fail_start(sock, "pipe", errno);
  pid_t pid = fork();
  if (pid < 0) fail_start(sock, "fork", errno);
  if (pid == 0) run_child(&r, in[0], out[1], err[1], procs, ep[1], r.pty ? slave : NULL);
  for (int i = 0; i < n_cg; i++) close(procs[i]);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  close(ep[1]);
  struct child_error ce;
  if (read(ep[0], &ce, sizeof ce) == (ssize_t)sizeof ce) {
    waitpid(pid, NULL, 0);
    fail_start(sock,
               ce.stage == 1   ? "cgroup"
               : ce.stage == 2 ? "chdir"
               : ce.stage == 4 ? "seccomp"
               : ce.stage == 5 ? "pty"
                               : "exec",
               ce.err);
  }
  close(ep[0]);
  char msg[32];
  int n = snprintf(msg, sizeof msg, "%d", pid);
  if (send_frame(sock, 'P', msg, (uint32_t)n) < 0) goto host_gone;

  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) fail_start(sock, "pidfd_open", errno);
  int status = 0;
  if (r.pty) {
    close(in[1]), close(out[0]), close(err[0]);
    if (relay_pty(sock, pidfd, pid, master) < 0) goto host_gone;
    goto exited;
  }
  int stdin_fd = in[1], out_fd = out[0], err_fd = err[0];
  fcntl(stdin_fd, F_SETFL, O_NONBLOCK);
  // best effort: past the uid's pipe allowance the kernel keeps the default 64 KiB
  fcntl(stdin_fd, F_SETPIPE_SZ, MAX_FRAME);
  fcntl(out_fd, F_SETPIPE_SZ, MAX_FRAME);
  uint32_t in_left = 0; /* bytes of the current stdin frame still in the socket */
  int in_full = 0;      /* the command's stdin pipe had no room at the last splice */
  for (;;) {
    struct pollfd p[5];
    int np = 0, i_sock = -1, i_in = -1, i_out = -1, i_err = -1;
    p[np] = (struct pollfd){pidfd, POLLIN, 0};
    int i_pid = np++;
    if (!in_full) p[i_sock = np++] = (struct pollfd){sock, POLLIN, 0};
    else p[i_in = np++] = (struct pollfd){stdin_fd, POLLOUT, 0};
    if (out_fd >= 0) p[i_out = np++] = (struct pollfd){out_fd, POLLIN, 0};
    if (err_fd >= 0) p[i_err = np++] = (struct pollfd){err_fd, POLLIN, 0};
    if (poll(p, (nfds_t)np, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (i_out >= 0 && p[i_out].revents) relay_output(sock, &out_fd, '1');
    if (i_err >= 0 && p[i_err].revents) relay_output(sock, &err_fd, '2');
    if (i_in >= 0 && p[i_in].revents) in_full = 0;
    if (i_sock >= 0 && p[i_sock].revents) {
      if (in_left == 0) {
        // a new frame; its payload is moved once the next poll says it is here
        uint32_t len2;
        int type = read_header(sock, &len2);
        if (type < 0 || len2 > MAX_FRAME) goto host_gone;
        if (type == 'I' && stdin_fd >= 0) {
          in_left = len2;
        } else {
          if (skip_input(sock, len2) < 0) goto host_gone;
          if (type == 'E' && stdin_fd >= 0) {
            close(stdin_fd);
            stdin_fd = -1;
          }
        }
      } else {
        ssize_t n = splice(sock, NULL, stdin_fd, NULL, in_left, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
          in_left -= (uint32_t)n;
        } else if (n == 0) {
          goto host_gone;
        } else if (errno == EAGAIN) {
          in_full = 1; /* the socket had data (poll said so): the pipe is full */
        } else if (errno != EINTR) {
          // EPIPE: the command closed its stdin; drop the rest of this frame and later ones
          close(stdin_fd);
          stdin_fd = -1;
          if (skip_input(sock, in_left) < 0) goto host_gone;
          in_left = 0;
        }
      }
    }
    if (p[i_pid].revents) break;
  }
  drain_output(sock, out_fd, '1');
  drain_output(sock, err_fd, '2');
exited:
  waitpid(pid, &status, 0);
  n = WIFSIGNALED(status) ? snprintf(msg, sizeof msg, "signal:%d", WTERMSIG(status))
                          : snprintf(msg, sizeof msg, "exit:%d", WEXITSTATUS(status));
  send_frame(sock, 'X', msg, (uint32_t)n);
  finish_connection(sock);
host_gone:
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  kill_cgroup(r.cg, pid);
  _exit(0);
}

static void relay(int sock) {
  signal(SIGCHLD, SIG_DFL);
  signal(SIGPIPE, SIG_IGN);
  uint32_t len;
  int type = read_header(sock, &len);
  if (type == 'W') {
    char b;
    while (read(sock, &b, 1) > 0 || errno == EINTR) {
    }
    _exit(0);
  }
  if ((type != 'R' && type != 'T') || len > MAX_REQUEST) _exit(0);
  char *buf = malloc(len + 1);
  if (read_full(sock, buf, len) < 0) _exit(0);
  buf[len] = 0;
  if (type == 'T') port_relay(sock, buf, len);
  relay_exec(sock, buf, len);
}

// ---- init ------------------------------------------------------------------------------------

int main(int argc, char **argv) {
  // the unprivileged mode of a Kubernetes pod (channel.c, daemon.c): same binary, no setup here
  if (argc > 1 && !strcmp(argv[1], "channel")) return sbx_channel_main(argc, argv);
  // the pod moving its own snapshot layers (blob.c): no setup either
  if (argc > 1 && !strcmp(argv[1], "blob")) return sbx_blob_main(argc, argv);
  double t_start = now_ms(), t_mount = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  const char *sock_path = NULL, *ws_target = NULL;
  int ready_fd = -1, ws_fd = -1, dev_fd = -1, n_unmount = 0;
  const char *unmount_paths[MAX_UNMOUNT];
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--uid")) uid = (uid_t)strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--gid")) gid = (gid_t)strtoul(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--socket")) sock_path = argv[i + 1];
    else if (!strcmp(argv[i], "--ready-fd")) ready_fd = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--cg-fd") && n_cg < MAX_CG) cg_fds[n_cg++] = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--workspace-fd")) ws_fd = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--workspace")) ws_target = argv[i + 1];
    else if (!strcmp(argv[i], "--dev-fd")) dev_fd = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--unmount") && n_unmount < MAX_UNMOUNT) unmount_paths[n_unmount++] = argv[i + 1];
    else {
      fprintf(stderr, "sbx-helper: unknown argument %s\n", argv[i]);
      return 64;
    }
  }
  if (!uid || !gid || !sock_path) {
    fprintf(stderr, "usage: sbx-helper --uid UID --gid GID --socket PATH [--ready-fd FD] [--cg-fd FD]... [--workspace-fd FD --workspace DIR --dev-fd FD] [--unmount PATH]...\n");
    return 64;
  }
  // setup is the platform's work, not the tenant's: it runs before the helper joins the sandbox's
  // cgroups, whose CPU weight (the size class's cpuRequest) would slow it down on a busy host
  if (ws_fd >= 0) {
    if (dev_fd < 0 || !ws_target) {
      fprintf(stderr, "sbx-helper: --workspace-fd needs --workspace and --dev-fd\n");
      return 64;
    }
    mount_workspace(ws_fd, dev_fd, ws_target, uid, gid);
    t_mount = now_ms() - t_start;
  }
  // joining the sandbox's cgroups is the last step before ready (below): from then on the size
  // class's CPU weight applies. The files are opened now, as root; the kernel checks the opener.
  int join_fds[MAX_CG];
  for (int i = 0; i < n_cg; i++) {
    fcntl(cg_fds[i], F_SETFD, FD_CLOEXEC);
    join_fds[i] = open_join(cg_fds[i], "init");
    if (join_fds[i] < 0) die("init cgroup");
  }
  // the OOM killer should pick a command, not the init (which would end the whole sandbox);
  // best effort: a host that already raised our floor (containers) refuses, which is harmless
  int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, "-1000", 5) < 0 && write(fd, "-999", 4) < 0) {
    }
    close(fd);
  }
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) die("socket");
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(sock_path) >= sizeof addr.sun_path) {
    errno = ENAMETOOLONG;
    die(sock_path);
  }
  strcpy(addr.sun_path, sock_path);
  unlink(sock_path);
  if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0) die("bind");
  if (listen(lfd, 256) < 0) die("listen");
  // the socket stays reachable at its host path (it is bound to the host's inode) after its
  // directory's mount goes; a running helper needs its own binary's mount no more. Their sources
  // are host paths (the state dir, the checkout): gone, /proc/self/mountinfo shows them to no one
  for (int i = 0; i < n_unmount; i++)
    if (umount2(unmount_paths[i], MNT_DETACH) < 0) die(unmount_paths[i]);
  drop_privileges(uid, gid);

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  if (chdir("/") < 0) die("chdir /");
  for (int i = 0; i < n_cg; i++) {
    if (write(join_fds[i], "0", 1) < 0) die("join cgroup");
    close(join_fds[i]);
  }
  fprintf(stderr, "sbx-helper: ready uid=%u gid=%u cgroups=%d workspace_mount_ms=%.1f setup_ms=%.1f\n", (unsigned)uid, (unsigned)gid, n_cg, t_mount,
          now_ms() - t_start);
  if (ready_fd >= 0) {
    if (write(ready_fd, "ready\n", 6) < 0) die("ready fd");
    close(ready_fd);
  }
  for (;;) {
    int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
      die("accept");
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(lfd);
      relay(c);
      _exit(0);
    }
    if (pid < 0) {
      char msg[128];
      int n = snprintf(msg, sizeof msg, "fork:%d:%s (the sandbox is at its pids limit)", errno, strerror(errno));
      send_frame(c, 'F', msg, (uint32_t)n);
    }
    close(c);
  }
}
