/*
 * The record walk of a v2 batch: every record of its (decompressed) records section decoded as
 * Kafka's DefaultRecord.readFrom and DefaultRecordBatch's iterator decode it, and checked as
 * LogValidator checks it. `diskless.records._walk` explains the rules and drives this function.
 *
 * In C because it runs once per record of every produced batch: a Python loop costs about a
 * microsecond per record, as much as decompressing the record with a fast codec. The rules are
 * written once more, in Python, in the tests (tests/records/_reference_walk.py), which check
 * that both agree on random and hostile records.
 *
 * walk(buffer, start, end, count, base_timestamp, max_timestamp, create_time, now_ms,
 *      before_max_ms, after_max_ms) -> None | max_timestamp | (error_code, message)
 *
 * None when every record passes and, for CreateTime, `max_timestamp` is already what Kafka's
 * LogValidator leaves there: the largest record timestamp, or -1 (NO_TIMESTAMP) when no record's
 * is larger. When it is not, the value it must become (an int): the walk visits every record, so
 * the largest timestamp costs one compare per record. error_code is Kafka's: INVALID_RECORD (87)
 * for any structural fault, INVALID_TIMESTAMP (32) for a CreateTime record outside
 * [now - before_max_ms, now + after_max_ms]. A structural fault anywhere wins over a timestamp
 * out of bounds, as in Kafka, where the record iterator throws while timestamp errors are
 * collected until the end. Timestamps are compared exactly (128-bit), not wrapped, so a largest
 * timestamp past the int64 range (allowed by the bounds) cannot be written and is INVALID_RECORD.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

enum { CODE_INVALID_TIMESTAMP = 32, CODE_INVALID_RECORD = 87 };
enum { READ_OK = 0, READ_PAST_END = 1, READ_TOO_LONG = 2, READ_OUT_OF_RANGE = 3 };

typedef __int128 wide;

typedef struct {
    const uint8_t *next;
    int64_t value;
    int status;
} Varint;

/* Kafka's zigzag varint (int32): at most 5 bytes (ByteUtils.readVarint throws past that). Java
 * drops the bits of the fifth byte that do not fit 32 bits; such a varint is refused here, as it
 * has no single meaning.
 *
 * The forms past two bytes, out of line. They return by value, so that no caller's cursor has
 * its address taken: the walk's cursors then live in registers, not on the stack. */
static __attribute__((noinline)) Varint read_varint_long(const uint8_t *p, const uint8_t *end) {
    uint32_t raw = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (p >= end)
            return (Varint){p, 0, READ_PAST_END};
        uint32_t byte = *p++;
        if (!(byte & 0x80)) {
            if (shift == 28 && byte > 0x0F)
                return (Varint){p, 0, READ_OUT_OF_RANGE};
            raw |= byte << shift;
            return (Varint){p, (int32_t)((raw >> 1) ^ (0u - (raw & 1u))), READ_OK};
        }
        raw |= (byte & 0x7Fu) << shift;
    }
    return (Varint){p, 0, READ_TOO_LONG};
}

/* The one- and two-byte forms inline (nearly every field), the rest out of line. */
static inline int read_varint(const uint8_t **at, const uint8_t *end, int32_t *out) {
    const uint8_t *p = *at;
    if (LIKELY(p < end && !(*p & 0x80))) {
        uint32_t raw = *p;
        *at = p + 1;
        *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
        return READ_OK;
    }
    if (LIKELY(end - p >= 2 && !(p[1] & 0x80))) { /* two bytes: sizes of 64..8191 */
        uint32_t raw = (p[0] & 0x7Fu) | ((uint32_t)p[1] << 7);
        *at = p + 2;
        *out = (int32_t)((raw >> 1) ^ (0u - (raw & 1u)));
        return READ_OK;
    }
    Varint slow = read_varint_long(p, end);
    if (slow.status == READ_OK) {
        *at = slow.next;
        *out = (int32_t)slow.value;
    }
    return slow.status;
}

/* Kafka's zigzag varlong (int64): at most 10 bytes, and no bits past 64. */
static __attribute__((noinline)) Varint read_varlong_long(const uint8_t *p, const uint8_t *end) {
    uint64_t raw = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return (Varint){p, 0, READ_PAST_END};
        uint64_t byte = *p++;
        if (!(byte & 0x80)) {
            if (shift == 63 && byte > 0x01)
                return (Varint){p, 0, READ_OUT_OF_RANGE};
            raw |= byte << shift;
            return (Varint){p, (int64_t)((raw >> 1) ^ (0u - (raw & 1u))), READ_OK};
        }
        raw |= (byte & 0x7Fu) << shift;
    }
    return (Varint){p, 0, READ_TOO_LONG};
}

static inline int read_varlong(const uint8_t **at, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *at;
    if (LIKELY(p < end && !(*p & 0x80))) {
        uint64_t raw = *p;
        *at = p + 1;
        *out = (int64_t)((raw >> 1) ^ (0u - (raw & 1u)));
        return READ_OK;
    }
    if (LIKELY(end - p >= 2 && !(p[1] & 0x80))) {
        uint64_t raw = (p[0] & 0x7Fu) | ((uint64_t)p[1] << 7);
        *at = p + 2;
        *out = (int64_t)((raw >> 1) ^ (0u - (raw & 1u)));
        return READ_OK;
    }
    Varint slow = read_varlong_long(p, end);
    if (slow.status == READ_OK) {
        *at = slow.next;
        *out = slow.value;
    }
    return slow.status;
}

static PyObject *failure(int code, PyObject *message) {
    if (message == NULL)
        return NULL;
    return Py_BuildValue("(iN)", code, message);
}

static PyObject *varint_failure(long index, int status) {
    if (status == READ_PAST_END)
        return failure(CODE_INVALID_RECORD,
                       PyUnicode_FromFormat("record %ld runs past the batch end", index));
    return failure(CODE_INVALID_RECORD,
                   PyUnicode_FromFormat("record %ld: %s", index,
                                        status == READ_TOO_LONG ? "varint too long"
                                                                : "varint out of range"));
}

/* `base + delta` as a Python int, for messages: the sum may lie outside int64. */
static PyObject *sum_of(PyObject *base, int64_t delta) {
    PyObject *step = PyLong_FromLongLong(delta);
    if (step == NULL)
        return NULL;
    PyObject *sum = PyNumber_Add(base, step);
    Py_DECREF(step);
    return sum;
}

static PyObject *timestamp_failure(long index, PyObject *base, int64_t delta, PyObject *now,
                                   PyObject *before, PyObject *after) {
    PyObject *timestamp = sum_of(base, delta);
    PyObject *earliest = PyNumber_Subtract(now, before);
    PyObject *latest = PyNumber_Add(now, after);
    PyObject *result = NULL;
    if (timestamp && earliest && latest)
        result = failure(CODE_INVALID_TIMESTAMP,
                         PyUnicode_FromFormat("record %ld timestamp %S is outside [%S, %S]", index,
                                              timestamp, earliest, latest));
    Py_XDECREF(timestamp);
    Py_XDECREF(earliest);
    Py_XDECREF(latest);
    return result;
}

enum {
    HEADERS_OK = 0,
    HEADERS_PAST_END = READ_PAST_END,
    HEADERS_TOO_LONG = READ_TOO_LONG,
    HEADERS_OUT_OF_RANGE = READ_OUT_OF_RANGE,
    HEADERS_NULL_KEY,
    HEADERS_NEGATIVE_KEY,
    HEADERS_BAD_VALUE_SIZE,
};

/* Past `count` record headers ending at `end`; a null (negative) key is invalid, a null value is
 * not, a value size below -1 is (librdkafka stops consuming the partition there). On a fault,
 * `*size` is the offending size. */
static inline int skip_headers(const uint8_t **at, const uint8_t *end, int32_t count,
                               int32_t *size) {
    const uint8_t *p = *at;
    for (int32_t h = 0; h < count; h++) {
        int status = read_varint(&p, end, size);
        if (UNLIKELY(status))
            return status;
        if (UNLIKELY(*size < 0))
            return *size == -1 ? HEADERS_NULL_KEY : HEADERS_NEGATIVE_KEY;
        if (UNLIKELY(*size > end - p))
            return HEADERS_PAST_END;
        p += *size;
        if (UNLIKELY((status = read_varint(&p, end, size))))
            return status;
        if (*size > 0) {
            if (UNLIKELY(*size > end - p))
                return HEADERS_PAST_END;
            p += *size;
        } else if (UNLIKELY(*size < -1)) {
            return HEADERS_BAD_VALUE_SIZE;
        }
    }
    *at = p;
    return HEADERS_OK;
}

/* METH_FASTCALL with plain conversions: parsing an argument tuple would cost as much as walking
 * a few dozen records. */
static PyObject *walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 10) {
        PyErr_Format(PyExc_TypeError, "walk() takes 10 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t stop = PyLong_AsSsize_t(args[2]);
    long count = PyLong_AsLong(args[3]);
    int64_t base_timestamp = PyLong_AsLongLong(args[4]);
    int64_t max_timestamp = PyLong_AsLongLong(args[5]);
    int create_time = PyObject_IsTrue(args[6]);
    int64_t now_ms = PyLong_AsLongLong(args[7]);
    int64_t before_max_ms = PyLong_AsLongLong(args[8]);
    int64_t after_max_ms = PyLong_AsLongLong(args[9]);
    PyObject *result = NULL;
    if (PyErr_Occurred())
        goto done;
    if (start < 0 || stop < start || stop > view.len) {
        PyErr_SetString(PyExc_ValueError, "records section outside the buffer");
        goto done;
    }
    const uint8_t *p = (const uint8_t *)view.buf + start;
    const uint8_t *end = (const uint8_t *)view.buf + stop;
    /* Record timestamps are base + delta; the bounds are moved onto the deltas once. */
    const wide low = (wide)now_ms - before_max_ms - base_timestamp;
    const wide high = (wide)now_ms + after_max_ms - base_timestamp;
    const wide absent = (wide)-1 - base_timestamp; /* no timestamp: exempt from the bounds */
    /* The deltas certainly inside the bounds, as int64: most records need no 128-bit compare.
     * Empty (1 > 0) when the bounds hold no int64, so that every record takes the exact path;
     * everything when the topic sets no bounds (LogAppendTime). */
    int64_t low_fast = INT64_MIN, high_fast = INT64_MAX;
    if (create_time) {
        if (low > INT64_MAX || high < INT64_MIN || low > high) {
            low_fast = 1;
            high_fast = 0;
        } else {
            low_fast = low < INT64_MIN ? INT64_MIN : (int64_t)low;
            high_fast = high > INT64_MAX ? INT64_MAX : (int64_t)high;
        }
    }
    int64_t max_delta = INT64_MIN;
    long bad_index = -1;
    int64_t bad_delta = 0;
    long index = 0;
    for (; index < count; index++) {
        /* The record size is the chain from one record to the next, so its usual forms (two
         * bytes, then one, non-negative) are decoded in as few dependent steps as possible. */
        int32_t size;
        int status = READ_OK;
        if (LIKELY(end - p >= 2 && (p[0] & 0x81) == 0x80 && !(p[1] & 0x80))) {
            size = (int32_t)(((p[0] & 0x7Eu) >> 1) | ((uint32_t)p[1] << 6));
            p += 2;
        } else if (LIKELY(p < end && !(p[0] & 0x81))) {
            size = p[0] >> 1;
            p += 1;
        } else {
            status = read_varint(&p, end, &size);
        }
        if (UNLIKELY(status)) {
            result = varint_failure(index, status);
            goto done;
        }
        if (UNLIKELY(size < 0)) {
            result = failure(CODE_INVALID_RECORD,
                             PyUnicode_FromFormat("record %ld: record size %d", index, (int)size));
            goto done;
        }
        if (UNLIKELY(size > end - p)) {
            result = varint_failure(index, READ_PAST_END);
            goto done;
        }
        const uint8_t *body_end = p + size;
        /* The next record starts at body_end whatever the fields say, so that its decoding
         * need not wait for this one's (the walk is bound by the latency of varint chains). */
        const uint8_t *q = p;
        p = body_end;
        if (UNLIKELY(q >= body_end))
            goto wrong_size;
        q++; /* record attributes: unused in magic 2, ignored as Kafka ignores them */
        int64_t delta;
        int32_t offset_delta, length;
        if (UNLIKELY((status = read_varlong(&q, body_end, &delta)) ||
                     (status = read_varint(&q, body_end, &offset_delta))))
            goto bad_varint;
        if (UNLIKELY(offset_delta != index)) {
            result = failure(
                CODE_INVALID_RECORD,
                PyUnicode_FromFormat("record %ld has offset delta %d; deltas must run 0..n-1",
                                     index, (int)offset_delta));
            goto done;
        }
        if (UNLIKELY((delta < low_fast || delta > high_fast) && create_time &&
                     ((wide)delta < low || (wide)delta > high) && (wide)delta != absent &&
                     bad_index < 0)) {
            bad_index = index;
            bad_delta = delta;
        }
        if (delta > max_delta)
            max_delta = delta;
        /* key, then value: -1 (null) or a size and that many bytes */
        for (int field = 0; field < 2; field++) {
            if (UNLIKELY((status = read_varint(&q, body_end, &length))))
                goto bad_varint;
            if (length > 0) {
                if (UNLIKELY(length > body_end - q))
                    goto wrong_size;
                q += length;
            } else if (UNLIKELY(length < -1)) {
                result = failure(CODE_INVALID_RECORD,
                                 PyUnicode_FromFormat("record %ld: %s size %d", index,
                                                      field ? "value" : "key", (int)length));
                goto done;
            }
        }
        if (UNLIKELY((status = read_varint(&q, body_end, &length))))
            goto bad_varint;
        if (length) {
            if (UNLIKELY(length < 0)) {
                result = failure(CODE_INVALID_RECORD,
                                 PyUnicode_FromFormat("record %ld: header count %d", index,
                                                      (int)length));
                goto done;
            }
            int32_t detail = 0;
            status = skip_headers(&q, body_end, length, &detail);
            if (UNLIKELY(status)) {
                if (status <= READ_OUT_OF_RANGE)
                    goto bad_varint;
                result = failure(
                    CODE_INVALID_RECORD,
                    status == HEADERS_NULL_KEY
                        ? PyUnicode_FromFormat("record %ld: null header key", index)
                    : status == HEADERS_NEGATIVE_KEY
                        ? PyUnicode_FromFormat("record %ld: negative header key size %d", index,
                                               (int)detail)
                        : PyUnicode_FromFormat("record %ld: header value size %d", index,
                                               (int)detail));
                goto done;
            }
        }
        if (UNLIKELY(q != body_end))
            goto wrong_size;
        continue;
    bad_varint:
        if (status != READ_PAST_END) {
            result = varint_failure(index, status);
            goto done;
        }
    wrong_size: /* a field overruns the record, or the fields do not fill it */
        result = failure(
            CODE_INVALID_RECORD,
            PyUnicode_FromFormat("record %ld: record body declares %d bytes but holds a different "
                                 "size",
                                 index, (int)size));
        goto done;
    }
    if (p != end || count <= 0) {
        result = failure(CODE_INVALID_RECORD,
                         PyUnicode_FromFormat("%zd bytes follow the declared %ld records",
                                              (Py_ssize_t)(end - p), count));
        goto done;
    }
    if (bad_index >= 0) {
        result = timestamp_failure(bad_index, args[4], bad_delta, args[7], args[8], args[9]);
        goto done;
    }
    if (create_time) {
        wide largest = (wide)base_timestamp + max_delta;
        if (largest < -1)
            largest = -1; /* LogValidator starts its maximum at NO_TIMESTAMP */
        if (UNLIKELY(largest != (wide)max_timestamp)) {
            if (largest > INT64_MAX) {
                PyObject *exact = sum_of(args[4], max_delta);
                if (exact != NULL) {
                    result = failure(CODE_INVALID_RECORD,
                                     PyUnicode_FromFormat("largest record timestamp %S is past "
                                                          "the int64 range",
                                                          exact));
                    Py_DECREF(exact);
                }
                goto done;
            }
            result = PyLong_FromLongLong((int64_t)largest);
            goto done;
        }
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", (PyCFunction)(void (*)(void))walk, METH_FASTCALL,
     "Check every record of a v2 records section; None, or (Kafka error code, message)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "diskless.records._cwalk",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__cwalk(void) {
    return PyModule_Create(&module);
}
