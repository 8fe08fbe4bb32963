// SHA-256 (FIPS 180-4), streaming, for the digests of snapshot blobs (blob.c).
#ifndef SBX_SHA256_H
#define SBX_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
  uint32_t h[8];
  uint64_t bytes;
  unsigned char block[64];
  size_t fill;
};

void sha256_init(struct sha256 *s);
void sha256_update(struct sha256 *s, const void *data, size_t n);
/** writes "sha256:<64 hex>" and a NUL (72 bytes) */
void sha256_hex(struct sha256 *s, char out[72]);

#endif
