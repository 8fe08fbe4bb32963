// The command channel of a Kubernetes sandbox (docs/kubernetes-runtime.md, "Command channel"):
// `sbx-helper channel DIR` is what the replica's one long-lived exec runs; it makes sure the
// pod's daemon (`daemon.c`, the process registry) is up and relays the replica's frames to it.
// Frames both ways: type (1 byte) + stream id (4 bytes, big endian) + length (4 bytes, big
// endian) + payload. The types are listed in daemon.c.
#ifndef SBX_CHANNEL_H
#define SBX_CHANNEL_H
#include <stddef.h>
#include <stdint.h>

#define CH_HEADER 9
/** largest payload either side accepts; a longer frame ends the connection */
#define CH_MAX_FRAME (1 << 20)
/**
 * Output bytes a stream may send before the replica grants more, and stdin likewise: a stream
 * moves at most a window per round trip, so this bounds one transfer's throughput (4 MiB at
 * 20 ms, a busy test cluster's round trip, is 200 MB/s; 256 KiB gave a third of the websocket
 * path's archive throughput) and is what one stream may hold unread in the daemon (stdin) and
 * in the replica (output, on top of its readers' 1 MiB).
 */
#define CH_WINDOW (4 * 1024 * 1024)
/** per command and stream: what a re-attach can replay */
#define CH_RING (1 << 20)

/** `sbx-helper channel DIR`: returns the process's exit code */
int sbx_channel_main(int argc, char **argv);
/** the daemon's main loop; `ready` gets "ok" once it listens, then is closed. Never returns. */
void sbx_daemon_main(const char *dir, int ready) __attribute__((noreturn));

/** a frame header in buf (CH_HEADER bytes) */
void ch_header(unsigned char *buf, char type, uint32_t stream, uint32_t len);
uint32_t ch_u32(const unsigned char *p);
double ch_now_ms(void);

// A ring of the last CH_RING bytes of one output stream, addressed by absolute offsets so a
// reader that re-attaches can say where it stopped. Allocated on first write: malloc of a
// megabyte is an untouched mapping, so a quiet command costs a page, not a megabyte.
struct ch_ring {
  char *buf;
  uint64_t base; /* offset of the oldest byte kept */
  uint64_t end;  /* offset after the newest byte */
};
/** room for a read(2) straight into the ring at `end`: contiguous, at most `max` bytes */
char *ch_ring_slot(struct ch_ring *r, size_t max, size_t *len);
/** commits n bytes written at the slot; drops the oldest bytes past CH_RING */
void ch_ring_commit(struct ch_ring *r, size_t n);
/** contiguous bytes from offset `at` (clamped to base), at most max; *len 0 when none */
const char *ch_ring_peek(const struct ch_ring *r, uint64_t *at, size_t max, size_t *len);
void ch_ring_free(struct ch_ring *r);

#endif
