/*
 * Little-endian loads and stores of fixed-width integers at any byte address. SARP's
 * on-disk formats are little-endian; these keep the codecs correct on any host.
 */
#ifndef SARP_ENDIAN_H
#define SARP_ENDIAN_H

#include <stdint.h>

static inline uint64_t sarp_read_le64(const unsigned char* p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16)
         | ((uint64_t)p[3] << 24) | ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40)
         | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static inline uint32_t sarp_read_le32(const unsigned char* p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16)
         | ((uint32_t)p[3] << 24);
}

static inline uint16_t sarp_read_le16(const unsigned char* p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline void sarp_write_le64(unsigned char* p, uint64_t x) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(x >> (8 * i));
}

static inline void sarp_write_le32(unsigned char* p, uint32_t x) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(x >> (8 * i));
}

static inline void sarp_write_le16(unsigned char* p, uint16_t x) {
    p[0] = (unsigned char)x;
    p[1] = (unsigned char)(x >> 8);
}

#endif
