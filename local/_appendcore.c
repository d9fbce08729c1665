/*
 * local._appendcore: the active segment's append at native speed.
 *
 * An append of a plain client batch does little work (the checks of local.records._fastwalk, one write, sometimes
 * an offset index entry) spread over many small steps: the segment's roll bounds, its running max timestamp and
 * index interval, the index's slot, key mirror and mapping. In CPython each step is a method call or a property,
 * and together they cost more than writing 16 KiB. Here the classes that own that state keep it in C fields:
 *
 *   IndexCore    base of local.index.base.AbstractIndex: the key mirror, the mapping, the lock, lengths.
 *   LazyCore     base of local.index.lazy.LazyIndex: the index once loaded.
 *   SegmentCore  base of local.segment.LogSegment: the log file, the lazy indexes, the roll and index bookkeeping,
 *                and in C append_batch_if_room (the log's append fast path) and _index_batch (the bookkeeping
 *                after any append).
 *
 * The Python code reads and writes the same fields as attributes (PyMemberDef, same names) and stays the
 * definition: LogSegment._py_append_batch_if_room, LogSegment._py_index_batch and OffsetIndex.append. Every field
 * is an object slot (T_OBJECT_EX, what __slots__ makes), ints included: CPython specializes attribute access to
 * those only, and the Python code reads these fields on every lookup and fetch (an int member made an index lookup
 * 13% slower). The C path takes only the common case and hands everything else to them (an index not loaded or not ours, a slot that needs allocating, the warm search
 * section moving, anything full or out of order, every error message). The file write itself is the log file's
 * own append (FileRecords.append, called as a method), so its short-write loop and error naming stay in one place.
 * tests/property/test_appendcore.py holds both paths to the same files and the same state.
 *
 * Optional like _fastwalk: without a C compiler the build skips it, the three bases are plain classes and the
 * Python definitions run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#define INT32_MAX_LL 2147483647LL

static PyObject *str_acquire, *str_release, *str_append, *str_get, *str_size_in_bytes,
    *str_py_append_batch_if_room, *str_max_timestamp_and_offset, *str_path;

/* An int field: 0, or -1 with an exception (AttributeError when it was never set, as for a Python attribute). */
static int field_ll(PyObject *value, const char *name, long long *out)
{
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%s' is not set", name);
        return -1;
    }
    *out = PyLong_AsLongLong(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Set an int field to a new int object: 0, or -1 with an exception. */
static int set_ll(PyObject **field, long long value)
{
    PyObject *number = PyLong_FromLongLong(value);
    if (number == NULL)
        return -1;
    Py_XSETREF(*field, number);
    return 0;
}

#define MEMBER(name, type, field) {name, T_OBJECT_EX, offsetof(type, field), 0, NULL}

/* ---------------------------------------------------------------------------------------------------------- */
/* IndexCore */

typedef struct {
    PyObject_HEAD
    PyObject *keys;           /* _keys: the key mirror, array('q') */
    PyObject *mmap;           /* _mmap: the writable mapping (None when closed or empty) */
    PyObject *lock;           /* _lock: the index's RLock */
    PyObject *closed;         /* _closed */
    PyObject *writable;       /* _writable */
    PyObject *length;         /* _length: the file length */
    PyObject *allocated;      /* _allocated: bytes backed by disk blocks */
    PyObject *entry_size;     /* _entry_size */
    PyObject *warm_entries;   /* _warm_entries */
    PyObject *reserved_slots; /* _reserved_slots: slots kept free at the end (the time index keeps one) */
    PyObject *base_offset;    /* _base_offset */
} IndexCore;

static PyMemberDef index_members[] = {
    MEMBER("_keys", IndexCore, keys),
    MEMBER("_mmap", IndexCore, mmap),
    MEMBER("_lock", IndexCore, lock),
    MEMBER("_closed", IndexCore, closed),
    MEMBER("_writable", IndexCore, writable),
    MEMBER("_length", IndexCore, length),
    MEMBER("_allocated", IndexCore, allocated),
    MEMBER("_entry_size", IndexCore, entry_size),
    MEMBER("_warm_entries", IndexCore, warm_entries),
    MEMBER("_reserved_slots", IndexCore, reserved_slots),
    MEMBER("_base_offset", IndexCore, base_offset),
    {NULL},
};

static int index_traverse(IndexCore *self, visitproc visit, void *arg)
{
    Py_VISIT(self->keys);
    Py_VISIT(self->mmap);
    Py_VISIT(self->lock);
    return 0;
}

static int index_clear(IndexCore *self)
{
    Py_CLEAR(self->keys);
    Py_CLEAR(self->mmap);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->closed);
    Py_CLEAR(self->writable);
    Py_CLEAR(self->length);
    Py_CLEAR(self->allocated);
    Py_CLEAR(self->entry_size);
    Py_CLEAR(self->warm_entries);
    Py_CLEAR(self->reserved_slots);
    Py_CLEAR(self->base_offset);
    return 0;
}

static void index_dealloc(IndexCore *self)
{
    PyObject_GC_UnTrack(self);
    index_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject IndexCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "local._appendcore.IndexCore",
    .tp_doc = "The fields of an index that its append uses (see local.index.base.AbstractIndex).",
    .tp_basicsize = sizeof(IndexCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)index_traverse,
    .tp_clear = (inquiry)index_clear,
    .tp_dealloc = (destructor)index_dealloc,
    .tp_members = index_members,
};

/* The number of entries (the key mirror's length), or -1 with an exception. */
static Py_ssize_t index_entries(IndexCore *ix)
{
    if (ix->keys == NULL) {
        PyErr_SetString(PyExc_AttributeError, "'_keys' is not set");
        return -1;
    }
    return PyObject_Length(ix->keys);
}

/* How many entries an append may fill: the slots of the file's length but the reserved ones. -1 with an
 * exception. */
static long long index_capacity(IndexCore *ix)
{
    long long length, entry_size, reserved;
    if (field_ll(ix->length, "_length", &length) < 0 || field_ll(ix->entry_size, "_entry_size", &entry_size) < 0 ||
        field_ll(ix->reserved_slots, "_reserved_slots", &reserved) < 0)
        return -1;
    return entry_size > 0 ? length / entry_size - reserved : 0;
}

/* AbstractIndex.is_full: 1, 0, or -1 with an exception. */
static int index_is_full(IndexCore *ix)
{
    Py_ssize_t n = index_entries(ix);
    if (n < 0)
        return -1;
    long long capacity = index_capacity(ix);
    if (capacity < 0 && PyErr_Occurred())
        return -1;
    return n >= capacity;
}

/* The last key (offset, timestamp), or `none` when there is no entry; -1 with an exception. */
static int index_last_key(IndexCore *ix, long long none, long long *out)
{
    Py_ssize_t n = index_entries(ix);
    if (n < 0)
        return -1;
    if (n == 0) {
        *out = none;
        return 0;
    }
    PyObject *last = PySequence_GetItem(ix->keys, n - 1);
    if (last == NULL)
        return -1;
    *out = PyLong_AsLongLong(last);
    Py_DECREF(last);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* OffsetIndex.append's common case, under the index's lock: a slot already allocated, the warm section staying,
 * the offset above the last and within the index's range, the position within the format's. 1 when written, 0
 * when the case is not the common one (nothing done: the caller runs OffsetIndex.append), -1 with an exception. */
static int offset_index_append_common(IndexCore *ix, long long offset, long long position)
{
    if (ix->lock == NULL || ix->mmap == NULL || ix->mmap == Py_None || ix->closed != Py_False ||
        ix->writable != Py_True)
        return 0;
    PyObject *held = PyObject_CallMethodNoArgs(ix->lock, str_acquire);
    if (held == NULL)
        return -1;
    Py_DECREF(held);
    int result = -1;
    long long es, allocated, warm, base, last, capacity = index_capacity(ix);
    Py_ssize_t n = index_entries(ix);
    if ((capacity < 0 && PyErr_Occurred()) || n < 0 || field_ll(ix->entry_size, "_entry_size", &es) < 0 ||
        field_ll(ix->allocated, "_allocated", &allocated) < 0 || field_ll(ix->warm_entries, "_warm_entries", &warm) < 0 ||
        field_ll(ix->base_offset, "_base_offset", &base) < 0 || index_last_key(ix, 0, &last) < 0)
        goto release;
    result = 0;
    long long at = n * es, relative = offset - base;
    if ((es != 8 && es != 12) || n == 0 || (n > warm && !(n & 63)) || n >= capacity || at + es > allocated ||
        offset <= last || relative < 0 || relative > INT32_MAX_LL || position < 0 ||
        (es == 8 && position > INT32_MAX_LL))
        goto release;
    Py_buffer view;
    if (PyObject_GetBuffer(ix->mmap, &view, PyBUF_WRITABLE) < 0) {
        /* A copy of the bytes (an index detached while not written: local/index/base.py's _DETACH_IDLE), not a
         * mapping: the Python path maps the file again. */
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            result = 0;
        } else {
            result = -1;
        }
        goto release;
    }
    if (at + es > view.len) { /* the mapping is shorter than the length says: let the Python path say why */
        PyBuffer_Release(&view);
        goto release;
    }
    uint8_t *p = (uint8_t *)view.buf + at;
    put_be32(p, (uint32_t)relative);
    if (es == 8) {
        put_be32(p + 4, (uint32_t)position);
    } else {
        put_be32(p + 4, (uint32_t)((unsigned long long)position >> 32));
        put_be32(p + 8, (uint32_t)position);
    }
    PyBuffer_Release(&view);
    PyObject *key = PyLong_FromLongLong(offset);
    if (key == NULL) {
        result = -1;
        goto release;
    }
    /* after the bytes: a reader that sees the key finds its entry written */
    PyObject *done = PyObject_CallMethodOneArg(ix->keys, str_append, key);
    Py_DECREF(key);
    if (done == NULL) {
        result = -1;
        goto release;
    }
    Py_DECREF(done);
    result = 1;
release:;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *released = PyObject_CallMethodNoArgs(ix->lock, str_release);
    if (released == NULL) {
        Py_XDECREF(exc_type);
        Py_XDECREF(exc_value);
        Py_XDECREF(exc_tb);
        return -1;
    }
    Py_DECREF(released);
    PyErr_Restore(exc_type, exc_value, exc_tb);
    return result;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* LazyCore */

typedef struct {
    PyObject_HEAD
    PyObject *index; /* _index: None until loaded */
} LazyCore;

static PyMemberDef lazy_members[] = {
    MEMBER("_index", LazyCore, index),
    {NULL},
};

static int lazy_traverse(LazyCore *self, visitproc visit, void *arg)
{
    Py_VISIT(self->index);
    return 0;
}

static int lazy_clear(LazyCore *self)
{
    Py_CLEAR(self->index);
    return 0;
}

static void lazy_dealloc(LazyCore *self)
{
    PyObject_GC_UnTrack(self);
    lazy_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject LazyCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "local._appendcore.LazyCore",
    .tp_doc = "The loaded index of a local.index.lazy.LazyIndex.",
    .tp_basicsize = sizeof(LazyCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)lazy_traverse,
    .tp_clear = (inquiry)lazy_clear,
    .tp_dealloc = (destructor)lazy_dealloc,
    .tp_members = lazy_members,
};

/* The index of a lazy index, loaded by its get() if it is not yet: a new reference, or NULL with an exception.
 * Sets *ours to whether it is an IndexCore. */
static PyObject *lazy_get(PyObject *lazy, int *ours)
{
    PyObject *index;
    if (PyObject_TypeCheck(lazy, &LazyCoreType) && ((LazyCore *)lazy)->index != NULL &&
        ((LazyCore *)lazy)->index != Py_None) {
        index = ((LazyCore *)lazy)->index;
        Py_INCREF(index);
    } else {
        index = PyObject_CallMethodNoArgs(lazy, str_get);
        if (index == NULL)
            return NULL;
    }
    *ours = PyObject_TypeCheck(index, &IndexCoreType);
    return index;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* SegmentCore */

typedef struct {
    PyObject_HEAD
    PyObject *log;                          /* log: the segment's FileRecords */
    PyObject *lazy_offset_index;            /* _lazy_offset_index */
    PyObject *lazy_time_index;              /* _lazy_time_index */
    PyObject *rolling_based_timestamp;      /* rolling_based_timestamp: the first batch's max timestamp, or None */
    PyObject *base_offset;                  /* base_offset */
    PyObject *index_interval_bytes;         /* index_interval_bytes */
    PyObject *roll_jitter_ms;               /* roll_jitter_ms */
    PyObject *created;                      /* created */
    PyObject *bytes_since_last_index_entry; /* bytes_since_last_index_entry */
    PyObject *max_timestamp;                /* _max_timestamp: the largest timestamp so far... */
    PyObject *offset_of_max_timestamp;      /* _offset_of_max_timestamp: ...and its offset */
    PyObject *max_known;                    /* _max_known: whether those two are loaded */
} SegmentCore;

static PyMemberDef segment_members[] = {
    MEMBER("log", SegmentCore, log),
    MEMBER("_lazy_offset_index", SegmentCore, lazy_offset_index),
    MEMBER("_lazy_time_index", SegmentCore, lazy_time_index),
    MEMBER("rolling_based_timestamp", SegmentCore, rolling_based_timestamp),
    MEMBER("base_offset", SegmentCore, base_offset),
    MEMBER("index_interval_bytes", SegmentCore, index_interval_bytes),
    MEMBER("roll_jitter_ms", SegmentCore, roll_jitter_ms),
    MEMBER("created", SegmentCore, created),
    MEMBER("bytes_since_last_index_entry", SegmentCore, bytes_since_last_index_entry),
    MEMBER("_max_timestamp", SegmentCore, max_timestamp),
    MEMBER("_offset_of_max_timestamp", SegmentCore, offset_of_max_timestamp),
    MEMBER("_max_known", SegmentCore, max_known),
    {NULL},
};

static int segment_traverse(SegmentCore *self, visitproc visit, void *arg)
{
    Py_VISIT(self->log);
    Py_VISIT(self->lazy_offset_index);
    Py_VISIT(self->lazy_time_index);
    return 0;
}

static int segment_clear(SegmentCore *self)
{
    Py_CLEAR(self->log);
    Py_CLEAR(self->lazy_offset_index);
    Py_CLEAR(self->lazy_time_index);
    Py_CLEAR(self->rolling_based_timestamp);
    Py_CLEAR(self->base_offset);
    Py_CLEAR(self->index_interval_bytes);
    Py_CLEAR(self->roll_jitter_ms);
    Py_CLEAR(self->created);
    Py_CLEAR(self->bytes_since_last_index_entry);
    Py_CLEAR(self->max_timestamp);
    Py_CLEAR(self->offset_of_max_timestamp);
    Py_CLEAR(self->max_known);
    return 0;
}

static void segment_dealloc(SegmentCore *self)
{
    PyObject_GC_UnTrack(self);
    segment_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An OSError of the log file's write names no file: local.segment._name_file gives it the file's path, as on the
 * Python path (one definition of the rule; this runs only on a failed write). */
static void name_file(PyObject *log)
{
    if (!PyErr_ExceptionMatches(PyExc_OSError))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *segment_module = PyImport_ImportModule("local.segment");
    PyObject *path = PyObject_GetAttr(log, str_path);
    PyObject *named = segment_module && path && value
        ? PyObject_CallMethod(segment_module, "_name_file", "OO", value, path) : NULL;
    if (named == NULL)
        PyErr_Clear(); /* the write's error matters more than its file name */
    Py_XDECREF(named);
    Py_XDECREF(path);
    Py_XDECREF(segment_module);
    PyErr_Restore(type, value, tb);
}

/* The largest timestamp of the time index (its last key; -1 when empty): 0, or -1 with an exception. An index
 * that is not an IndexCore (a test's double) is asked through its last_entry property. */
static int last_index_timestamp(PyObject *time_index, long long *out)
{
    if (PyObject_TypeCheck(time_index, &IndexCoreType))
        return index_last_key((IndexCore *)time_index, -1, out);
    PyObject *entry = PyObject_GetAttrString(time_index, "last_entry");
    PyObject *ts = entry ? PyObject_GetAttrString(entry, "timestamp") : NULL;
    Py_XDECREF(entry);
    if (ts == NULL)
        return -1;
    *out = PyLong_AsLongLong(ts);
    Py_DECREF(ts);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* LogSegment._index_batch (see its Python definition, _py_index_batch): the bookkeeping of one appended batch.
 * The indexes are loaded here, only when an entry is due, unless the caller has them at hand (NULL: not).
 * 0, or -1 with an exception. */
static int index_batch(SegmentCore *self, long long last_offset, long long max_timestamp, long long position,
                       long long size, PyObject *offset_index, PyObject *time_index)
{
    if (position == 0) {
        PyObject *ts = PyLong_FromLongLong(max_timestamp);
        if (ts == NULL)
            return -1;
        Py_XSETREF(self->rolling_based_timestamp, ts);
    }
    if (self->max_known != Py_True) { /* loaded from the time index by the Python definition */
        PyObject *loaded = PyObject_CallMethodNoArgs((PyObject *)self, str_max_timestamp_and_offset);
        if (loaded == NULL)
            return -1;
        Py_DECREF(loaded);
    }
    long long largest, since, interval;
    if (field_ll(self->max_timestamp, "_max_timestamp", &largest) < 0 ||
        field_ll(self->bytes_since_last_index_entry, "bytes_since_last_index_entry", &since) < 0 ||
        field_ll(self->index_interval_bytes, "index_interval_bytes", &interval) < 0)
        return -1;
    if (max_timestamp > largest) {
        PyObject *offset = PyLong_FromLongLong(last_offset);
        if (offset == NULL)
            return -1;
        Py_XSETREF(self->offset_of_max_timestamp, offset);
        if (set_ll(&self->max_timestamp, max_timestamp) < 0)
            return -1;
        largest = max_timestamp;
    }
    if (since <= interval)
        return set_ll(&self->bytes_since_last_index_entry, since + size);
    int ours, result = -1;
    PyObject *oi = offset_index ? Py_NewRef(offset_index) : lazy_get(self->lazy_offset_index, &ours);
    if (oi == NULL)
        return -1;
    int written = PyObject_TypeCheck(oi, &IndexCoreType) ? offset_index_append_common((IndexCore *)oi, last_offset,
                                                                                      position) : 0;
    if (written == 0) {
        PyObject *done = PyObject_CallMethod(oi, "append", "LL", last_offset, position);
        written = done == NULL ? -1 : 1;
        Py_XDECREF(done);
    }
    Py_DECREF(oi);
    if (written < 0)
        return -1;
    PyObject *ti = time_index ? Py_NewRef(time_index) : lazy_get(self->lazy_time_index, &ours);
    if (ti == NULL)
        return -1;
    long long last_timestamp;
    if (last_index_timestamp(ti, &last_timestamp) < 0)
        goto done;
    if (largest > last_timestamp) {
        PyObject *appended = PyObject_CallMethod(ti, "maybe_append", "LO", largest, self->offset_of_max_timestamp);
        if (appended == NULL)
            goto done;
        Py_DECREF(appended);
    }
    result = set_ll(&self->bytes_since_last_index_entry, size);
done:
    Py_DECREF(ti);
    return result;
}

/* LogSegment._index_batch(last_offset, max_timestamp, position, size, offset_index=None, time_index=None). */
static PyObject *segment_index_batch_method(SegmentCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 4 || nargs > 6) {
        PyErr_Format(PyExc_TypeError, "_index_batch() takes 4 to 6 arguments (%zd given)", nargs);
        return NULL;
    }
    long long last_offset = PyLong_AsLongLong(args[0]), max_timestamp = PyLong_AsLongLong(args[1]);
    long long position = PyLong_AsLongLong(args[2]), size = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *offset_index = nargs > 4 && args[4] != Py_None ? args[4] : NULL;
    PyObject *time_index = nargs > 5 && args[5] != Py_None ? args[5] : NULL;
    if (self->lazy_offset_index == NULL || self->lazy_time_index == NULL) {
        PyErr_SetString(PyExc_AttributeError, "segment has no indexes");
        return NULL;
    }
    if (index_batch(self, last_offset, max_timestamp, position, size, offset_index, time_index) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* LogSegment.append_batch_if_room (see its Python definition, _py_append_batch_if_room, for what it does). */
static PyObject *segment_append_batch_if_room(SegmentCore *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 6 || nargs > 7) {
        PyErr_Format(PyExc_TypeError, "append_batch_if_room() takes 6 or 7 arguments (%zd given)", nargs);
        return NULL;
    }
    long long last_offset = PyLong_AsLongLong(args[0]), max_timestamp = PyLong_AsLongLong(args[1]);
    long long now = PyLong_AsLongLong(args[3]), max_segment_bytes = PyLong_AsLongLong(args[4]);
    long long max_segment_ms = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *batch = args[2];
    PyObject *header = nargs == 7 ? args[6] : NULL;
    Py_ssize_t size = PyObject_Length(batch);
    if (size < 0)
        return NULL;
    if (self->log == NULL || self->lazy_offset_index == NULL || self->lazy_time_index == NULL)
        goto python; /* a segment without its parts (a test's double): the Python definition says what fails */

    long long base_offset, position;
    if (field_ll(self->base_offset, "base_offset", &base_offset) < 0)
        return NULL;
    PyObject *size_obj = PyObject_GetAttr(self->log, str_size_in_bytes);
    if (size_obj == NULL)
        return NULL;
    position = PyLong_AsLongLong(size_obj);
    Py_DECREF(size_obj);
    if (position == -1 && PyErr_Occurred())
        return NULL;
    long long relative = last_offset - base_offset;
    if (position > max_segment_bytes - size || relative < 0 || relative > INT32_MAX_LL)
        Py_RETURN_FALSE;
    if (position) {
        if (self->rolling_based_timestamp == NULL || self->rolling_based_timestamp == Py_None)
            Py_RETURN_FALSE; /* the first batch's timestamp is not loaded: the caller asks should_roll_for */
        long long first_timestamp, created, jitter;
        if (field_ll(self->rolling_based_timestamp, "rolling_based_timestamp", &first_timestamp) < 0 ||
            field_ll(self->created, "created", &created) < 0 ||
            field_ll(self->roll_jitter_ms, "roll_jitter_ms", &jitter) < 0)
            return NULL;
        long long waited = first_timestamp >= 0 ? max_timestamp - first_timestamp : now - created;
        if (waited > max_segment_ms - jitter)
            Py_RETURN_FALSE;
    }
    int offset_ours, time_ours;
    PyObject *offset_index = lazy_get(self->lazy_offset_index, &offset_ours);
    if (offset_index == NULL)
        return NULL;
    PyObject *time_index = lazy_get(self->lazy_time_index, &time_ours);
    if (time_index == NULL) {
        Py_DECREF(offset_index);
        return NULL;
    }
    if (!offset_ours || !time_ours) {
        Py_DECREF(offset_index);
        Py_DECREF(time_index);
        goto python;
    }
    PyObject *result = NULL;
    int full = index_is_full((IndexCore *)offset_index);
    if (full == 0)
        full = index_is_full((IndexCore *)time_index);
    if (full < 0)
        goto done;
    if (full) {
        result = Py_NewRef(Py_False);
        goto done;
    }
    PyObject *call[3] = {self->log, batch, header};
    PyObject *written = PyObject_VectorcallMethod(str_append, call, header ? 3 : 2, NULL);
    if (written == NULL) {
        name_file(self->log);
        goto done;
    }
    Py_DECREF(written);
    if (index_batch(self, last_offset, max_timestamp, position, size, offset_index, time_index) == 0)
        result = Py_NewRef(Py_True);
done:
    Py_DECREF(offset_index);
    Py_DECREF(time_index);
    return result;
python:
    return PyObject_VectorcallMethod(str_py_append_batch_if_room, (PyObject *[]){(PyObject *)self, args[0], args[1],
                                     args[2], args[3], args[4], args[5], header}, nargs + 1, NULL);
}

static PyMethodDef segment_methods[] = {
    {"_index_batch", (PyCFunction)(void (*)(void))segment_index_batch_method, METH_FASTCALL,
     "_index_batch(last_offset, max_timestamp, position, size, offset_index=None, time_index=None)\n\n"
     "LogSegment._py_index_batch at native speed (see that method)."},
    {"append_batch_if_room", (PyCFunction)(void (*)(void))segment_append_batch_if_room, METH_FASTCALL,
     "append_batch_if_room(last_offset, max_timestamp, batch, now, max_segment_bytes, max_segment_ms, header=b'')"
     " -> bool\n\nLogSegment._py_append_batch_if_room at native speed (see that method)."},
    {NULL},
};

static PyTypeObject SegmentCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "local._appendcore.SegmentCore",
    .tp_doc = "The fields of a segment that its append uses, and the append (see local.segment.LogSegment).",
    .tp_basicsize = sizeof(SegmentCore),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)segment_traverse,
    .tp_clear = (inquiry)segment_clear,
    .tp_dealloc = (destructor)segment_dealloc,
    .tp_members = segment_members,
    .tp_methods = segment_methods,
};

/* ---------------------------------------------------------------------------------------------------------- */

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_appendcore", "The active segment's append at native speed.", -1, NULL,
};

static int intern(PyObject **slot, const char *text)
{
    *slot = PyUnicode_InternFromString(text);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__appendcore(void)
{
    if (intern(&str_acquire, "acquire") < 0 || intern(&str_release, "release") < 0 ||
        intern(&str_append, "append") < 0 || intern(&str_get, "get") < 0 ||
        intern(&str_size_in_bytes, "size_in_bytes") < 0 ||
        intern(&str_py_append_batch_if_room, "_py_append_batch_if_room") < 0 ||
        intern(&str_max_timestamp_and_offset, "_max_timestamp_and_offset") < 0 ||
        intern(&str_path, "path") < 0)
        return NULL;
    if (PyType_Ready(&IndexCoreType) < 0 || PyType_Ready(&LazyCoreType) < 0 || PyType_Ready(&SegmentCoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "IndexCore", (PyObject *)&IndexCoreType) < 0 ||
        PyModule_AddObjectRef(m, "LazyCore", (PyObject *)&LazyCoreType) < 0 ||
        PyModule_AddObjectRef(m, "SegmentCore", (PyObject *)&SegmentCoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
