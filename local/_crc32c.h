/*
 * The project's CRC-32C (local/crc.py: fastcrc's), for the C extensions (local/records/_fastwalk.c,
 * local/cleaner/_cleancore.c, tiered/spark/_arrowdecode.c): a well-kept library, not a second implementation. Its
 * function is Python's to call, so the GIL is held; the library gives it up itself over a large buffer. Each
 * extension calls crc_import() when it is imported.
 */
#ifndef TIERED_CRC32C_H
#define TIERED_CRC32C_H

#include <Python.h>
#include <stdint.h>

static PyObject *crc_fn; /* local.crc.crc32c */

/* Import local.crc.crc32c: 0, or -1 with an exception set. */
static int crc_import(void)
{
    PyObject *module = PyImport_ImportModule("local.crc");
    if (module == NULL)
        return -1;
    crc_fn = PyObject_GetAttrString(module, "crc32c");
    Py_DECREF(module);
    return crc_fn == NULL ? -1 : 0;
}

/* *crc = the CRC-32C of p[0, n): 0, or -1 with an exception set. */
static int crc_of(const uint8_t *p, Py_ssize_t n, uint32_t *crc)
{
    PyObject *view = PyMemoryView_FromMemory((char *)p, n, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *value = PyObject_CallOneArg(crc_fn, view);
    Py_DECREF(view);
    if (value == NULL)
        return -1;
    unsigned long c = PyLong_AsUnsignedLong(value);
    Py_DECREF(value);
    if (c == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    *crc = (uint32_t)c;
    return 0;
}

#endif
