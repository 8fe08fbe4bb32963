// sbx-helper blob: a snapshot layer moved between the pod and an OCI registry by the pod itself,
// so its bytes never cross the Kubernetes exec path (runtime/k8s/podLayers.ts runs these over
// the command channel; docs/kubernetes-runtime.md, "Snapshots at registry speed").
//
//   blob push --url <registry>/v2/<repo>/blobs/uploads/ [--auth-stdin] [--chunk-bytes N]
//             [--tar-root NAME] -- CMD ARGS...
//       runs CMD (tar -c) and uploads its output as one blob: POST, then one PATCH whose body
//       streams as the archive comes (chunked encoding; or, with --chunk-bytes N, one PATCH
//       per N bytes with Content-Range, for registries that want parts), then PUT ?digest=.
//       --tar-root drops the archive's entry for NAME itself and counts the others, as
//       runtime/snapshot/tarFilter.ts DropRootEntry does. Prints
//       {"digest":"sha256:…","size":N,"entries":E} (entries -1 without --tar-root).
//   blob pull --url <registry>/v2/<repo>/blobs/<digest> --digest D [--size N] [--auth-stdin]
//             -- CMD ARGS...
//       GETs the blob (following up to 5 redirects) into CMD's stdin (tar -x), hashing it; a
//       digest or size that differs kills CMD.
//
// --auth-stdin: the first line of stdin is the Authorization header's value (never argv, which
// any process of the pod can read), sent only to the URL's own host and port.
// stderr: "sbx-progress <bytes>" every 4 MiB moved, then any error. Exit codes: 0 done;
// 2 CMD failed (push); 3 the registry could not be reached, answered an error or cut the body;
// 4 digest or size mismatch (pull); 64 usage, or a registry this helper cannot speak to
// (https; a host name: only IP addresses and localhost, as a static binary has no resolver);
// pull otherwise exits with CMD's status.
//
// Plain HTTP/1.1 on one keep-alive connection. Memory: 1 MiB (or one --chunk-bytes part) plus
// small buffers; response lines and headers are bounded.
#define _GNU_SOURCE
#include "blob.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sha256.h"

extern char **environ;

#define EXIT_CMD 2
#define EXIT_REGISTRY 3
#define EXIT_MISMATCH 4
#define EXIT_USAGE 64
#define LINE_MAX_BYTES 16384
#define MAX_HEADERS 100
#define PROGRESS_EVERY (4ull << 20)
#define MAX_REDIRECTS 5
#define MAX_EXTENDED (1u << 20)
#define STREAM_PIECE (1u << 20)
// reads from the socket and the command's pipe, and the pipe's size: fewer, larger copies
#define IO_BYTES (1 << 20)

static const char *verb = "blob";

static void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "sbx-helper blob %s: ", verb);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(code);
}

/** copies src into dst (cap bytes with the NUL); -1 when it does not fit (dst then holds a prefix) */
static int copy_str(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap);
  if (n == cap) {
    memcpy(dst, src, cap - 1);
    dst[cap - 1] = 0;
    return -1;
  }
  memcpy(dst, src, n + 1);
  return 0;
}

// ---- hashing beside the I/O ---------------------------------------------------------------
// SHA-256 costs about as much CPU as moving the bytes; on its own thread it overlaps the socket
// and the pipe instead of stalling them. The bytes are copied into a ring of slots (a copy is
// ~20x cheaper than hashing them) and hashed in order.

#define HASH_SLOTS 4
#define HASH_SLOT_BYTES (1u << 20)

struct hasher {
  struct sha256 sum;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *slot[HASH_SLOTS];
  size_t len[HASH_SLOTS];
  unsigned long long head, tail; // slots filled, slots hashed
  int done;
};

static void *hash_loop(void *arg) {
  struct hasher *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (h->tail == h->head && !h->done) pthread_cond_wait(&h->cv, &h->mu);
    if (h->tail == h->head) break; // done and drained
    unsigned i = (unsigned)(h->tail % HASH_SLOTS);
    pthread_mutex_unlock(&h->mu);
    sha256_update(&h->sum, h->slot[i], h->len[i]);
    pthread_mutex_lock(&h->mu);
    h->tail++;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static void hasher_start(struct hasher *h) {
  memset(h, 0, sizeof *h);
  sha256_init(&h->sum);
  pthread_mutex_init(&h->mu, NULL);
  pthread_cond_init(&h->cv, NULL);
  for (int i = 0; i < HASH_SLOTS; i++)
    if (!(h->slot[i] = malloc(HASH_SLOT_BYTES))) die(EXIT_USAGE, "out of memory");
  if (pthread_create(&h->thread, NULL, hash_loop, h)) die(EXIT_USAGE, "cannot start the hashing thread");
}

static void hasher_feed(struct hasher *h, const char *buf, size_t n) {
  while (n > 0) {
    size_t m = n < HASH_SLOT_BYTES ? n : HASH_SLOT_BYTES;
    pthread_mutex_lock(&h->mu);
    while (h->head - h->tail == HASH_SLOTS) pthread_cond_wait(&h->cv, &h->mu);
    unsigned i = (unsigned)(h->head % HASH_SLOTS);
    pthread_mutex_unlock(&h->mu);
    memcpy(h->slot[i], buf, m); // the slot is free: the hashing thread is past it
    h->len[i] = m;
    pthread_mutex_lock(&h->mu);
    h->head++;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    buf += m;
    n -= m;
  }
}

/** waits for every byte fed, then writes the digest ("sha256:<hex>") */
static void hasher_finish(struct hasher *h, char out[72]) {
  pthread_mutex_lock(&h->mu);
  h->done = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
  pthread_join(h->thread, NULL);
  sha256_hex(&h->sum, out);
}

// ---- URLs ----------------------------------------------------------------------------------

struct url {
  char host[256]; // as written (brackets removed for IPv6)
  char port[8];
  char path[4096]; // path and query
};

static void parse_url(const char *s, struct url *u) {
  if (!strncmp(s, "https://", 8))
    die(EXIT_USAGE, "https is not built into this helper yet; use the exec path");
  if (strncmp(s, "http://", 7)) die(EXIT_USAGE, "not an http:// URL");
  const char *h = s + 7, *slash = strchr(h, '/');
  size_t hl = slash ? (size_t)(slash - h) : strlen(h);
  char hostport[300];
  if (hl == 0 || hl >= sizeof hostport) die(EXIT_USAGE, "URL without a usable host");
  memcpy(hostport, h, hl);
  hostport[hl] = 0;
  char *port = NULL;
  if (hostport[0] == '[') {
    char *end = strchr(hostport, ']');
    if (!end) die(EXIT_USAGE, "bad IPv6 host in URL");
    *end = 0;
    if (copy_str(u->host, sizeof u->host, hostport + 1) < 0) die(EXIT_USAGE, "URL host too long");
    if (end[1] == ':') port = end + 2;
  } else {
    char *colon = strrchr(hostport, ':');
    if (colon) *colon = 0, port = colon + 1;
    if (copy_str(u->host, sizeof u->host, hostport) < 0) die(EXIT_USAGE, "URL host too long");
  }
  if (copy_str(u->port, sizeof u->port, port && *port ? port : "80") < 0) die(EXIT_USAGE, "URL port too long");
  if (copy_str(u->path, sizeof u->path, slash ? slash : "/") < 0) die(EXIT_USAGE, "URL path too long");
}

/** A Location header against the URL it answered: absolute, host-relative or path-relative. */
static void resolve_location(const struct url *base, const char *loc, struct url *out) {
  if (!strncmp(loc, "http://", 7) || !strncmp(loc, "https://", 8)) {
    parse_url(loc, out);
    return;
  }
  *out = *base;
  if (loc[0] == '/') {
    if (copy_str(out->path, sizeof out->path, loc) < 0) die(EXIT_REGISTRY, "the registry's Location is too long");
    return;
  }
  char dir[4096];
  copy_str(dir, sizeof dir, base->path);
  char *q = strchr(dir, '?');
  if (q) *q = 0;
  char *last = strrchr(dir, '/');
  if (last) last[1] = 0;
  if (snprintf(out->path, sizeof out->path, "%s%s", dir, loc) >= (int)sizeof out->path)
    die(EXIT_REGISTRY, "the registry's Location is too long");
}

static int same_origin(const struct url *a, const struct url *b) {
  return !strcmp(a->host, b->host) && !strcmp(a->port, b->port);
}

/** the path without its query (which may hold a token), for messages */
static const char *shown(const char *path) {
  static char buf[512];
  copy_str(buf, sizeof buf, path);
  char *q = strchr(buf, '?');
  if (q) *q = 0;
  return buf;
}

// ---- one keep-alive connection ----------------------------------------------------------------

struct conn {
  int fd;
  char host[256], port[8];
  char rbuf[IO_BYTES];
  size_t rpos, rlen;
};

static void conn_close(struct conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->rpos = c->rlen = 0;
}

static int conn_open(struct conn *c, const struct url *u) {
  if (c->fd >= 0 && !strcmp(c->host, u->host) && !strcmp(c->port, u->port)) return 0;
  conn_close(c);
  const char *host = strcmp(u->host, "localhost") ? u->host : "127.0.0.1";
  char *end;
  unsigned long port = strtoul(u->port, &end, 10);
  if (*end || port == 0 || port > 65535) die(EXIT_USAGE, "bad port %s", u->port);
  struct sockaddr_storage ss;
  socklen_t len;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    len = sizeof *v6;
  } else {
    die(EXIT_USAGE, "registry host %s is not an IP address (a static helper has no resolver)", u->host);
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  c->fd = fd;
  copy_str(c->host, sizeof c->host, u->host);
  copy_str(c->port, sizeof c->port, u->port);
  return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/** up to n buffered-or-read bytes; 0 at EOF, -1 on error */
static ssize_t conn_read(struct conn *c, void *out, size_t n) {
  if (c->rpos == c->rlen) {
    ssize_t r;
    do r = read(c->fd, c->rbuf, sizeof c->rbuf);
    while (r < 0 && errno == EINTR);
    if (r <= 0) return r;
    c->rpos = 0;
    c->rlen = (size_t)r;
  }
  size_t k = c->rlen - c->rpos < n ? c->rlen - c->rpos : n;
  memcpy(out, c->rbuf + c->rpos, k);
  c->rpos += k;
  return (ssize_t)k;
}

/** one CRLF-terminated line without its end; -1 at EOF, error or a line over the bound */
static int read_line(struct conn *c, char *out, size_t max) {
  size_t n = 0;
  for (;;) {
    char ch;
    if (conn_read(c, &ch, 1) != 1) return -1;
    if (ch == '\n') break;
    if (n + 1 >= max) return -1;
    out[n++] = ch;
  }
  if (n && out[n - 1] == '\r') n--;
  out[n] = 0;
  return (int)n;
}

// ---- requests and responses ------------------------------------------------------------------

struct response {
  int status;
  long long length; // -1: unknown (read to close) unless chunked
  int chunked, close;
  char location[4096];
};

static const char *auth_value; // the Authorization header, or NULL
static struct url origin;       // where auth may go

static int send_head(struct conn *c, const char *method, const struct url *u, const char *extra,
                     long long body) {
  char head[8192];
  int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s%s%s:%s\r\nUser-Agent: sbx-helper\r\n", method,
                   u->path, strchr(u->host, ':') ? "[" : "", u->host, strchr(u->host, ':') ? "]" : "", u->port);
  if (auth_value && same_origin(u, &origin))
    n += snprintf(head + n, sizeof head - (size_t)n, "Authorization: %s\r\n", auth_value);
  if (body >= 0) n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %lld\r\n", body);
  n += snprintf(head + n, sizeof head - (size_t)n, "%s\r\n", extra ? extra : "");
  if (n >= (int)sizeof head) die(EXIT_USAGE, "request head too long");
  return write_all(c->fd, head, (size_t)n);
}

static int read_head(struct conn *c, struct response *r) {
  char line[LINE_MAX_BYTES];
  memset(r, 0, sizeof *r);
  r->length = -1;
  if (read_line(c, line, sizeof line) < 0) return -1;
  if (strncmp(line, "HTTP/1.", 7) || strlen(line) < 12) return -1;
  r->status = atoi(line + 9);
  if (!strncmp(line, "HTTP/1.0", 8)) r->close = 1;
  for (int i = 0;; i++) {
    if (i > MAX_HEADERS) return -1;
    int n = read_line(c, line, sizeof line);
    if (n < 0) return -1;
    if (n == 0) break;
    char *colon = strchr(line, ':');
    if (!colon) continue;
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (!strcasecmp(line, "content-length")) r->length = strtoll(v, NULL, 10);
    else if (!strcasecmp(line, "transfer-encoding") && strcasestr(v, "chunked")) r->chunked = 1;
    else if (!strcasecmp(line, "connection") && strcasestr(v, "close")) r->close = 1;
    else if (!strcasecmp(line, "location") && copy_str(r->location, sizeof r->location, v) < 0) return -1;
  }
  if (r->status == 204 || r->status == 304 || (r->status >= 100 && r->status < 200)) r->length = 0;
  return 0;
}

typedef int (*sink_fn)(void *ctx, const char *buf, size_t n);

/** Reads the body to its end into sink; 0 when it ended where it said it would. */
static int read_body(struct conn *c, const struct response *r, sink_fn sink, void *ctx) {
  static char buf[IO_BYTES];
  if (r->chunked) {
    char line[LINE_MAX_BYTES];
    for (;;) {
      if (read_line(c, line, sizeof line) < 0) return -1;
      unsigned long long left = strtoull(line, NULL, 16);
      if (left == 0) {
        while (read_line(c, line, sizeof line) > 0) {} // trailers
        return 0;
      }
      while (left > 0) {
        ssize_t k = conn_read(c, buf, left < sizeof buf ? left : sizeof buf);
        if (k <= 0) return -1;
        if (sink(ctx, buf, (size_t)k) < 0) return -2;
        left -= (unsigned long long)k;
      }
      if (read_line(c, line, sizeof line) != 0) return -1;
    }
  }
  long long left = r->length;
  while (left != 0) {
    ssize_t k = conn_read(c, buf, left < 0 || left > (long long)sizeof buf ? sizeof buf : (size_t)left);
    if (k == 0 && left < 0) return 0; // to close
    if (k <= 0) return -1;
    if (sink(ctx, buf, (size_t)k) < 0) return -2;
    if (left > 0) left -= k;
  }
  return 0;
}

struct snippet {
  char text[301];
  size_t n;
};

static int keep_snippet(void *ctx, const char *buf, size_t n) {
  struct snippet *s = ctx;
  size_t room = sizeof s->text - 1 - s->n;
  size_t k = n < room ? n : room;
  memcpy(s->text + s->n, buf, k);
  s->n += k;
  s->text[s->n] = 0;
  return 0;
}

/**
 * One request with an in-memory body (or none: body NULL, len 0), its response's body kept as
 * a snippet; reconnects once when a kept-alive connection turns out closed. The response is
 * read to its end, so the connection can be reused.
 */
static void request(struct conn *c, const char *method, const struct url *u, const char *extra, const char *body,
                    size_t len, struct response *r, struct snippet *s) {
  for (int attempt = 0;; attempt++) {
    int reused = c->fd >= 0 && !strcmp(c->host, u->host) && !strcmp(c->port, u->port);
    if (conn_open(c, u) < 0)
      die(EXIT_REGISTRY, "%s %s: connect %s:%s: %s", method, shown(u->path), u->host, u->port, strerror(errno));
    if (send_head(c, method, u, extra, (long long)len) == 0 && (len == 0 || write_all(c->fd, body, len) == 0) &&
        read_head(c, r) == 0) {
      memset(s, 0, sizeof *s);
      if (read_body(c, r, keep_snippet, s) < 0)
        die(EXIT_REGISTRY, "%s %s: the response body was cut", method, shown(u->path));
      if (r->close) conn_close(c);
      return;
    }
    int e = errno;
    conn_close(c);
    if (!reused || attempt > 0) die(EXIT_REGISTRY, "%s %s: no response from the registry (%s)", method, shown(u->path), strerror(e));
  }
}

static void expect_status(const char *method, const struct url *u, const struct response *r, int want,
                          const struct snippet *s) {
  if (r->status == want) return;
  die(EXIT_REGISTRY, "%s %s: the registry answered %d: %s", method, shown(u->path), r->status, s->text);
}

static void progress(unsigned long long total, unsigned long long *next) {
  if (total < *next) return;
  fprintf(stderr, "sbx-progress %llu\n", total);
  while (*next <= total) *next += PROGRESS_EVERY;
}

// ---- the command ---------------------------------------------------------------------------

/** Starts argv with one end of a pipe as its stdin (to_child) or its stdout; returns the other end. */
static pid_t spawn_piped(char **argv, int to_child, int *our_end) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) < 0) die(EXIT_USAGE, "pipe: %s", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (to_child) {
    posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  } else {
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  }
  pid_t pid;
  int err = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (err) die(EXIT_CMD, "cannot start %s: %s", argv[0], strerror(err));
  close(to_child ? p[0] : p[1]);
  *our_end = to_child ? p[1] : p[0];
  fcntl(*our_end, F_SETPIPE_SZ, IO_BYTES); // best effort: a smaller pipe only costs copies
  return pid;
}

static int wait_status(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return 128;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// ---- the tar filter (runtime/snapshot/tarFilter.ts DropRootEntry, the same rules) ---------------

struct chunker; // where the filter's output goes
static void emit(struct chunker *k, const char *buf, size_t n);

struct tar_filter {
  const char *root; // NULL: pass everything
  unsigned char hdr[512];
  size_t hlen;
  unsigned long long data_left;
  enum { PASS, HOLD, DISCARD } mode;
  int renames, done;
  char *pending;
  size_t pending_len;
  long long entries;
};

static unsigned long long tar_octal(const unsigned char *b, size_t len) {
  unsigned long long v = 0;
  if (b[0] & 0x80) {
    for (size_t i = 1; i < len; i++) v = v * 256 + b[i];
    return v;
  }
  size_t i = 0;
  while (i < len && (b[i] == ' ' || b[i] == 0)) i++;
  for (; i < len && b[i] >= '0' && b[i] <= '7'; i++) v = v * 8 + (unsigned)(b[i] - '0');
  return v;
}

static void hold(struct tar_filter *f, const void *b, size_t n) {
  if (f->pending_len + n > MAX_EXTENDED)
    die(EXIT_CMD, "tar archive of %s: extended headers larger than %u bytes; not a plain tar stream", f->root,
        MAX_EXTENDED);
  char *p = realloc(f->pending, f->pending_len + n);
  if (!p) die(EXIT_CMD, "out of memory");
  memcpy(p + f->pending_len, b, n);
  f->pending = p;
  f->pending_len += n;
}

static void flush_pending(struct tar_filter *f, struct chunker *k) {
  if (f->pending_len) emit(k, f->pending, f->pending_len);
  f->pending_len = 0;
  f->renames = 0;
}

/** the name field (and a ustar prefix) of a header, "./" and trailing slashes dropped, equals root */
static int names_root(const unsigned char *h, const char *root) {
  char name[260];
  size_t n = 0;
  if (!memcmp(h + 257, "ustar", 5) && h[345]) {
    n = strnlen((const char *)h + 345, 155);
    memcpy(name, h + 345, n);
    name[n++] = '/';
  }
  size_t m = strnlen((const char *)h, 100);
  memcpy(name + n, h, m);
  n += m;
  name[n] = 0;
  char *s = name;
  if (!strncmp(s, "./", 2)) s += 2;
  size_t l = strlen(s);
  while (l > 0 && s[l - 1] == '/') s[--l] = 0;
  return !strcmp(s, root);
}

static void on_header(struct tar_filter *f, struct chunker *k) {
  const unsigned char *h = f->hdr;
  f->hlen = 0;
  int zero = 1;
  for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
  if (zero) {
    flush_pending(f, k);
    emit(k, (const char *)h, 512);
    f->done = 1;
    return;
  }
  char type = h[156] ? (char)h[156] : '0';
  unsigned long long size = tar_octal(h + 124, 12);
  unsigned long long padded = (size + 511) / 512 * 512;
  if (type == 'x' || type == 'L' || type == 'K') {
    hold(f, h, 512);
    f->renames = 1;
    f->data_left = padded;
    f->mode = HOLD;
    return;
  }
  if (type == '5' && !f->renames && names_root(h, f->root)) {
    f->pending_len = 0;
    f->data_left = padded;
    f->mode = DISCARD;
    return;
  }
  flush_pending(f, k);
  emit(k, (const char *)h, 512);
  f->entries++;
  f->data_left = padded;
  f->mode = PASS;
}

static void filter(struct tar_filter *f, struct chunker *k, const char *in, size_t n) {
  if (!f->root || f->done) {
    emit(k, in, n);
    return;
  }
  size_t at = 0;
  while (at < n) {
    if (f->done) {
      emit(k, in + at, n - at);
      return;
    }
    if (f->data_left > 0) {
      size_t m = f->data_left < n - at ? (size_t)f->data_left : n - at;
      if (f->mode == HOLD) hold(f, in + at, m);
      else if (f->mode == PASS) emit(k, in + at, m);
      f->data_left -= m;
      at += m;
      continue;
    }
    size_t m = 512 - f->hlen < n - at ? 512 - f->hlen : n - at;
    memcpy(f->hdr + f->hlen, in + at, m);
    f->hlen += m;
    at += m;
    if (f->hlen == 512) on_header(f, k);
  }
}

static void filter_end(struct tar_filter *f, struct chunker *k) {
  if (!f->root) return;
  if (f->pending_len) emit(k, f->pending, f->pending_len);
  f->pending_len = 0;
  if (f->hlen) emit(k, (const char *)f->hdr, f->hlen);
}

// ---- push ---------------------------------------------------------------------------------

struct chunker {
  struct conn *c;
  struct url at; // the upload's current Location
  char *buf;
  size_t len, cap;
  int stream, started; // stream: one PATCH whose body is sent as it comes (chunked encoding)
  unsigned long long sent, next_progress;
  struct hasher hash;
};

static void upload_failed(struct chunker *k) {
  die(EXIT_REGISTRY, "PATCH %s: the registry went away during the upload (%s)", shown(k->at.path), strerror(errno));
}

/** the upload's next Location, from the answer to a PATCH */
static void next_location(struct chunker *k, const struct response *r, const struct snippet *s) {
  expect_status("PATCH", &k->at, r, 202, s);
  if (!r->location[0]) die(EXIT_REGISTRY, "PATCH %s: the registry answered 202 without a Location", shown(k->at.path));
  struct url next;
  resolve_location(&k->at, r->location, &next);
  k->at = next;
}

/** Sends what is buffered: a chunk of the streamed PATCH, or a PATCH of its own with Content-Range. */
static void patch(struct chunker *k) {
  if (k->len == 0) return;
  hasher_feed(&k->hash, k->buf, k->len);
  if (k->stream) {
    if (!k->started) {
      if (conn_open(k->c, &k->at) < 0 ||
          send_head(k->c, "PATCH", &k->at, "Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n",
                    -1) < 0)
        upload_failed(k);
      k->started = 1;
    }
    char size[24];
    int n = snprintf(size, sizeof size, "%zx\r\n", k->len);
    if (write_all(k->c->fd, size, (size_t)n) < 0 || write_all(k->c->fd, k->buf, k->len) < 0 ||
        write_all(k->c->fd, "\r\n", 2) < 0)
      upload_failed(k);
  } else {
    char extra[128];
    snprintf(extra, sizeof extra, "Content-Type: application/octet-stream\r\nContent-Range: %llu-%llu\r\n", k->sent,
             k->sent + k->len - 1);
    struct response r;
    struct snippet s;
    request(k->c, "PATCH", &k->at, extra, k->buf, k->len, &r, &s);
    next_location(k, &r, &s);
  }
  k->sent += k->len;
  k->len = 0;
  progress(k->sent, &k->next_progress);
}

/** Sends the rest; a streamed PATCH then ends and is answered. */
static void patch_end(struct chunker *k) {
  patch(k);
  if (!k->stream || !k->started) return;
  struct response r;
  struct snippet s = {0};
  if (write_all(k->c->fd, "0\r\n\r\n", 5) < 0 || read_head(k->c, &r) < 0) upload_failed(k);
  if (read_body(k->c, &r, keep_snippet, &s) < 0) upload_failed(k);
  if (r.close) conn_close(k->c);
  next_location(k, &r, &s);
}

static void emit(struct chunker *k, const char *buf, size_t n) {
  while (n > 0) {
    size_t m = k->cap - k->len < n ? k->cap - k->len : n;
    memcpy(k->buf + k->len, buf, m);
    k->len += m;
    buf += m;
    n -= m;
    if (k->len == k->cap) patch(k);
  }
}

static int blob_push(const char *url, size_t chunk, const char *root, char **argv) {
  static struct conn c; // zero-initialized, so in bss: its 1 MiB buffer adds nothing to the binary
  c.fd = -1;
  struct url u;
  parse_url(url, &u);
  origin = u;
  struct response r;
  struct snippet s;
  request(&c, "POST", &u, NULL, NULL, 0, &r, &s);
  expect_status("POST", &u, &r, 202, &s);
  if (!r.location[0]) die(EXIT_REGISTRY, "POST %s: the registry answered 202 without a Location", shown(u.path));
  // chunk 0: one streamed PATCH, written in pieces of STREAM_PIECE as the archive comes
  struct chunker k = {.c = &c, .cap = chunk ? chunk : STREAM_PIECE, .stream = !chunk, .next_progress = PROGRESS_EVERY};
  resolve_location(&u, r.location, &k.at);
  k.buf = malloc(k.cap);
  if (!k.buf) die(EXIT_USAGE, "cannot hold a chunk of %zu bytes; pass a smaller --chunk-bytes", k.cap);
  hasher_start(&k.hash);
  struct tar_filter f = {.root = root};

  int out;
  pid_t pid = spawn_piped(argv, 0, &out);
  static char in[IO_BYTES];
  for (;;) {
    ssize_t n = read(out, in, sizeof in);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die(EXIT_CMD, "reading %s: %s", argv[0], strerror(errno));
    if (n == 0) break;
    filter(&f, &k, in, (size_t)n);
  }
  close(out);
  int st = wait_status(pid);
  if (st != 0) die(EXIT_CMD, "%s exited %d", argv[0], st); // nothing is committed: the upload is left to expire
  filter_end(&f, &k);
  patch_end(&k);
  char digest[72];
  hasher_finish(&k.hash, digest);
  struct url put = k.at;
  size_t pl = strlen(put.path);
  if (snprintf(put.path + pl, sizeof put.path - pl, "%cdigest=%s", strchr(put.path, '?') ? '&' : '?', digest) >=
      (int)(sizeof put.path - pl))
    die(EXIT_REGISTRY, "the upload's Location is too long");
  request(&c, "PUT", &put, NULL, NULL, 0, &r, &s);
  expect_status("PUT", &put, &r, 201, &s);
  conn_close(&c);
  printf("{\"digest\":\"%s\",\"size\":%llu,\"entries\":%lld}\n", digest, k.sent, root ? f.entries : -1LL);
  return 0;
}

// ---- pull ---------------------------------------------------------------------------------

struct feed {
  int fd, gone; // CMD's stdin; gone once it stopped reading (tar ends at its end marker)
  unsigned long long got, next_progress;
  struct hasher hash;
};

static int feed_cmd(void *ctx, const char *buf, size_t n) {
  struct feed *f = ctx;
  f->got += n;
  if (!f->gone && write_all(f->fd, buf, n) < 0) {
    if (errno != EPIPE) return -1;
    f->gone = 1; // keep reading: the digest covers every byte
  }
  hasher_feed(&f->hash, buf, n); // after the write: tar gets the bytes first
  progress(f->got, &f->next_progress);
  return 0;
}

static int blob_pull(const char *url, const char *want, long long want_size, char **argv) {
  static struct conn c; // zero-initialized, so in bss: its 1 MiB buffer adds nothing to the binary
  c.fd = -1;
  struct url u;
  parse_url(url, &u);
  origin = u;
  struct response r;
  int redirects = 0;
  for (;;) {
    if (conn_open(&c, &u) < 0)
      die(EXIT_REGISTRY, "GET %s: connect %s:%s: %s", shown(u.path), u.host, u.port, strerror(errno));
    if (send_head(&c, "GET", &u, NULL, -1) < 0 || read_head(&c, &r) < 0)
      die(EXIT_REGISTRY, "GET %s: no response from the registry", shown(u.path));
    if (r.status >= 300 && r.status < 400 && r.status != 304 && r.location[0]) {
      struct snippet s = {0};
      if (read_body(&c, &r, keep_snippet, &s) < 0 || r.close) conn_close(&c);
      if (++redirects > MAX_REDIRECTS) die(EXIT_REGISTRY, "GET %s: more than %d redirects", shown(u.path), MAX_REDIRECTS);
      struct url next;
      resolve_location(&u, r.location, &next);
      u = next;
      continue;
    }
    if (r.status != 200) {
      struct snippet s = {0};
      read_body(&c, &r, keep_snippet, &s);
      die(EXIT_REGISTRY, "GET %s: the registry answered %d: %s", shown(u.path), r.status, s.text);
    }
    break;
  }
  struct feed f = {.next_progress = PROGRESS_EVERY};
  hasher_start(&f.hash);
  pid_t pid = spawn_piped(argv, 1, &f.fd);
  int rc = read_body(&c, &r, feed_cmd, &f);
  conn_close(&c);
  char got[72];
  hasher_finish(&f.hash, got);
  if (rc < 0 || (r.length >= 0 && (long long)f.got != r.length)) {
    kill(pid, SIGKILL);
    wait_status(pid);
    die(EXIT_REGISTRY, "GET %s: the blob's body was cut after %llu bytes", shown(u.path), f.got);
  }
  if (want_size >= 0 && (long long)f.got != want_size) {
    kill(pid, SIGKILL);
    wait_status(pid);
    die(EXIT_MISMATCH, "size mismatch: got %llu bytes, expected %lld", f.got, want_size);
  }
  if (strcmp(got, want)) {
    kill(pid, SIGKILL);
    wait_status(pid);
    die(EXIT_MISMATCH, "digest mismatch: got %s, expected %s", got, want);
  }
  close(f.fd);
  return wait_status(pid);
}

// ---- arguments ----------------------------------------------------------------------------

static void usage(void) {
  fprintf(stderr,
          "usage: sbx-helper blob push --url UPLOADS_URL [--auth-stdin] [--chunk-bytes N] [--tar-root NAME] -- CMD...\n"
          "       sbx-helper blob pull --url BLOB_URL --digest sha256:HEX [--size N] [--auth-stdin] -- CMD...\n");
  exit(EXIT_USAGE);
}

static void read_auth(void) {
  static char line[8192];
  size_t n = 0;
  for (;;) {
    char ch;
    ssize_t r = read(0, &ch, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0 || ch == '\n') break;
    if (n + 1 >= sizeof line) die(EXIT_USAGE, "the Authorization line on stdin is longer than %zu bytes", sizeof line - 1);
    line[n++] = ch;
  }
  if (n && line[n - 1] == '\r') n--;
  line[n] = 0;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)line[i] < 0x20) die(EXIT_USAGE, "the Authorization line on stdin holds a control character");
  auth_value = n ? line : NULL;
}

int sbx_blob_main(int argc, char **argv) {
  if (argc < 3) usage();
  verb = argv[2];
  int push = !strcmp(verb, "push");
  if (!push && strcmp(verb, "pull")) usage();
  const char *url = NULL, *root = NULL, *digest = NULL;
  long long size = -1;
  size_t chunk = 0;
  int auth = 0, i = 3;
  for (; i < argc && strcmp(argv[i], "--"); i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--auth-stdin")) auth = 1;
    else if (!v) usage();
    else if (!strcmp(a, "--url")) url = v, i++;
    else if (push && !strcmp(a, "--tar-root")) root = v, i++;
    else if (push && !strcmp(a, "--chunk-bytes")) chunk = strtoull(v, NULL, 10), i++;
    else if (!push && !strcmp(a, "--digest")) digest = v, i++;
    else if (!push && !strcmp(a, "--size")) size = strtoll(v, NULL, 10), i++;
    else usage();
  }
  if (i + 1 >= argc || !url || (!push && !digest)) usage();
  if (!push && (strncmp(digest, "sha256:", 7) || strlen(digest) != 71)) die(EXIT_USAGE, "--digest must be sha256:<64 hex>");
  signal(SIGPIPE, SIG_IGN);
  if (auth) read_auth();
  char **cmd = argv + i + 1;
  return push ? blob_push(url, chunk, root, cmd) : blob_pull(url, digest, size, cmd);
}
