/* SHA-256 (FIPS 180-4), for the result checksum: written for this example so that it
 * needs no crypto library. */
#ifndef HEAT_SHA256_H
#define HEAT_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct sha256 {
    uint32_t state[8];
    uint64_t length; /* bytes hashed so far */
    unsigned char block[64];
    size_t filled; /* bytes waiting in block */
};

void sha256_init(struct sha256 *h);
void sha256_update(struct sha256 *h, const void *data, size_t len);
/* Writes the digest as 64 lowercase hex digits and a NUL into hex. */
void sha256_hex(struct sha256 *h, char hex[65]);
/* One call: the hex digest of len bytes at data (for Fortran, through ISO_C_BINDING). */
void sha256_hex_of(const void *data, size_t len, char hex[65]);

#endif
