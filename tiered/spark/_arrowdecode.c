/*
 * tiered.spark._arrowdecode: the records of v2 record batches straight into Arrow buffers, in C.
 *
 * The Spark source's decoder (tiered.spark.arrow_records) walks every record of the batches it collected and cuts
 * its fields into Arrow columns. In numpy that costs about a microsecond a record, as much as Spark's own path from
 * a Python worker to the JVM; this is the same walk at native speed, one pass over the record bodies, writing each
 * column's buffers (values, int32 offsets, validity bitmaps) ready for pyarrow.Array.from_buffers. It is optional:
 * the build skips it where no C compiler exists, and arrow_records then runs its numpy path, which stays the
 * definition. The two are held to the same Arrow data on every input, valid or not, by
 * tests/property/test_arrow_decode.py.
 *
 * decode(sources, meta, want, from_offset, until_offset, partial, out) -> tuple
 *
 *   sources: buffers holding the batches' record bodies (decompressed), one or many bodies each
 *   meta:   int64[9 * batches], native order: base offset, base timestamp, max timestamp, attributes,
 *           partition leader epoch, records count (> 0), then where the body is: the index of its source, its
 *           start in it and its length
 *   want:   a bitmask of the variable-size columns to build: 1 key, 2 value, 4 headers
 *   partial: keep only the records with from_offset <= offset < until_offset (else every record)
 *   out:    the writable buffers the columns are written to, for n = the records counted in meta and B = the
 *           bodies' bytes: int64 offsets [n], int64 timestamps in microseconds [n], int32 timestamp types [n],
 *           int32 epochs [n], the epochs' validity bitmap [n bits], then for the key and the value (None when not
 *           wanted) int32 offsets [n + 1], data [B], validity bitmap [n bits]. The timestamps, the timestamp types
 *           and the epochs with their bitmap may be None too: a column not asked for is not written (the offsets
 *           are always: the walk keeps records by them). The caller allocates them (memory
 *           it reuses, where fresh pages would cost a page fault each), of any contents (every byte exposed is
 *           written here), and wraps them in Arrow arrays without a copy.
 *
 * Returns (rows, epoch nulls, key nulls, key bytes, value nulls, value bytes, headers): the records kept; null
 * counts and the bytes of data written (the buffers are larger: Arrow must be given them sliced, or it would send
 * the unused part to Spark too); headers None (not
 * wanted) or (int32 list offsets, number of headers, int32 key offsets, key bytes (UTF-8 unchecked), int32 value
 * offsets, value bytes, value validity or None, value null count), bytes objects of their own (headers are rare).
 * Every record is checked whether it is kept or not: lengths that chain through the body to its end, exactly
 * `count` records, fields and headers that fill each record exactly. A record that breaks a rule raises
 * ValueError(batch index, what is wrong); the caller names the batch.
 *
 * scan(data, start, limit, from_offset, until_offset, ts_floor, transactional, max_records, max_bytes, source, meta)
 *   -> (consumed, batches, records, body bytes)
 *
 *   The v2 batches of data[start, limit) that need nothing of the caller but a decode, found and CRC-checked in one
 *   call (the per-batch Python cost as much as the walk of their records), up to the first one that does: not whole
 *   before `limit`, not v2, compressed, a control batch, transactional unless `transactional`, no records, records
 *   outside [from_offset, until_offset), a max timestamp below `ts_floor`, or a CRC that does not match (each the
 *   caller's to take on the path that names what is wrong). Stops too before a batch once `max_records` records
 *   or `max_bytes` body bytes were found, or `meta` (writable, int64 rows of decode's 9 columns, `source` as the
 *   source index) is full. Returns the bytes of whole batches found from `start`, their number, their records
 *   and their body bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../../local/_batch_header.h"
#include "../../local/_crc32c.h"

#define WANT_KEY 1
#define WANT_VALUE 2
#define WANT_HEADERS 4
#define MIN_RECORD_BYTES 7   /* length, attributes, timestamp and offset deltas, key, value, header count */
#define META_COLUMNS 9       /* int64s of meta per batch (the module docstring) */

/* A growing output buffer, a bytes object resized to its length at the end (no copy into Arrow). */
typedef struct {
    PyObject *obj;
    char *p;
    Py_ssize_t len, cap;
} Out;

static int out_init(Out *o, Py_ssize_t cap)
{
    if (cap < 8)
        cap = 8;
    o->obj = PyBytes_FromStringAndSize(NULL, cap);
    if (o->obj == NULL)
        return -1;
    o->p = PyBytes_AS_STRING(o->obj);
    o->len = 0;
    o->cap = cap;
    return 0;
}

static int out_reserve(Out *o, Py_ssize_t more)
{
    if (o->len + more <= o->cap)
        return 0;
    Py_ssize_t cap = o->cap * 2;
    if (cap < o->len + more)
        cap = o->len + more;
    if (_PyBytes_Resize(&o->obj, cap) < 0)
        return -1;
    o->p = PyBytes_AS_STRING(o->obj);
    o->cap = cap;
    return 0;
}

static int out_put(Out *o, const void *src, Py_ssize_t n)
{
    if (out_reserve(o, n) < 0)
        return -1;
    memcpy(o->p + o->len, src, (size_t)n);
    o->len += n;
    return 0;
}

static PyObject *out_finish(Out *o)
{
    if (_PyBytes_Resize(&o->obj, o->len) < 0)
        return NULL;
    PyObject *obj = o->obj;
    o->obj = NULL;
    return obj;
}

/* A variable-size binary column: int32 offsets, data, validity bitmap. */
typedef struct {
    Out offsets, data, validity;
    Py_ssize_t rows, nulls;
} Column;

static int column_init(Column *c, Py_ssize_t rows, Py_ssize_t data_cap)
{
    memset(c, 0, sizeof(*c));
    if (out_init(&c->offsets, (rows + 1) * 4) < 0 || out_init(&c->data, data_cap) < 0
        || out_init(&c->validity, (rows + 7) / 8))
        return -1;
    memset(c->validity.p, 0, (size_t)c->validity.cap);
    int32_t zero = 0;
    return out_put(&c->offsets, &zero, 4);
}

/* Append one slot: `len` bytes from `src`, or a null when len < 0. */
static int column_add(Column *c, const uint8_t *src, int64_t len)
{
    if (len >= 0) {
        if (c->data.len + len > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "more than 2 GiB of one column in a chunk of batches");
            return -1;
        }
        if (out_put(&c->data, src, (Py_ssize_t)len) < 0)
            return -1;
    } else {
        c->nulls++;
    }
    Py_ssize_t row = c->rows++;
    if (out_reserve(&c->validity, (c->rows + 7) / 8 - c->validity.len) < 0)
        return -1;
    while (c->validity.len < (c->rows + 7) / 8)
        c->validity.p[c->validity.len++] = 0;
    if (len >= 0)
        c->validity.p[row >> 3] |= (char)(1 << (row & 7));
    int32_t end = (int32_t)c->data.len;
    return out_put(&c->offsets, &end, 4);
}

static void column_clear(Column *c)
{
    Py_CLEAR(c->offsets.obj);
    Py_CLEAR(c->data.obj);
    Py_CLEAR(c->validity.obj);
}

/* A bitmap, or None when nothing is null. */
static PyObject *validity_or_none(Out *o, Py_ssize_t nulls)
{
    if (nulls)
        return out_finish(o);
    Py_CLEAR(o->obj);
    return Py_NewRef(Py_None);
}

/* (offsets, data, validity or None, null count) */
static PyObject *column_finish(Column *c)
{
    PyObject *offsets = out_finish(&c->offsets);
    PyObject *data = offsets ? out_finish(&c->data) : NULL;
    PyObject *validity = data != NULL ? validity_or_none(&c->validity, c->nulls) : NULL;
    if (validity == NULL) {
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNNn)", offsets, data, validity, c->nulls);
}

/* A variable-size binary column written into the caller's buffers. */
typedef struct {
    int32_t *offsets;
    char *data, *validity;
    Py_ssize_t rows, nulls, len, cap;
} Slices;

static inline int slices_add(Slices *c, const uint8_t *src, int64_t len)
{
    Py_ssize_t row = c->rows++;
    if (len >= 0) {
        if (len > c->cap - c->len || c->len + len > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a column's data outgrew its buffer (or 2 GiB)");
            return -1;
        }
        memcpy(c->data + c->len, src, (size_t)len);
        c->len += (Py_ssize_t)len;
        c->validity[row >> 3] |= (char)(1 << (row & 7));
    } else {
        c->nulls++;
    }
    c->offsets[row + 1] = (int32_t)c->len;
    return 0;
}

/* The zigzag varint at p[*q] (at most max_bytes bytes, all before `end`): 1 with *value set and *q past it, 0 when
 * it is longer or does not end before `end`. Assembled as the numpy path does: 64 bits, higher ones dropped. */
static inline int varint(const uint8_t *p, Py_ssize_t end, Py_ssize_t *q, int max_bytes, int64_t *value)
{
    uint64_t result = 0;
    Py_ssize_t i = *q;
    for (int n = 0; n < max_bytes; n++, i++) {
        if (i >= end)
            return 0;
        uint8_t b = p[i];
        result |= (n < 10 ? (uint64_t)(b & 0x7F) << (7 * n) : 0);
        if (b < 0x80) {
            *value = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            *q = i + 1;
            return 1;
        }
    }
    return 0;
}

typedef struct {
    Py_ssize_t nbatches;
    Py_buffer *views; /* the sources */
    const int64_t *meta;
    int want, partial;
    int64_t from_offset, until_offset;
    /* outputs: the caller's buffers */
    int64_t *offset, *timestamp;
    int32_t *ts_type, *epoch;
    char *epoch_validity;
    Py_ssize_t rows, epoch_nulls;
    Slices key, value;
    /* headers: bytes objects of their own */
    Column hkey, hvalue;
    Out hlist; /* int32 list offsets of the headers column */
} Decode;

static int fail(Py_ssize_t batch, const char *what)
{
    PyObject *args = Py_BuildValue("(ns)", batch, what);
    if (args != NULL) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return -1;
}

/* Headers of one record in p[q, end): checked, and added when kept. */
static int headers(Decode *d, Py_ssize_t b, const uint8_t *p, Py_ssize_t q, Py_ssize_t end, int64_t count, int keep)
{
    for (int64_t h = 0; h < count; h++) {
        int64_t klen, vlen;
        if (!varint(p, end, &q, 5, &klen) || klen < 0 || q + klen > end)
            return fail(b, "a record header runs past its record");
        Py_ssize_t kpos = q;
        q += (Py_ssize_t)klen;
        if (!varint(p, end, &q, 5, &vlen) || (vlen >= 0 && q + vlen > end))
            return fail(b, "a record header runs past its record");
        if (keep && (column_add(&d->hkey, p + kpos, klen) < 0 || column_add(&d->hvalue, p + q, vlen < 0 ? -1 : vlen) < 0))
            return -1;
        if (vlen > 0)
            q += (Py_ssize_t)vlen;
    }
    if (q != end)
        return fail(b, "a record's headers do not end where the record does");
    return 0;
}

static int decode_batch(Decode *d, Py_ssize_t b)
{
    const int64_t *m = d->meta + META_COLUMNS * b;
    const uint8_t *p = (const uint8_t *)d->views[m[6]].buf + m[7];
    Py_ssize_t body_end = (Py_ssize_t)m[8];
    int64_t base_offset = m[0], base_ts = m[1], max_ts = m[2], attributes = m[3], epoch = m[4], count = m[5];
    int log_append = (attributes & A_LOG_APPEND_TIME) != 0;
    int32_t ts_type = log_append ? 1 : 0, epoch32 = (int32_t)epoch;
    Py_ssize_t q = 0;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, off_delta, klen, vlen, hcount;
        if (q >= body_end)
            return fail(b, "the records do not fill its body");
        if (!varint(p, body_end, &q, 5, &length))
            return fail(b, "a record length runs past its body or is longer than 5 bytes");
        if (length < 0 || q + length > body_end)
            return fail(b, "a record runs past its body");
        Py_ssize_t rec_end = q + (Py_ssize_t)length;
        Py_ssize_t r = q + 1; /* past the attributes */
        if (r > rec_end || !varint(p, rec_end, &r, 10, &ts_delta) || !varint(p, rec_end, &r, 5, &off_delta)
            || !varint(p, rec_end, &r, 5, &klen))
            return fail(b, "a record runs past its declared length");
        Py_ssize_t kpos = r;
        if (klen > 0 && klen > rec_end - r)
            return fail(b, "a record runs past its declared length");
        r += klen > 0 ? (Py_ssize_t)klen : 0;
        if (!varint(p, rec_end, &r, 5, &vlen))
            return fail(b, "a record runs past its declared length");
        Py_ssize_t vpos = r;
        if (vlen > 0 && vlen > rec_end - r)
            return fail(b, "a record runs past its declared length");
        r += vlen > 0 ? (Py_ssize_t)vlen : 0;
        if (!varint(p, rec_end, &r, 5, &hcount) || hcount < 0)
            return fail(b, "a record runs past its declared length");
        if (hcount == 0 && r != rec_end)
            return fail(b, "a record's fields do not fill it");
        int64_t offset = (int64_t)((uint64_t)base_offset + (uint64_t)off_delta);
        int keep = !d->partial || (offset >= d->from_offset && offset < d->until_offset);
        if (hcount > 0 && headers(d, b, p, r, rec_end, hcount, keep && (d->want & WANT_HEADERS)) < 0)
            return -1;
        q = rec_end;
        if (!keep)
            continue;
        Py_ssize_t row = d->rows++;
        d->offset[row] = offset;
        if (d->timestamp != NULL)
            d->timestamp[row] = (int64_t)((uint64_t)(log_append ? max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta))
                                          * 1000u);
        if (d->ts_type != NULL)
            d->ts_type[row] = ts_type;
        if (d->epoch != NULL) {
            d->epoch[row] = epoch32;
            if (epoch32 >= 0)
                d->epoch_validity[row >> 3] |= (char)(1 << (row & 7));
            else
                d->epoch_nulls++;
        }
        if ((d->want & WANT_KEY) && slices_add(&d->key, p + kpos, klen < 0 ? -1 : klen) < 0)
            return -1;
        if ((d->want & WANT_VALUE) && slices_add(&d->value, p + vpos, vlen < 0 ? -1 : vlen) < 0)
            return -1;
        if (d->want & WANT_HEADERS) {
            int32_t end = (int32_t)d->hkey.rows;
            if (out_put(&d->hlist, &end, 4) < 0)
                return -1;
        }
    }
    if (q != body_end)
        return fail(b, "the records do not fill its body");
    return 0;
}

static void decode_clear(Decode *d)
{
    column_clear(&d->hkey);
    column_clear(&d->hvalue);
    Py_CLEAR(d->hlist.obj);
}

static PyObject *finish(Decode *d)
{
    PyObject *hdrs;
    if (d->want & WANT_HEADERS) {
        Py_ssize_t nheaders = d->hkey.rows;
        PyObject *hk = column_finish(&d->hkey);
        PyObject *hv = hk ? column_finish(&d->hvalue) : NULL;
        PyObject *hl = hv ? out_finish(&d->hlist) : NULL;
        /* (list offsets, n headers, key offsets, key data, value offsets, value data, value validity, nulls) */
        hdrs = hl == NULL ? NULL : Py_BuildValue("(OnOOOOOO)", hl, nheaders, PyTuple_GET_ITEM(hk, 0),
                                                 PyTuple_GET_ITEM(hk, 1), PyTuple_GET_ITEM(hv, 0),
                                                 PyTuple_GET_ITEM(hv, 1), PyTuple_GET_ITEM(hv, 2), PyTuple_GET_ITEM(hv, 3));
        Py_XDECREF(hk);
        Py_XDECREF(hv);
        Py_XDECREF(hl);
        if (hdrs == NULL)
            return NULL;
    } else {
        hdrs = Py_NewRef(Py_None);
    }
    return Py_BuildValue("(nnnnnnN)", d->rows, d->epoch_nulls, d->key.nulls, d->key.len, d->value.nulls, d->value.len,
                         hdrs);
}

/* out[i] as a writable buffer of at least `size` bytes (views[i] holds it until released). */
static char *out_buffer(PyObject *out, Py_ssize_t i, Py_buffer *views, Py_ssize_t size)
{
    if (PyObject_GetBuffer(PyList_GET_ITEM(out, i), &views[i], PyBUF_WRITABLE) < 0)
        return NULL;
    if (views[i].len < size) {
        PyErr_Format(PyExc_ValueError, "out[%zd] has %zd bytes, %zd are needed", i, views[i].len, size);
        PyBuffer_Release(&views[i]);
        return NULL;
    }
    return (char *)views[i].buf;
}

#define OUT_BUFFERS 11

static PyObject *decode(PyObject *self, PyObject *args)
{
    PyObject *sources, *out;
    Py_buffer meta;
    Py_buffer outs[OUT_BUFFERS];
    int held[OUT_BUFFERS] = {0};
    Decode d;
    memset(&d, 0, sizeof(d));
    if (!PyArg_ParseTuple(args, "O!y*iLLpO!:decode", &PyList_Type, &sources, &meta, &d.want, &d.from_offset,
                          &d.until_offset, &d.partial, &PyList_Type, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t nsources = PyList_GET_SIZE(sources);
    Py_ssize_t acquired = 0;
    if (meta.len % (META_COLUMNS * (Py_ssize_t)sizeof(int64_t)) != 0 || PyList_GET_SIZE(out) != OUT_BUFFERS) {
        PyErr_SetString(PyExc_ValueError, "meta must hold 9 int64 per batch, and out 11 buffers");
        goto done;
    }
    d.nbatches = meta.len / (META_COLUMNS * (Py_ssize_t)sizeof(int64_t));
    d.meta = (const int64_t *)meta.buf;
    d.views = PyMem_Calloc((size_t)(nsources ? nsources : 1), sizeof(Py_buffer));
    if (d.views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; acquired < nsources; acquired++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(sources, acquired), &d.views[acquired], PyBUF_SIMPLE) < 0)
            goto done;
    }
    Py_ssize_t rows = 0, body_bytes = 0;
    for (Py_ssize_t b = 0; b < d.nbatches; b++) {
        const int64_t *m = d.meta + META_COLUMNS * b;
        if (m[6] < 0 || m[6] >= nsources || m[7] < 0 || m[8] < 0 || m[7] > d.views[m[6]].len
            || m[8] > d.views[m[6]].len - m[7]) {
            PyErr_Format(PyExc_ValueError, "meta row %zd names bytes outside its source", b);
            goto done;
        }
        /* a record takes at least MIN_RECORD_BYTES: a count beyond that is corrupt (and allocates nothing) */
        if (m[5] <= 0 || m[5] > m[8] / MIN_RECORD_BYTES) {
            fail(b, "the records do not fill its body");
            goto done;
        }
        rows += (Py_ssize_t)m[5];
        body_bytes += (Py_ssize_t)m[8];
    }
    Py_ssize_t bitmap = (rows + 7) / 8;
    Py_ssize_t sizes[OUT_BUFFERS] = {rows * 8, rows * 8, rows * 4, rows * 4, bitmap,
                                     (rows + 1) * 4, body_bytes, bitmap, (rows + 1) * 4, body_bytes, bitmap};
    char *bufs[OUT_BUFFERS] = {NULL};
    for (int i = 0; i < OUT_BUFFERS; i++) {
        /* the offsets always; the other fixed-size columns when given (None: not asked for); key, value by `want` */
        int wanted = i == 0 || (i < 5 ? PyList_GET_ITEM(out, i) != Py_None
                                      : i < 8 ? (d.want & WANT_KEY) : (d.want & WANT_VALUE));
        if (!wanted)
            continue;
        bufs[i] = out_buffer(out, i, outs, sizes[i]);
        if (bufs[i] == NULL)
            goto done;
        held[i] = 1;
    }
    d.offset = (int64_t *)bufs[0];
    d.timestamp = (int64_t *)bufs[1];
    d.ts_type = (int32_t *)bufs[2];
    d.epoch = (int32_t *)bufs[3];
    d.epoch_validity = bufs[4];
    if ((d.epoch == NULL) != (d.epoch_validity == NULL)) {
        PyErr_SetString(PyExc_ValueError, "out[3] and out[4] (the epochs and their bitmap) go together");
        goto done;
    }
    if (d.epoch_validity != NULL)
        memset(d.epoch_validity, 0, (size_t)bitmap);
    Slices *cols[2] = {&d.key, &d.value};
    for (int c = 0; c < 2; c++) {
        if (bufs[5 + 3 * c] == NULL)
            continue;
        cols[c]->offsets = (int32_t *)bufs[5 + 3 * c];
        cols[c]->offsets[0] = 0;
        cols[c]->data = bufs[6 + 3 * c];
        cols[c]->cap = body_bytes;
        cols[c]->validity = bufs[7 + 3 * c];
        memset(cols[c]->validity, 0, (size_t)bitmap);
    }
    if (d.want & WANT_HEADERS) {
        int32_t zero = 0;
        if (column_init(&d.hkey, 16, 256) < 0 || column_init(&d.hvalue, 16, 256) < 0
            || out_init(&d.hlist, (rows + 1) * 4) < 0 || out_put(&d.hlist, &zero, 4) < 0)
            goto done;
    }
    for (Py_ssize_t b = 0; b < d.nbatches; b++) {
        if (decode_batch(&d, b) < 0)
            goto done;
    }
    result = finish(&d);
done:
    decode_clear(&d);
    for (int i = 0; i < OUT_BUFFERS; i++) {
        if (held[i])
            PyBuffer_Release(&outs[i]);
    }
    for (Py_ssize_t i = 0; i < acquired; i++)
        PyBuffer_Release(&d.views[i]);
    PyMem_Free(d.views);
    PyBuffer_Release(&meta);
    return result;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer data, meta;
    Py_ssize_t start, limit, max_records, max_bytes, source;
    long long from_offset, until_offset, ts_floor;
    int transactional;
    if (!PyArg_ParseTuple(args, "y*nnLLLpnnnw*:scan", &data, &start, &limit, &from_offset, &until_offset, &ts_floor,
                          &transactional, &max_records, &max_bytes, &source, &meta))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || limit > data.len || start > limit) {
        PyErr_SetString(PyExc_ValueError, "start and limit must lie within data, start first");
        goto done;
    }
    const uint8_t *p = (const uint8_t *)data.buf;
    int64_t *row = (int64_t *)meta.buf;
    Py_ssize_t capacity = meta.len / (META_COLUMNS * (Py_ssize_t)sizeof(int64_t));
    Py_ssize_t q = start, batches = 0, records = 0, bytes = 0;
    while (batches < capacity && records < max_records && bytes < max_bytes && limit - q >= H_OVERHEAD) {
        const uint8_t *h = p + q;
        int64_t size = (int64_t)be32(h + H_LENGTH) + H_LOG_OVERHEAD;
        int attributes = attributes_of(h);
        int64_t base = be64(h), last_delta = be32(h + H_LAST_DELTA), count = be32(h + H_COUNT);
        int64_t max_ts = be64(h + H_MAX_TS);
        if (h[H_MAGIC] != 2 || size < H_OVERHEAD || size > limit - q || (attributes & (A_CODEC_MASK | A_CONTROL))
            || ((attributes & A_TRANSACTIONAL) && !transactional) || count <= 0 || last_delta < 0 || base < from_offset
            || base > until_offset - 1 - last_delta || max_ts < ts_floor)
            break;
        uint32_t crc;
        if (crc_of(h + H_ATTRIBUTES, (Py_ssize_t)size - H_ATTRIBUTES, &crc) < 0)
            goto done;
        if (crc != (uint32_t)be32(h + H_CRC))
            break;
        row[0] = base;
        row[1] = be64(h + H_BASE_TS);
        row[2] = max_ts;
        row[3] = attributes;
        row[4] = be32(h + H_EPOCH);
        row[5] = count;
        row[6] = source;
        row[7] = q + H_OVERHEAD;
        row[8] = size - H_OVERHEAD;
        row += META_COLUMNS;
        batches++;
        records += (Py_ssize_t)count;
        bytes += (Py_ssize_t)size - H_OVERHEAD;
        q += (Py_ssize_t)size;
    }
    result = Py_BuildValue("(nnnn)", q - start, batches, records, bytes);
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&meta);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(sources, meta, want, from_offset, until_offset, partial, out) -> tuple\n\n"
     "The records of v2 batch bodies as Arrow column buffers (see the module's source for the layout)."},
    {"scan", scan, METH_VARARGS,
     "scan(data, start, limit, from_offset, until_offset, ts_floor, transactional, max_records, max_bytes, source, "
     "meta) -> (consumed, batches, records, body bytes)\n\n"
     "The whole, CRC-checked, plain v2 batches from data[start:limit] (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_arrowdecode", "Kafka record batches into Arrow buffers at native speed.", -1, methods,
};

PyMODINIT_FUNC PyInit__arrowdecode(void)
{
    if (crc_import() < 0)
        return NULL;
    return PyModule_Create(&module);
}
