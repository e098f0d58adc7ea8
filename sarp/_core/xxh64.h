/*
 * XXH64, written from the public xxHash specification (doc/xxhash_spec.md of the xxHash
 * project): 64-bit hash of a byte string with a 64-bit seed.
 *
 * Three entry points, all header-only and usable without the GIL:
 *   sarp_xxh64(p, n, seed)      XXH64 of n bytes at p.
 *   sarp_xxh64_u32s(v, n, seed) XXH64 of the little-endian bytes of n uint32 values.
 *   sarp_xxh64_u64s(v, n, seed) XXH64 of the little-endian bytes of n uint64 values.
 * The typed forms read lanes from values, not bytes, so they give the same result on any
 * host byte order; they are how block IDs (tokens) and filter fields (block IDs) are hashed.
 */
#ifndef SARP_XXH64_H
#define SARP_XXH64_H

#include <stddef.h>
#include <stdint.h>
#include "endian.h"

#define SARP_P64_1 0x9E3779B185EBCA87ULL
#define SARP_P64_2 0xC2B2AE3D27D4EB4FULL
#define SARP_P64_3 0x165667B19E3779F9ULL
#define SARP_P64_4 0x85EBCA77C2B2AE63ULL
#define SARP_P64_5 0x27D4EB2F165667C5ULL

static inline uint64_t sarp_rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t sarp_xxh64_round(uint64_t acc, uint64_t lane) {
    acc += lane * SARP_P64_2;
    acc = sarp_rotl64(acc, 31);
    return acc * SARP_P64_1;
}

static inline uint64_t sarp_xxh64_merge(uint64_t acc, uint64_t v) {
    acc ^= sarp_xxh64_round(0, v);
    return acc * SARP_P64_1 + SARP_P64_4;
}

/* The four accumulators after the 32-byte stripes, converged into one (spec steps 1-3). */
static inline uint64_t sarp_xxh64_converge(uint64_t v1, uint64_t v2, uint64_t v3, uint64_t v4) {
    uint64_t acc = sarp_rotl64(v1, 1) + sarp_rotl64(v2, 7) + sarp_rotl64(v3, 12)
                 + sarp_rotl64(v4, 18);
    acc = sarp_xxh64_merge(acc, v1);
    acc = sarp_xxh64_merge(acc, v2);
    acc = sarp_xxh64_merge(acc, v3);
    return sarp_xxh64_merge(acc, v4);
}

static inline uint64_t sarp_xxh64_tail8(uint64_t acc, uint64_t lane) {
    acc ^= sarp_xxh64_round(0, lane);
    return sarp_rotl64(acc, 27) * SARP_P64_1 + SARP_P64_4;
}

static inline uint64_t sarp_xxh64_tail4(uint64_t acc, uint32_t lane) {
    acc ^= (uint64_t)lane * SARP_P64_1;
    return sarp_rotl64(acc, 23) * SARP_P64_2 + SARP_P64_3;
}

static inline uint64_t sarp_xxh64_avalanche(uint64_t acc) {
    acc ^= acc >> 33;
    acc *= SARP_P64_2;
    acc ^= acc >> 29;
    acc *= SARP_P64_3;
    acc ^= acc >> 32;
    return acc;
}

static inline uint64_t sarp_xxh64(const void* data, size_t n, uint64_t seed) {
    const unsigned char* p = (const unsigned char*)data;
    const unsigned char* end = p + n;
    uint64_t acc;
    if (n >= 32) {
        uint64_t v1 = seed + SARP_P64_1 + SARP_P64_2;
        uint64_t v2 = seed + SARP_P64_2;
        uint64_t v3 = seed;
        uint64_t v4 = seed - SARP_P64_1;
        const unsigned char* limit = end - 32;
        do {
            v1 = sarp_xxh64_round(v1, sarp_read_le64(p));
            v2 = sarp_xxh64_round(v2, sarp_read_le64(p + 8));
            v3 = sarp_xxh64_round(v3, sarp_read_le64(p + 16));
            v4 = sarp_xxh64_round(v4, sarp_read_le64(p + 24));
            p += 32;
        } while (p <= limit);
        acc = sarp_xxh64_converge(v1, v2, v3, v4);
    } else {
        acc = seed + SARP_P64_5;
    }
    acc += (uint64_t)n;
    for (; p + 8 <= end; p += 8) acc = sarp_xxh64_tail8(acc, sarp_read_le64(p));
    if (p + 4 <= end) {
        acc = sarp_xxh64_tail4(acc, sarp_read_le32(p));
        p += 4;
    }
    for (; p < end; p++) {
        acc ^= (uint64_t)(*p) * SARP_P64_5;
        acc = sarp_rotl64(acc, 11) * SARP_P64_1;
    }
    return sarp_xxh64_avalanche(acc);
}

/* One 8-byte lane made of two consecutive uint32 values, as their little-endian bytes read. */
static inline uint64_t sarp_lane_u32x2(const uint32_t* v) {
    return (uint64_t)v[0] | ((uint64_t)v[1] << 32);
}

static inline uint64_t sarp_xxh64_u32s(const uint32_t* v, size_t n, uint64_t seed) {
    const uint32_t* end = v + n;
    uint64_t acc;
    if (n >= 8) {
        uint64_t v1 = seed + SARP_P64_1 + SARP_P64_2;
        uint64_t v2 = seed + SARP_P64_2;
        uint64_t v3 = seed;
        uint64_t v4 = seed - SARP_P64_1;
        const uint32_t* limit = end - 8;
        do {
            v1 = sarp_xxh64_round(v1, sarp_lane_u32x2(v));
            v2 = sarp_xxh64_round(v2, sarp_lane_u32x2(v + 2));
            v3 = sarp_xxh64_round(v3, sarp_lane_u32x2(v + 4));
            v4 = sarp_xxh64_round(v4, sarp_lane_u32x2(v + 6));
            v += 8;
        } while (v <= limit);
        acc = sarp_xxh64_converge(v1, v2, v3, v4);
    } else {
        acc = seed + SARP_P64_5;
    }
    acc += (uint64_t)n * 4;
    for (; v + 2 <= end; v += 2) acc = sarp_xxh64_tail8(acc, sarp_lane_u32x2(v));
    if (v < end) acc = sarp_xxh64_tail4(acc, *v);
    return sarp_xxh64_avalanche(acc);
}

static inline uint64_t sarp_xxh64_u64s(const uint64_t* v, size_t n, uint64_t seed) {
    const uint64_t* end = v + n;
    uint64_t acc;
    if (n >= 4) {
        uint64_t v1 = seed + SARP_P64_1 + SARP_P64_2;
        uint64_t v2 = seed + SARP_P64_2;
        uint64_t v3 = seed;
        uint64_t v4 = seed - SARP_P64_1;
        const uint64_t* limit = end - 4;
        do {
            v1 = sarp_xxh64_round(v1, v[0]);
            v2 = sarp_xxh64_round(v2, v[1]);
            v3 = sarp_xxh64_round(v3, v[2]);
            v4 = sarp_xxh64_round(v4, v[3]);
            v += 4;
        } while (v <= limit);
        acc = sarp_xxh64_converge(v1, v2, v3, v4);
    } else {
        acc = seed + SARP_P64_5;
    }
    acc += (uint64_t)n * 8;
    for (; v < end; v++) acc = sarp_xxh64_tail8(acc, *v);
    return sarp_xxh64_avalanche(acc);
}

#endif
