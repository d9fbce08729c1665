/*
 * The v2 record batch header (FORMATS.md) for the C extensions (local/records/_fastwalk.c,
 * local/cleaner/_cleancore.c, tiered/spark/_arrowdecode.c): its fields' byte offsets, its attribute bits and the
 * big-endian reads of its fields, in one place.
 */
#ifndef TIERED_BATCH_HEADER_H
#define TIERED_BATCH_HEADER_H

#include <stdint.h>

#define H_BASE_OFFSET 0
#define H_LENGTH 8 /* the batch's size less H_LOG_OVERHEAD */
#define H_EPOCH 12 /* partition leader epoch */
#define H_MAGIC 16
#define H_CRC 17 /* CRC-32C of everything from H_ATTRIBUTES to the end */
#define H_ATTRIBUTES 21
#define H_LAST_DELTA 23 /* last offset delta */
#define H_BASE_TS 27
#define H_MAX_TS 35
#define H_PRODUCER_ID 43
#define H_PRODUCER_EPOCH 51
#define H_BASE_SEQ 53
#define H_COUNT 57 /* records count */
#define H_OVERHEAD 61 /* the header's size: where the records start (RECORD_BATCH_OVERHEAD) */
#define H_LOG_OVERHEAD 12 /* base offset and length (LOG_OVERHEAD) */

#define A_CODEC_MASK 0x07
#define A_LOG_APPEND_TIME 0x08
#define A_TRANSACTIONAL 0x10
#define A_CONTROL 0x20

static inline int64_t be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = (v << 8) | p[k];
    return (int64_t)v;
}

static inline int32_t be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static inline int attributes_of(const uint8_t *batch)
{
    return (int)(((uint32_t)batch[H_ATTRIBUTES] << 8) | batch[H_ATTRIBUTES + 1]);
}

#endif
