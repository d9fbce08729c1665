/*
 * local.cleaner._cleancore: the log cleaner's per-record loops in C (local.cleaner.records and
 * local.cleaner.offset_map hold their Python definitions).
 *
 * A cleaning looks at every record of the dirty part of a log twice: to put its key's digest in the offset map,
 * and to decide whether it survives. In CPython the walk over a batch's records, the digest and the map probe cost
 * several microseconds a record; here they are native. Optional: where no C compiler built this, the Python
 * definitions run, and tests/property/test_cleancore.py holds both to the same answers on every input.
 *
 * scan_records(records, count, hash_key) -> (fields: bytes, hashes: bytes)
 *     fields: count rows of 8 native int64 (start, end, offset delta, timestamp delta, key start or -1, key length
 *     or -1, value length or -1, start of the key length varint); hashes: 16 bytes a record, the key's digest (zeros
 *     for a null key). ValueError for records that do not fill their lengths.
 * rebuild_records(records, fields, keep, timestamps, new_base_timestamp) -> (bytes, max timestamp)
 *     the kept records re-encoded: attributes 0, timestamp delta from new_base_timestamp, offset delta as it was,
 *     the rest (key, value, headers) as it was; the max timestamp of the kept records (-1: none).
 * map_put_many(table, slots, hashes, offsets, entries, max_entries) -> (done, entries)
 * map_get_many(table, slots, hashes, count) -> bytes (count native int64, -1 where absent)
 *     Kafka's SkimpyOffsetMap: 24-byte slots (digest, big-endian offset), its probe sequence, all zeros empty.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_batch_header.h" /* the v2 header's fields */
#include "../_crc32c.h" /* CRC-32C, the batches' checksums: local.crc's */

/* ---------------------------------------------------------------------------------------------------------------- */
/* SipHash-2-4 with its 128-bit output (Aumasson and Bernstein), for the map's key digests: a keyed hash, the key drawn */
/* at random for each map (local.cleaner.offset_map says why), the same digest as local.cleaner.records.key_digest.  */

typedef struct {
    uint64_t k0, k1;
} sip_key;

static uint64_t le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

#define ROTL64(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                       \
    do {                                                                                                               \
        v0 += v1, v1 = ROTL64(v1, 13), v1 ^= v0, v0 = ROTL64(v0, 32);                                                 \
        v2 += v3, v3 = ROTL64(v3, 16), v3 ^= v2;                                                                       \
        v0 += v3, v3 = ROTL64(v3, 21), v3 ^= v0;                                                                       \
        v2 += v1, v1 = ROTL64(v1, 17), v1 ^= v2, v2 = ROTL64(v2, 32);                                                 \
    } while (0)

static void key_digest(const sip_key *key, const uint8_t *data, Py_ssize_t len, uint8_t out[16])
{
    uint64_t v0 = key->k0 ^ 0x736f6d6570736575ULL, v1 = key->k1 ^ 0x646f72616e646f6dULL ^ 0xee;
    uint64_t v2 = key->k0 ^ 0x6c7967656e657261ULL, v3 = key->k1 ^ 0x7465646279746573ULL;
    Py_ssize_t full = len - len % 8;
    for (Py_ssize_t i = 0; i < full; i += 8) {
        uint64_t m = le64(data + i);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    for (Py_ssize_t i = len - 1; i >= full; i--)
        last |= (uint64_t)data[i] << (8 * (i - full));
    v3 ^= last;
    SIPROUND;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xee;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    put_le64(out, v0 ^ v1 ^ v2 ^ v3);
    v1 ^= 0xdd;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    put_le64(out + 8, v0 ^ v1 ^ v2 ^ v3);
}

/* The 16-byte hash key of a Py_buffer argument into *key; 0 (with ValueError set) when it is not 16 bytes. */
static int parse_key(Py_buffer *view, sip_key *key)
{
    if (view->len != 16) {
        PyErr_SetString(PyExc_ValueError, "the hash key must be 16 bytes");
        return 0;
    }
    key->k0 = le64(view->buf);
    key->k1 = le64((const uint8_t *)view->buf + 8);
    return 1;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Varints                                                                                                            */

/* The zigzag varint at buf[*q] (at most max_bytes bytes, within len): 1 and *q past it, or 0 when it is longer or the
 * data ends inside it (the Python definition's InvalidRecordError). */
static int read_varint(const uint8_t *buf, Py_ssize_t len, Py_ssize_t *q, int max_bytes, int64_t *value)
{
    Py_ssize_t i = *q;
    uint64_t result = 0;
    int shift = 0;
    for (int n = 0; n < max_bytes; n++, i++) {
        if (i >= len)
            return 0;
        uint8_t b = buf[i];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *value = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            *q = i + 1;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

static Py_ssize_t write_varint(uint8_t *out, int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* ---------------------------------------------------------------------------------------------------------------- */

enum { F_START, F_END, F_OFFSET_DELTA, F_TIMESTAMP_DELTA, F_KEY_START, F_KEY_LEN, F_VALUE_LEN, F_REST, FIELDS };

static PyObject *scan_records(PyObject *self, PyObject *args)
{
    Py_buffer view, key_view;
    Py_ssize_t count;
    sip_key key;
    if (!PyArg_ParseTuple(args, "y*ny*", &view, &count, &key_view))
        return NULL;
    int key_ok = parse_key(&key_view, &key);
    PyBuffer_Release(&key_view);
    if (!key_ok) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (count < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "negative record count");
        return NULL;
    }
    PyObject *fields_obj = PyBytes_FromStringAndSize(NULL, count * FIELDS * (Py_ssize_t)sizeof(int64_t));
    PyObject *hashes_obj = PyBytes_FromStringAndSize(NULL, count * 16);
    if (fields_obj == NULL || hashes_obj == NULL) {
        Py_XDECREF(fields_obj);
        Py_XDECREF(hashes_obj);
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t *fields = (int64_t *)PyBytes_AS_STRING(fields_obj);
    uint8_t *hashes = (uint8_t *)PyBytes_AS_STRING(hashes_obj);
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len, pos = 0;
    const char *error = NULL;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t start = pos, q = pos;
        int64_t length, ts_delta, offset_delta, key_len, value_len;
        if (!read_varint(buf, len, &q, 5, &length)) {
            error = "a record length is not a valid varint", bad = i;
            break;
        }
        if (length <= 0 || q + length > len) {
            error = "a record declares more bytes than the batch holds", bad = i;
            break;
        }
        Py_ssize_t end = q + (Py_ssize_t)length;
        q += 1; /* attributes */
        if (!read_varint(buf, end, &q, 10, &ts_delta) || !read_varint(buf, end, &q, 5, &offset_delta)) {
            error = "a record's timestamp or offset delta runs past it", bad = i;
            break;
        }
        Py_ssize_t rest = q;
        if (!read_varint(buf, end, &q, 5, &key_len)) {
            error = "a record's key length runs past it", bad = i;
            break;
        }
        Py_ssize_t key_start = key_len >= 0 ? q : -1;
        if (key_len > 0) {
            if (key_len > end - q) {
                error = "a record's key runs past it", bad = i;
                break;
            }
            q += (Py_ssize_t)key_len;
        }
        if (!read_varint(buf, end, &q, 5, &value_len)) {
            error = "a record's value length runs past it", bad = i;
            break;
        }
        if (value_len > 0) {
            if (value_len > end - q) {
                error = "a record's value runs past it", bad = i;
                break;
            }
            q += (Py_ssize_t)value_len;
        }
        int64_t *row = fields + i * FIELDS;
        row[F_START] = start;
        row[F_END] = end;
        row[F_OFFSET_DELTA] = offset_delta;
        row[F_TIMESTAMP_DELTA] = ts_delta;
        row[F_KEY_START] = key_start;
        row[F_KEY_LEN] = key_len < 0 ? -1 : key_len;
        row[F_VALUE_LEN] = value_len < 0 ? -1 : value_len;
        row[F_REST] = rest;
        if (key_len >= 0)
            key_digest(&key, buf + key_start, (Py_ssize_t)key_len, hashes + i * 16);
        else
            memset(hashes + i * 16, 0, 16);
        pos = end;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (error != NULL) {
        Py_DECREF(fields_obj);
        Py_DECREF(hashes_obj);
        PyErr_Format(PyExc_ValueError, "record %zd: %s", bad, error);
        return NULL;
    }
    return Py_BuildValue("(NN)", fields_obj, hashes_obj);
}

static PyObject *rebuild_records(PyObject *self, PyObject *args)
{
    Py_buffer body, fields_view, keep_view, ts_view;
    long long new_base;
    if (!PyArg_ParseTuple(args, "y*y*y*y*L", &body, &fields_view, &keep_view, &ts_view, &new_base))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = keep_view.len;
    const int64_t *fields = fields_view.buf;
    const uint8_t *keep = keep_view.buf;
    const int64_t *ts = ts_view.buf;
    if (fields_view.len < count * FIELDS * (Py_ssize_t)sizeof(int64_t) || ts_view.len < count * (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "fields, keep and timestamps disagree on the record count");
        goto done;
    }
    Py_ssize_t capacity = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const int64_t *row = fields + i * FIELDS;
        if (keep[i]) {
            if (row[F_REST] < 0 || row[F_END] > body.len || row[F_REST] > row[F_END]) {
                PyErr_SetString(PyExc_ValueError, "a record's fields lie outside the batch");
                goto done;
            }
            capacity += row[F_END] - row[F_REST] + 1 + 10 + 5 + 5;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, capacity);
    if (out == NULL)
        goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *b = body.buf;
    Py_ssize_t n = 0;
    int64_t max_ts = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!keep[i])
            continue;
        const int64_t *row = fields + i * FIELDS;
        uint8_t head[1 + 10 + 5];
        Py_ssize_t h = 0;
        head[h++] = 0; /* attributes */
        h += write_varint(head + h, ts[i] - (int64_t)new_base);
        h += write_varint(head + h, row[F_OFFSET_DELTA]);
        Py_ssize_t rest_len = (Py_ssize_t)(row[F_END] - row[F_REST]);
        n += write_varint(o + n, (int64_t)(h + rest_len));
        memcpy(o + n, head, (size_t)h);
        n += h;
        memcpy(o + n, b + row[F_REST], (size_t)rest_len);
        n += rest_len;
        if (ts[i] > max_ts)
            max_ts = ts[i];
    }
    if (_PyBytes_Resize(&out, n) < 0)
        goto done;
    result = Py_BuildValue("(NL)", out, (long long)max_ts);
done:
    PyBuffer_Release(&body);
    PyBuffer_Release(&fields_view);
    PyBuffer_Release(&keep_view);
    PyBuffer_Release(&ts_view);
    return result;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* The offset map                                                                                                     */

#define ENTRY 24

static Py_ssize_t position_of(const uint8_t *digest, Py_ssize_t attempt, Py_ssize_t slots)
{
    Py_ssize_t at = attempt < 12 ? attempt : 12;
    int32_t word = (int32_t)(((uint32_t)digest[at] << 24) | ((uint32_t)digest[at + 1] << 16) |
                             ((uint32_t)digest[at + 2] << 8) | (uint32_t)digest[at + 3]);
    int64_t extra = attempt > 12 ? attempt - 12 : 0;
    int32_t probe = (int32_t)(uint32_t)((uint32_t)word + (uint32_t)extra); /* Java int arithmetic */
    int64_t positive = probe == INT32_MIN ? 0 : (probe < 0 ? -(int64_t)probe : probe);
    return (Py_ssize_t)(positive % slots) * ENTRY;
}

static int is_empty(const uint8_t *slot)
{
    for (int i = 0; i < ENTRY; i++)
        if (slot[i])
            return 0;
    return 1;
}

static void put_offset(uint8_t *p, int64_t offset)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)((uint64_t)offset >> (56 - 8 * k));
}

static int64_t get_offset(const uint8_t *p)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = (v << 8) | p[k];
    return (int64_t)v;
}

static PyObject *map_put_many(PyObject *self, PyObject *args)
{
    Py_buffer table, hashes, offsets;
    Py_ssize_t slots, entries, max_entries;
    if (!PyArg_ParseTuple(args, "w*ny*y*nn", &table, &slots, &hashes, &offsets, &entries, &max_entries))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = offsets.len / (Py_ssize_t)sizeof(int64_t);
    if (slots <= 0 || table.len < slots * ENTRY || hashes.len < count * 16) {
        PyErr_SetString(PyExc_ValueError, "the table, the digests and the offsets disagree");
        goto done;
    }
    uint8_t *t = table.buf;
    const uint8_t *h = hashes.buf;
    const int64_t *off = offsets.buf;
    Py_ssize_t i = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < count; i++) {
        if (off[i] < 0)
            continue;
        if (entries >= max_entries)
            break;
        const uint8_t *digest = h + i * 16;
        for (Py_ssize_t attempt = 0;; attempt++) {
            uint8_t *slot = t + position_of(digest, attempt, slots);
            if (is_empty(slot)) {
                memcpy(slot, digest, 16);
                put_offset(slot + 16, off[i]);
                entries++;
                break;
            }
            if (memcmp(slot, digest, 16) == 0) {
                put_offset(slot + 16, off[i]);
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(nn)", i, entries);
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&offsets);
    return result;
}

static PyObject *map_get_many(PyObject *self, PyObject *args)
{
    Py_buffer table, hashes;
    Py_ssize_t slots, count;
    if (!PyArg_ParseTuple(args, "y*ny*n", &table, &slots, &hashes, &count))
        return NULL;
    PyObject *out = NULL;
    if (slots <= 0 || table.len < slots * ENTRY || count < 0 || hashes.len < count * 16) {
        PyErr_SetString(PyExc_ValueError, "the table and the digests disagree");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL)
        goto done;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(out);
    const uint8_t *t = table.buf, *h = hashes.buf;
    Py_ssize_t max_attempts = slots + 16 - 4;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        const uint8_t *digest = h + i * 16;
        o[i] = -1;
        for (Py_ssize_t attempt = 0; attempt < max_attempts; attempt++) {
            const uint8_t *slot = t + position_of(digest, attempt, slots);
            if (is_empty(slot))
                break;
            if (memcmp(slot, digest, 16) == 0) {
                o[i] = get_offset(slot + 16);
                break;
            }
        }
    }
    Py_END_ALLOW_THREADS
done:
    PyBuffer_Release(&table);
    PyBuffer_Release(&hashes);
    return out;
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* Whole chunks of plain batches: the two passes of a cleaning over the batches that need nothing of Python (v2, no  */
/* codec, not transactional, not control). Each stops at the first batch that does, or at the chunk's end.          */

static void put_be64(uint8_t *p, int64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)((uint64_t)v >> (56 - 8 * k));
}

static void put_be32(uint8_t *p, int32_t v)
{
    for (int k = 0; k < 4; k++)
        p[k] = (uint8_t)((uint32_t)v >> (24 - 8 * k));
}

static void put_be16(uint8_t *p, int16_t v)
{
    p[0] = (uint8_t)((uint16_t)v >> 8);
    p[1] = (uint8_t)v;
}

#define SLOW_ATTRIBUTES (A_CODEC_MASK | A_TRANSACTIONAL | A_CONTROL)

enum { STOP_END = 0, STOP_SLOW = 1, STOP_FULL = 2, STOP_CORRUPT = 3, STOP_INVALID = 4, STOP_ORDER = 5 };
/* STOP_ORDER: a batch whose offsets do not come after the batch before it (its base offset, outside the CRC, is
 * damaged); like STOP_INVALID and STOP_SLOW, the caller's own path takes that batch (and names the damage). */

/* The size of the whole v2 batch at buf[pos] within end, 0 when it is not whole there (or not v2: -1). */
static Py_ssize_t batch_at(const uint8_t *buf, Py_ssize_t pos, Py_ssize_t end)
{
    if (end - pos < H_OVERHEAD)
        return 0;
    if (buf[pos + H_MAGIC] != 2)
        return -1;
    int64_t size = (int64_t)be32(buf + pos + H_LENGTH) + H_LOG_OVERHEAD;
    if (size < H_OVERHEAD)
        return -1;
    if (size > end - pos)
        return 0;
    return (Py_ssize_t)size;
}

typedef struct {
    Py_ssize_t rest, end; /* where the key length varint starts, where the record ends */
    int64_t offset_delta, timestamp;
    Py_ssize_t key_start;
    int64_t key_len, value_len;
} rec_info;

/* Parse the records of a batch body into infos (count of them); 0 on malformed records. */
static int parse_body(const uint8_t *body, Py_ssize_t len, int64_t count, int64_t base_ts, int64_t lat, rec_info *infos)
{
    Py_ssize_t pos = 0;
    for (int64_t i = 0; i < count; i++) {
        Py_ssize_t q = pos;
        int64_t length, ts_delta, offset_delta, key_len, value_len;
        if (!read_varint(body, len, &q, 5, &length) || length <= 0 || q + length > len)
            return 0;
        Py_ssize_t end = q + (Py_ssize_t)length;
        q += 1;
        if (!read_varint(body, end, &q, 10, &ts_delta) || !read_varint(body, end, &q, 5, &offset_delta))
            return 0;
        Py_ssize_t rest = q;
        if (!read_varint(body, end, &q, 5, &key_len))
            return 0;
        Py_ssize_t key_start = q;
        if (key_len > 0) {
            if (key_len > end - q)
                return 0;
            q += (Py_ssize_t)key_len;
        }
        if (!read_varint(body, end, &q, 5, &value_len))
            return 0;
        if (value_len > 0 && value_len > end - q)
            return 0;
        rec_info *r = infos + i;
        r->rest = rest;
        r->end = end;
        r->offset_delta = offset_delta;
        r->timestamp = lat >= -1 ? lat : base_ts + ts_delta;
        r->key_start = key_start;
        r->key_len = key_len < 0 ? -1 : key_len;
        r->value_len = value_len < 0 ? -1 : value_len;
        pos = end;
    }
    return 1;
}

static rec_info *infos_for(rec_info **infos, Py_ssize_t *capacity, int64_t count)
{
    if (count > *capacity) {
        rec_info *grown = PyMem_RawRealloc(*infos, (size_t)count * sizeof(rec_info));
        if (grown == NULL)
            return NULL;
        *infos = grown;
        *capacity = (Py_ssize_t)count;
    }
    return *infos;
}

static uint8_t *digests_for(uint8_t **digests, Py_ssize_t *capacity, int64_t count)
{
    if (count > *capacity) {
        uint8_t *grown = PyMem_RawRealloc(*digests, (size_t)count * 16);
        if (grown == NULL)
            return NULL;
        *digests = grown;
        *capacity = (Py_ssize_t)count;
    }
    return *digests;
}

static int put_one(uint8_t *t, Py_ssize_t slots, const uint8_t *digest, int64_t offset, Py_ssize_t *entries)
{
    for (Py_ssize_t attempt = 0;; attempt++) {
        uint8_t *slot = t + position_of(digest, attempt, slots);
        if (is_empty(slot)) {
            memcpy(slot, digest, 16);
            put_offset(slot + 16, offset);
            (*entries)++;
            return 1;
        }
        if (memcmp(slot, digest, 16) == 0) {
            put_offset(slot + 16, offset);
            return 1;
        }
    }
}

static int64_t get_one(const uint8_t *t, Py_ssize_t slots, const uint8_t *digest)
{
    Py_ssize_t max_attempts = slots + 12;
    for (Py_ssize_t attempt = 0; attempt < max_attempts; attempt++) {
        const uint8_t *slot = t + position_of(digest, attempt, slots);
        if (is_empty(slot))
            return -1;
        if (memcmp(slot, digest, 16) == 0)
            return get_offset(slot + 16);
    }
    return -1;
}

/* Append n native int64 to the bytearray marks. */
static int append_marks(PyObject *marks, const int64_t *values, Py_ssize_t n)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(marks), add = n * (Py_ssize_t)sizeof(int64_t);
    if (PyByteArray_Resize(marks, size + add) < 0)
        return 0;
    memcpy(PyByteArray_AS_STRING(marks) + size, values, (size_t)add);
    return 1;
}

/* map_plain_batches(chunk, pos, end, start_offset, table, slots, entries, max_entries, latest, hash_key
 *                   [, chunk_pos, marks, mark_every, next_mark])
 *   -> (pos, entries, latest, stop, records, bytes, keyless, next_mark)
 * Each batch's CRC is checked (STOP_CORRUPT at the first that fails: nothing of it is mapped), its records' digests
 * computed and their first slots prefetched before any put (the table is far larger than the caches: the misses of a
 * batch overlap). keyless: the records without a key at or past start_offset (the cleaning pass counts them invalid).
 * marks (a bytearray, or None): for the first batch starting at or past file position next_mark (chunk_pos + its
 * position in the chunk), (base offset, file position) as two native int64 are appended and next_mark moves
 * mark_every bytes past it: a sparse index of batch starts the walk verified, for the cleaning pass to seek by. */
static PyObject *map_plain_batches(PyObject *self, PyObject *args)
{
    Py_buffer chunk, table;
    Py_ssize_t pos, end, slots, entries, max_entries;
    long long start_offset, latest, chunk_pos = 0, mark_every = 0, next_mark = 0;
    PyObject *marks = Py_None;
    Py_buffer key_view;
    sip_key key;
    if (!PyArg_ParseTuple(args, "y*nnLw*nnnLy*|LOLL", &chunk, &pos, &end, &start_offset, &table, &slots, &entries,
                          &max_entries, &latest, &key_view, &chunk_pos, &marks, &mark_every, &next_mark))
        return NULL;
    int key_ok = parse_key(&key_view, &key);
    PyBuffer_Release(&key_view);
    if (!key_ok) {
        PyBuffer_Release(&chunk);
        PyBuffer_Release(&table);
        return NULL;
    }
    if (end > chunk.len || pos < 0 || slots <= 0 || table.len < slots * ENTRY ||
        (marks != Py_None && (!PyByteArray_Check(marks) || mark_every <= 0))) {
        PyBuffer_Release(&chunk);
        PyBuffer_Release(&table);
        PyErr_SetString(PyExc_ValueError, "bad chunk bounds, table or marks");
        return NULL;
    }
    int marking = marks != Py_None;
    const uint8_t *buf = chunk.buf;
    uint8_t *t = table.buf;
    int stop = STOP_END;
    int64_t records = 0, bytes = 0, keyless = 0;
    rec_info *infos = NULL;
    Py_ssize_t capacity = 0, digest_capacity = 0;
    uint8_t *digests = NULL;
    int64_t *new_marks = NULL;
    Py_ssize_t marks_n = 0, marks_capacity = 0;
    int nomem = 0;
    /* The CRCs first, with the GIL (the package's function is Python's to call), over the batches the walk below
     * can reach: it stops at the first that does not match. */
    Py_ssize_t corrupt_at = -1;
    for (Py_ssize_t at = pos;;) {
        Py_ssize_t size = batch_at(buf, at, end);
        if (size <= 0 || (attributes_of(buf + at) & SLOW_ATTRIBUTES))
            break;
        uint32_t crc;
        if (crc_of(buf + at + H_ATTRIBUTES, size - H_ATTRIBUTES, &crc) < 0) {
            PyBuffer_Release(&chunk);
            PyBuffer_Release(&table);
            return NULL;
        }
        if (crc != (uint32_t)be32(buf + at + H_CRC)) {
            corrupt_at = at;
            break;
        }
        at += size;
    }
    Py_BEGIN_ALLOW_THREADS
    for (;;) {
        Py_ssize_t size = batch_at(buf, pos, end);
        if (size == 0)
            break;
        const uint8_t *b = buf + pos;
        int16_t attributes = (int16_t)attributes_of(b);
        if (size < 0 || (attributes & SLOW_ATTRIBUTES)) {
            stop = STOP_SLOW;
            break;
        }
        if (pos == corrupt_at) {
            stop = STOP_CORRUPT;
            break;
        }
        int64_t base = be64(b), last = base + be32(b + H_LAST_DELTA);
        int64_t count = be32(b + H_COUNT);
        if (count < 0) {
            stop = STOP_INVALID;
            break;
        }
        if (last >= start_offset && (base <= latest || last < base)) {
            stop = STOP_ORDER;
            break;
        }
        if (count > 0 && last >= start_offset) {
            if (infos_for(&infos, &capacity, count) == NULL || digests_for(&digests, &digest_capacity, count) == NULL) {
                nomem = 1;
                break;
            }
            if (!parse_body(b + H_OVERHEAD, size - H_OVERHEAD, count, 0, -2, infos)) {
                stop = STOP_INVALID;
                break;
            }
            for (int64_t i = 0; i < count; i++) {
                rec_info *r = infos + i;
                if (r->key_len >= 0 && base + r->offset_delta >= start_offset) {
                    key_digest(&key, b + H_OVERHEAD + r->key_start, (Py_ssize_t)r->key_len, digests + i * 16);
                    __builtin_prefetch(t + position_of(digests + i * 16, 0, slots), 1);
                }
            }
            int full = 0;
            int64_t batch_keyless = 0;
            for (int64_t i = 0; i < count; i++) {
                rec_info *r = infos + i;
                int64_t offset = base + r->offset_delta;
                if (offset >= start_offset) {
                    if (r->key_len >= 0) {
                        if (entries >= max_entries) {
                            full = 1;
                            break;
                        }
                        put_one(t, slots, digests + i * 16, offset, &entries);
                        latest = offset;
                    } else {
                        batch_keyless++;
                    }
                }
                records++;
            }
            if (full) {
                stop = STOP_FULL;
                break;
            }
            keyless += batch_keyless;
        } else {
            records += count;
        }
        if (marking && chunk_pos + pos >= next_mark) {
            if (marks_n + 2 > marks_capacity) {
                Py_ssize_t grown_capacity = marks_capacity ? marks_capacity * 2 : 64;
                int64_t *grown = PyMem_RawRealloc(new_marks, (size_t)grown_capacity * sizeof(int64_t));
                if (grown == NULL) {
                    nomem = 1;
                    break;
                }
                new_marks = grown;
                marks_capacity = grown_capacity;
            }
            new_marks[marks_n++] = base;
            new_marks[marks_n++] = chunk_pos + pos;
            next_mark = chunk_pos + pos + mark_every;
        }
        if (last >= start_offset)
            latest = last;
        bytes += size;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(infos);
    PyMem_RawFree(digests);
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&table);
    PyObject *result = NULL;
    if (nomem)
        PyErr_NoMemory();
    else if (marks_n == 0 || append_marks(marks, new_marks, marks_n))
        result = Py_BuildValue("(nnLiLLLL)", pos, entries, latest, stop, (long long)records, (long long)bytes,
                               (long long)keyless, next_mark);
    PyMem_RawFree(new_marks);
    return result;
}

/* A bytearray grown geometrically while a pass appends to it (PyByteArray_Resize alone reallocates each time):
 * `used` is the logical size, set on the bytearray by finish_bytes. */
static int append_bytes(PyObject *out, Py_ssize_t *used, const void *data, Py_ssize_t n)
{
    Py_ssize_t size = PyByteArray_GET_SIZE(out);
    if (*used + n > size) {
        Py_ssize_t grown = size * 2 > *used + n ? size * 2 : *used + n + 65536;
        if (PyByteArray_Resize(out, grown) < 0)
            return 0;
    }
    memcpy(PyByteArray_AS_STRING(out) + *used, data, (size_t)n);
    *used += n;
    return 1;
}

static int finish_bytes(PyObject *out, Py_ssize_t used)
{
    return PyByteArray_Resize(out, used) == 0;
}

static int contains(const int64_t *sorted, Py_ssize_t n, int64_t value)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (sorted[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && sorted[lo] == value;
}

/* filter_plain_batches(chunk, pos, end, table, slots, latest, upper_bound, now, delete_retention_ms, retain_offsets,
 *                      out, meta, hash_key[, prev_last])
 *   -> (pos, stop, messages_read, bytes_read, messages_retained, bytes_retained, invalid, last offset consumed or -1)
 * Appends the kept batches to the bytearray out and, per batch written, (last offset, max timestamp, size) as native
 * int64 to the bytearray meta. Holds the GIL (it grows bytearrays). */
static PyObject *filter_plain_batches(PyObject *self, PyObject *args)
{
    Py_buffer chunk, table, retain;
    Py_ssize_t pos, end, slots;
    long long latest, upper_bound, now, retention, prev_last = -1;
    PyObject *out, *meta;
    Py_buffer key_view;
    sip_key key;
    if (!PyArg_ParseTuple(args, "y*nny*nLLLLy*O!O!y*|L", &chunk, &pos, &end, &table, &slots, &latest, &upper_bound,
                          &now, &retention, &retain, &PyByteArray_Type, &out, &PyByteArray_Type, &meta, &key_view,
                          &prev_last))
        return NULL;
    int key_ok = parse_key(&key_view, &key);
    PyBuffer_Release(&key_view);
    PyObject *result = NULL;
    rec_info *infos = NULL;
    Py_ssize_t capacity = 0;
    uint8_t *scratch = NULL, *digests = NULL;
    Py_ssize_t scratch_capacity = 0, digest_capacity = 0;
    if (!key_ok)
        goto done;
    if (end > chunk.len || pos < 0 || slots <= 0 || table.len < slots * ENTRY) {
        PyErr_SetString(PyExc_ValueError, "bad chunk bounds or table");
        goto done;
    }
    const uint8_t *buf = chunk.buf, *t = table.buf;
    const int64_t *retain_offsets = retain.buf;
    Py_ssize_t retain_n = retain.len / (Py_ssize_t)sizeof(int64_t);
    int stop = STOP_END;
    long long m_read = 0, b_read = 0, m_kept = 0, b_kept = 0, invalid = 0, last_seen = -1;
    Py_ssize_t out_used = PyByteArray_GET_SIZE(out), meta_used = PyByteArray_GET_SIZE(meta);
    for (;;) {
        Py_ssize_t size = batch_at(buf, pos, end);
        if (size == 0)
            break;
        const uint8_t *b = buf + pos;
        int16_t attributes = (int16_t)attributes_of(b);
        if (size < 0 || (attributes & SLOW_ATTRIBUTES)) {
            stop = STOP_SLOW;
            break;
        }
        uint32_t crc;
        if (crc_of(b + H_ATTRIBUTES, size - H_ATTRIBUTES, &crc) < 0)
            goto done;
        if (crc != (uint32_t)be32(b + H_CRC)) {
            stop = STOP_CORRUPT;
            break;
        }
        int64_t base = be64(b), last_delta = be32(b + H_LAST_DELTA), last = base + last_delta;
        int64_t base_ts = be64(b + H_BASE_TS), max_ts = be64(b + H_MAX_TS), producer_id = be64(b + H_PRODUCER_ID);
        int64_t count = be32(b + H_COUNT);
        if (base <= prev_last || last < base) {
            stop = STOP_ORDER;
            break;
        }
        int has_horizon = (attributes & 0x40) != 0, log_append = (attributes & 0x08) != 0;
        if (count < 0) {
            stop = STOP_INVALID;
            break;
        }
        int retain_empty = (producer_id >= 0 && contains(retain_offsets, retain_n, last)) || last + 1 == upper_bound;
        int64_t kept = count, kept_ts_max = -1;
        int tombstones = 0;
        if (count > 0 && base <= latest) {
            if (infos_for(&infos, &capacity, count) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            if (!parse_body(b + H_OVERHEAD, size - H_OVERHEAD, count, base_ts, log_append ? max_ts : -2, infos)) {
                stop = STOP_INVALID;
                break;
            }
            int retain_deletes = !has_horizon || now < base_ts;
            if (digests_for(&digests, &digest_capacity, count) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            /* the batch's digests first, their first slots prefetched: the lookups' cache misses overlap */
            for (int64_t i = 0; i < count; i++) {
                rec_info *r = infos + i;
                if (r->key_len >= 0 && base + r->offset_delta <= latest) {
                    key_digest(&key, b + H_OVERHEAD + r->key_start, (Py_ssize_t)r->key_len, digests + i * 16);
                    __builtin_prefetch(t + position_of(digests + i * 16, 0, slots));
                }
            }
            kept = 0;
            for (int64_t i = 0; i < count; i++) {
                rec_info *r = infos + i;
                int64_t offset = base + r->offset_delta;
                int keep;
                if (offset > latest) {
                    keep = 1;
                } else if (r->key_len < 0) {
                    invalid++;
                    keep = 0;
                } else {
                    int64_t found = get_one(t, slots, digests + i * 16);
                    keep = offset >= found && (r->value_len >= 0 || retain_deletes);
                }
                r->key_len = keep ? r->key_len : -2; /* -2: dropped */
                if (keep) {
                    kept++;
                    if (r->value_len < 0)
                        tombstones = 1;
                }
            }
        } else if (count > 0) {
            /* every record past what the map saw: all kept (their tombstones too) */
            if (infos_for(&infos, &capacity, count) == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            if (!parse_body(b + H_OVERHEAD, size - H_OVERHEAD, count, base_ts, log_append ? max_ts : -2, infos)) {
                stop = STOP_INVALID;
                break;
            }
            for (int64_t i = 0; i < count; i++)
                if (infos[i].value_len < 0)
                    tombstones = 1;
        }
        m_read += count;
        b_read += size;
        int set_horizon = tombstones && !has_horizon;
        const uint8_t *write_from = NULL;
        Py_ssize_t write_size = 0;
        int64_t written_max_ts = max_ts;
        if (kept == 0) {
            if (!retain_empty) {
                last_seen = prev_last = last;
                pos += size;
                continue;
            }
            /* Kafka's writeEmptyHeader */
            if (H_OVERHEAD > scratch_capacity) {
                uint8_t *grown = PyMem_RawRealloc(scratch, H_OVERHEAD);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                scratch = grown;
                scratch_capacity = H_OVERHEAD;
            }
            memcpy(scratch, b, H_OVERHEAD);
            put_be32(scratch + H_LENGTH, H_OVERHEAD - 12);
            put_be16(scratch + H_ATTRIBUTES, (int16_t)(attributes & (0x08 | 0x10 | 0x20)));
            put_be64(scratch + H_BASE_TS, -1);
            put_be32(scratch + H_COUNT, 0);
            uint32_t empty_crc;
            if (crc_of(scratch + H_ATTRIBUTES, H_OVERHEAD - H_ATTRIBUTES, &empty_crc) < 0)
                goto done;
            put_be32(scratch + H_CRC, (int32_t)empty_crc);
            write_from = scratch;
            write_size = H_OVERHEAD;
        } else if (kept == count && !set_horizon) {
            write_from = b;
            write_size = size;
        } else {
            int64_t horizon = set_horizon ? now + retention : (has_horizon ? base_ts : INT64_MIN);
            int64_t new_base = horizon;
            Py_ssize_t need = H_OVERHEAD;
            for (int64_t i = 0; i < count; i++) {
                rec_info *r = infos + i;
                if (r->key_len == -2)
                    continue;
                if (new_base == INT64_MIN)
                    new_base = r->timestamp;
                if (r->timestamp > kept_ts_max)
                    kept_ts_max = r->timestamp;
                need += (r->end - r->rest) + 5 + 1 + 10 + 5;
            }
            if (need > scratch_capacity) {
                uint8_t *grown = PyMem_RawRealloc(scratch, (size_t)need);
                if (grown == NULL) {
                    PyErr_NoMemory();
                    goto done;
                }
                scratch = grown;
                scratch_capacity = need;
            }
            Py_ssize_t n = H_OVERHEAD;
            for (int64_t i = 0; i < count; i++) {
                rec_info *r = infos + i;
                if (r->key_len == -2)
                    continue;
                uint8_t head[16];
                Py_ssize_t h = 0;
                head[h++] = 0;
                h += write_varint(head + h, r->timestamp - new_base);
                h += write_varint(head + h, r->offset_delta);
                Py_ssize_t rest_len = r->end - r->rest;
                n += write_varint(scratch + n, (int64_t)(h + rest_len));
                memcpy(scratch + n, head, (size_t)h);
                n += h;
                memcpy(scratch + n, b + H_OVERHEAD + r->rest, (size_t)rest_len);
                n += rest_len;
            }
            written_max_ts = log_append ? max_ts : kept_ts_max;
            memcpy(scratch, b, H_OVERHEAD);
            put_be32(scratch + H_LENGTH, (int32_t)(n - 12));
            int16_t new_attributes = (int16_t)((attributes & ~0x40) | (horizon != INT64_MIN ? 0x40 : 0));
            put_be16(scratch + H_ATTRIBUTES, new_attributes);
            put_be64(scratch + H_BASE_TS, new_base);
            put_be64(scratch + H_MAX_TS, written_max_ts);
            put_be32(scratch + H_COUNT, (int32_t)kept);
            uint32_t new_crc;
            if (crc_of(scratch + H_ATTRIBUTES, n - H_ATTRIBUTES, &new_crc) < 0)
                goto done;
            put_be32(scratch + H_CRC, (int32_t)new_crc);
            write_from = scratch;
            write_size = n;
        }
        int64_t row[3] = {last, written_max_ts, write_size};
        if (!append_bytes(out, &out_used, write_from, write_size) || !append_bytes(meta, &meta_used, row, sizeof(row)))
            goto done;
        m_kept += kept;
        b_kept += write_size;
        last_seen = prev_last = last;
        pos += size;
    }
    if (!finish_bytes(out, out_used) || !finish_bytes(meta, meta_used))
        goto done;
    result = Py_BuildValue("(niLLLLLL)", pos, stop, m_read, b_read, m_kept, b_kept, invalid, last_seen);
done:
    PyMem_RawFree(infos);
    PyMem_RawFree(scratch);
    PyMem_RawFree(digests);
    PyBuffer_Release(&chunk);
    PyBuffer_Release(&table);
    PyBuffer_Release(&retain);
    return result;
}

/* map_offsets(table, slots, entries) -> bytes: the offsets the map holds (entries native int64, in slot order): the
 * records of the mapped part that hold their key's latest offset, all that a cleaning can keep of it. */
static PyObject *map_offsets(PyObject *self, PyObject *args)
{
    Py_buffer table;
    Py_ssize_t slots, entries;
    if (!PyArg_ParseTuple(args, "y*nn", &table, &slots, &entries))
        return NULL;
    PyObject *out = NULL;
    if (slots <= 0 || table.len < slots * ENTRY || entries < 0 || entries > slots) {
        PyErr_SetString(PyExc_ValueError, "the table and its entry count disagree");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, entries * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL)
        goto done;
    int64_t *o = (int64_t *)PyBytes_AS_STRING(out);
    const uint8_t *t = table.buf;
    Py_ssize_t n = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < slots && n < entries; i++) {
        const uint8_t *slot = t + i * ENTRY;
        if (!is_empty(slot))
            o[n++] = get_offset(slot + 16);
    }
    Py_END_ALLOW_THREADS
    if (n != entries) {
        Py_CLEAR(out);
        PyErr_Format(PyExc_ValueError, "the table holds %zd entries, not %zd", n, entries);
    }
done:
    PyBuffer_Release(&table);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS, "(fields, hashes) of a batch's records (local.cleaner.records)"},
    {"rebuild_records", rebuild_records, METH_VARARGS, "the kept records re-encoded (local.cleaner.records)"},
    {"map_put_many", map_put_many, METH_VARARGS, "Kafka's SkimpyOffsetMap.put, for many digests"},
    {"map_get_many", map_get_many, METH_VARARGS, "Kafka's SkimpyOffsetMap.get, for many digests"},
    {"map_plain_batches", map_plain_batches, METH_VARARGS, "the offset map pass over a chunk of plain batches"},
    {"filter_plain_batches", filter_plain_batches, METH_VARARGS, "the cleaning pass over a chunk of plain batches"},
    {"map_offsets", map_offsets, METH_VARARGS, "the offsets an offset map holds"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cleancore", "The log cleaner's per-record loops.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__cleancore(void)
{
    if (crc_import() < 0)
        return NULL;
    return PyModule_Create(&module);
}
