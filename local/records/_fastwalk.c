/*
 * local.records._fastwalk: the append fast path's record walk (local.validation._walk_simple_records) in C.
 *
 * Kafka's LogValidator looks at every record of a batch it appends (whole records, offset deltas 0..n-1, fields
 * that fill each record exactly, a key on a compacted topic). In CPython that look costs about a microsecond a
 * record, more than writing the batch; this is the same walk at native speed. It is optional: the build skips it
 * where no C compiler exists, and local.validation then runs the Python walk, which stays the definition. The
 * two are held to the same answer on every input by tests/property/test_fastwalk.py.
 *
 * walk_simple_records(buf, pos, end, index, count, require_key) -> (next index, its position)
 * plain_client_batch(buf, max_message_bytes, segment_bytes, compacted=False) -> header fields or None
 *
 * Checks whole records without headers from `pos` while they lie within `end`, starting at record `index` and
 * stopping at `count`. The first record that is unusual (headers, non-canonical varints the Python walk does not
 * inline), incomplete or wrong stops the walk; the caller looks at it closely. Reads never go past the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "../_batch_header.h"
#include "../_crc32c.h"

/* The zigzag varint at *q (at most max_bytes bytes, within len): its value, and *q moved past it. 0 when it is
 * longer than max_bytes or the data ends inside it (the Python walk's InvalidRecordError / IndexError). */
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

static Py_ssize_t walk(const uint8_t *buf, Py_ssize_t len, Py_ssize_t *pos_io, Py_ssize_t end, Py_ssize_t index,
                       Py_ssize_t count, int require_key)
{
    Py_ssize_t i = index;
    Py_ssize_t pos = *pos_io;
    while (i < count && pos < end) {
        Py_ssize_t q = pos;
        int64_t length, delta, k, v;
        if (!read_varint(buf, len, &q, 5, &length))
            break;
        Py_ssize_t start = q;
        if (length <= 0 || start + length > end)
            break;
        Py_ssize_t rec_end = start + (Py_ssize_t)length;
        q = start + 1; /* past the attributes */
        int ts_bytes = 0;   /* the timestamp delta, a varlong of at most 10 bytes: skipped */
        for (;;) {
            if (q >= len || ts_bytes >= 10)
                goto stop;
            if (buf[q] < 0x80)
                break;
            q++;
            ts_bytes++;
        }
        q++;
        if (!read_varint(buf, len, &q, 5, &delta) || delta != i) /* the offset delta is the record's index */
            break;
        if (q >= len)
            break;
        if (buf[q] < 0x80) { /* the key length */
            k = (int64_t)(buf[q] >> 1) ^ -(int64_t)(buf[q] & 1);
            if (k > 0)
                q += 1 + k;
            else if (k && require_key)
                break;
            else
                q += 1;
        } else {
            if (!read_varint(buf, len, &q, 5, &k))
                break;
            if (k > 0)
                q += k;
            else if (require_key)
                break;
        }
        if (q >= len || !read_varint(buf, len, &q, 5, &v)) /* the value length */
            break;
        if (v > 0)
            q += v;
        if (q + 1 != rec_end || q >= len || buf[q]) /* no headers, and the fields fill the record exactly */
            break;
        pos = rec_end;
        i++;
    }
stop:
    *pos_io = pos;
    return i;
}

static PyObject *walk_simple_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos, end, index, count;
    int require_key;
    if (!PyArg_ParseTuple(args, "y*nnnnp:walk_simple_records", &view, &pos, &end, &index, &count, &require_key))
        return NULL;
    Py_ssize_t i = index;
    if (pos >= 0 && end >= 0) {
        i = walk((const uint8_t *)view.buf, view.len, &pos, end, index, count, require_key);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nn)", i, pos);
}

#define CODEC_OR_CONTROL (A_CODEC_MASK | A_CONTROL)

/* local.validation._plain_client_batch at native speed: the whole fast-path question in one call. The CRC is
 * local.crc's (a well-kept library, not a second implementation here). */
static PyObject *plain_client_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long max_message_bytes, segment_bytes;
    int compacted = 0;
    if (!PyArg_ParseTuple(args, "y*LL|p:plain_client_batch", &view, &max_message_bytes, &segment_bytes,
                          &compacted))
        return NULL;
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t size = view.len;
    PyObject *result = Py_None;
    if (size < H_OVERHEAD || buf[H_MAGIC] != 2)
        goto done;
    int32_t length = be32(buf + H_LENGTH), last_offset_delta = be32(buf + H_LAST_DELTA);
    int32_t records_count = be32(buf + H_COUNT);
    uint32_t crc = (uint32_t)be32(buf + H_CRC);
    int attributes = attributes_of(buf);
    if ((long long)length + H_LOG_OVERHEAD != size || be64(buf + H_BASE_OFFSET) != 0 || be64(buf + H_PRODUCER_ID) >= 0 ||
        size > max_message_bytes || size > segment_bytes)
        goto done;
    uint32_t actual_crc;
    if (crc_of(buf + H_ATTRIBUTES, size - H_ATTRIBUTES, &actual_crc) < 0) {
        result = NULL;
        goto done;
    }
    if (actual_crc != crc || (attributes & CODEC_OR_CONTROL) || (long long)records_count != (long long)last_offset_delta + 1 ||
        records_count <= 0)
        goto done;
    Py_ssize_t pos = H_OVERHEAD;
    if (walk(buf, size, &pos, size, 0, records_count, compacted) != records_count || pos != size)
        goto done;
    result = Py_BuildValue("(iiLL)", length, last_offset_delta, (long long)be64(buf + H_BASE_TS),
                           (long long)be64(buf + H_MAX_TS));
    PyBuffer_Release(&view);
    return result;
done:
    PyBuffer_Release(&view);
    if (result == Py_None)
        Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"walk_simple_records", walk_simple_records, METH_VARARGS,
     "walk_simple_records(buf, pos, end, index, count, require_key) -> (next index, its position)\n\n"
     "local.validation._walk_simple_records at native speed (see that function)."},
    {"plain_client_batch", plain_client_batch, METH_VARARGS,
     "plain_client_batch(buf, max_message_bytes, segment_bytes, compacted=False) -> header fields or None\n\n"
     "local.validation._plain_client_batch at native speed (see that function)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastwalk", "Kafka's per-record append checks at native speed.", -1, methods,
};

PyMODINIT_FUNC PyInit__fastwalk(void)
{
    if (crc_import() < 0)
        return NULL;
    return PyModule_Create(&module);
}
