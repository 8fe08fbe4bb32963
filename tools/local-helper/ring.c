// Output rings of the command channel's daemon (see channel.h).
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>

#include "channel.h"

void ch_header(unsigned char *b, char type, uint32_t stream, uint32_t len) {
  b[0] = (unsigned char)type;
  b[1] = stream >> 24, b[2] = stream >> 16, b[3] = stream >> 8, b[4] = stream;
  b[5] = len >> 24, b[6] = len >> 16, b[7] = len >> 8, b[8] = len;
}

uint32_t ch_u32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

double ch_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

char *ch_ring_slot(struct ch_ring *r, size_t max, size_t *len) {
  if (!r->buf && !(r->buf = malloc(CH_RING))) {
    *len = 0;
    return NULL;
  }
  size_t pos = (size_t)(r->end % CH_RING);
  size_t n = CH_RING - pos;
  *len = n < max ? n : max;
  return r->buf + pos;
}

void ch_ring_commit(struct ch_ring *r, size_t n) {
  r->end += n;
  if (r->end - r->base > CH_RING) r->base = r->end - CH_RING;
}

const char *ch_ring_peek(const struct ch_ring *r, uint64_t *at, size_t max, size_t *len) {
  if (*at < r->base) *at = r->base;
  *len = 0;
  if (*at >= r->end || !r->buf) return NULL;
  size_t pos = (size_t)(*at % CH_RING);
  size_t n = CH_RING - pos;
  uint64_t left = r->end - *at;
  if (n > left) n = (size_t)left;
  *len = n < max ? n : max;
  return r->buf + pos;
}

void ch_ring_free(struct ch_ring *r) {
  free(r->buf);
  r->buf = NULL;
}
