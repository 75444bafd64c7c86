/*
 * The cleaner's per-record work in C: mapping a batch's keys into the offset map, and filtering
 * a batch's records against it. `diskless.compaction._native` drives these functions; the rules
 * are written once more in Python (`_cleaner`, `_records`, `_offset_map`), the fallback when
 * this module is not built, and the tests check that both agree.
 *
 * In C because they run once per record of every batch cleaned, twice per pass: a Python loop
 * costs microseconds per record (the varints, the MD5, the probe), ten times the codec's cost.
 *
 * A records section (decompressed) is walked as `_records.records_of` walks it: `count` records
 * filling it exactly, each a length varint, an attributes byte, a timestamp delta (varlong), an
 * offset delta, a key length and key, a value length, within the record's length. A fault
 * raises ValueError (the caller's UncleanableBatch).
 *
 * The map is `_offset_map.OffsetMap`'s buffer: slots of a 16-byte MD5 of the key and the
 * offset plus one (8 bytes, big-endian), found by double hashing over `slots` slots.
 *
 * map_keys(section, count, base_offset, start, end, table, slots, entries, entries_max)
 *     -> (entries, records mapped, the offset of the first key that did not fit or -1)
 * filter_records(section, count, base_offset, latest, table, slots, tombstones_stay)
 *     -> (spans, everything kept, a tombstone kept, the largest timestamp delta kept)
 *     spans: per record kept, five int64 (start, end, timestamp at, rest at, timestamp delta)
 * assemble(section, spans, shift) -> bytes
 *     the kept records, each with its timestamp delta plus `shift` (its length rewritten).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HASH_BYTES 16
#define ENTRY_BYTES 24
#define SPAN_FIELDS 5

/* ---- MD5 (RFC 1321) ------------------------------------------------------------------------ */

static const uint32_t md5_k[64] = {
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391};
static const uint8_t md5_r[64] = {7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
                                  5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20, 5, 9,  14, 20,
                                  4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
                                  6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21};

static void md5_block(uint32_t h[4], const uint8_t *block) {
    uint32_t w[16];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)block[i * 4] | (uint32_t)block[i * 4 + 1] << 8 |
               (uint32_t)block[i * 4 + 2] << 16 | (uint32_t)block[i * 4 + 3] << 24;
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    for (int i = 0; i < 64; i++) {
        uint32_t f;
        int g;
        if (i < 16) {
            f = (b & c) | (~b & d);
            g = i;
        } else if (i < 32) {
            f = (d & b) | (~d & c);
            g = (5 * i + 1) & 15;
        } else if (i < 48) {
            f = b ^ c ^ d;
            g = (3 * i + 5) & 15;
        } else {
            f = c ^ (b | ~d);
            g = (7 * i) & 15;
        }
        uint32_t t = d;
        d = c;
        c = b;
        uint32_t x = a + f + md5_k[i] + w[g];
        b = b + ((x << md5_r[i]) | (x >> (32 - md5_r[i])));
        a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
}

static void md5(const uint8_t *data, size_t size, uint8_t out[HASH_BYTES]) {
    uint32_t h[4] = {0x67452301, 0xefcdab89, 0x98badcfe, 0x10325476};
    size_t whole = size & ~(size_t)63;
    for (size_t i = 0; i < whole; i += 64)
        md5_block(h, data + i);
    uint8_t tail[128] = {0};
    size_t rest = size - whole;
    memcpy(tail, data + whole, rest);
    tail[rest] = 0x80;
    size_t tail_size = rest < 56 ? 64 : 128;
    uint64_t bits = (uint64_t)size * 8;
    for (int i = 0; i < 8; i++)
        tail[tail_size - 8 + i] = (uint8_t)(bits >> (8 * i));
    md5_block(h, tail);
    if (tail_size == 128)
        md5_block(h, tail + 64);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            out[i * 4 + j] = (uint8_t)(h[i] >> (8 * j));
}

/* ---- records -------------------------------------------------------------------------------- */

typedef struct {
    int64_t start, end, timestamp_at, rest_at, timestamp_delta, offset_delta;
    int64_t key_at, key_length; /* key_length < 0: no key */
    int has_value;
} Record;

/* Kafka's zigzag varint of at most `bytes_max` bytes at *p, before `end`; 0 when it does not
 * decode (past the end, too long, or, for a varlong, past 64 bits). */
static int read_varint(const uint8_t **p, const uint8_t *end, int bytes_max, int64_t *value) {
    uint64_t raw = 0;
    const uint8_t *q = *p;
    for (int shift = 0; shift < 7 * bytes_max; shift += 7) {
        if (q >= end)
            return 0;
        uint64_t byte = *q++;
        if (shift == 63 && (byte & 0x7E))
            return 0;
        raw |= (byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *p = q;
            return 1;
        }
    }
    return 0;
}

/* The record at *position of section [base, base + size); advances *position past it. */
static int read_record(const uint8_t *base, Py_ssize_t size, Py_ssize_t *position, Record *r,
                       const char **fault) {
    const uint8_t *p = base + *position, *end = base + size;
    int64_t length, value_length;
    r->start = *position;
    if (p >= end) {
        *fault = "fewer records than counted";
        return 0;
    }
    if (!read_varint(&p, end, 5, &length))
        goto bad_varint;
    const uint8_t *record_end = p + length;
    if (length < 3 || length > end - p) {
        *fault = "a record crosses its end";
        return 0;
    }
    r->end = record_end - base;
    r->timestamp_at = (p + 1) - base;
    p += 1;
    if (!read_varint(&p, record_end, 10, &r->timestamp_delta))
        goto bad_varint;
    r->rest_at = p - base;
    if (!read_varint(&p, record_end, 5, &r->offset_delta))
        goto bad_varint;
    if (!read_varint(&p, record_end, 5, &r->key_length))
        goto bad_varint;
    r->key_at = p - base;
    if (r->key_length >= 0) {
        if (r->key_length > record_end - p) {
            *fault = "a record overruns itself";
            return 0;
        }
        p += r->key_length;
    }
    if (!read_varint(&p, record_end, 5, &value_length))
        goto bad_varint;
    if (value_length > 0 && value_length > record_end - p) {
        *fault = "a record overruns itself";
        return 0;
    }
    r->has_value = value_length >= 0;
    *position = r->end;
    return 1;
bad_varint:
    *fault = "a varint does not decode";
    return 0;
}

static PyObject *fault_error(long long base_offset, const char *fault) {
    PyErr_Format(PyExc_ValueError, "batch at %lld: %s", base_offset, fault);
    return NULL;
}

static uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void put_be64(uint8_t *p, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* The byte position of the slot holding `digest`, or of the empty slot where it belongs (-1:
 * none); *held tells which. As `OffsetMap._find`. */
static Py_ssize_t find_slot(const uint8_t *table, uint64_t slots, const uint8_t *digest,
                            int *held) {
    uint64_t high = be64(digest), low = be64(digest + 8);
    uint64_t slot = high % slots;
    uint64_t step = slots > 1 ? low % (slots - 1) + 1 : 1;
    for (uint64_t i = 0; i < slots; i++) {
        const uint8_t *entry = table + slot * ENTRY_BYTES;
        if (be64(entry + HASH_BYTES) == 0) {
            *held = 0;
            return (Py_ssize_t)(slot * ENTRY_BYTES);
        }
        if (memcmp(entry, digest, HASH_BYTES) == 0) {
            *held = 1;
            return (Py_ssize_t)(slot * ENTRY_BYTES);
        }
        slot = (slot + step) % slots;
    }
    *held = 0;
    return -1;
}

static PyObject *map_keys(PyObject *self, PyObject *args) {
    Py_buffer section, table;
    Py_ssize_t count, entries, entries_max;
    long long base_offset, start, end;
    unsigned long long slots;
    if (!PyArg_ParseTuple(args, "y*nLLLw*Knn", &section, &count, &base_offset, &start, &end,
                          &table, &slots, &entries, &entries_max))
        return NULL;
    PyObject *result = NULL;
    if (slots == 0 || (unsigned long long)table.len < slots * ENTRY_BYTES) {
        PyErr_SetString(PyExc_ValueError, "the table is smaller than its slots");
        goto done;
    }
    const uint8_t *base = section.buf;
    uint8_t *slots_at = table.buf;
    Py_ssize_t position = 0, mapped = 0;
    long long stopped = -1;
    const char *fault = NULL;
    Record r;
    Py_ssize_t walked = 0;
    for (; walked < count; walked++) {
        if (!read_record(base, section.len, &position, &r, &fault)) {
            fault_error(base_offset, fault);
            goto done;
        }
        long long offset = base_offset + r.offset_delta;
        if (r.key_length < 0 || offset < start)
            continue;
        if (offset >= end)
            break;
        uint8_t digest[HASH_BYTES];
        md5(base + r.key_at, (size_t)r.key_length, digest);
        int held;
        Py_ssize_t at = find_slot(slots_at, slots, digest, &held);
        if (!held) {
            if (entries >= entries_max || at < 0) {
                stopped = offset;
                break;
            }
            memcpy(slots_at + at, digest, HASH_BYTES);
            entries++;
        }
        put_be64(slots_at + at + HASH_BYTES, (uint64_t)(offset + 1));
        mapped++;
    }
    if (stopped < 0 && walked == count && position != section.len) {
        fault_error(base_offset, "bytes after its records");
        goto done;
    }
    result = Py_BuildValue("nnL", entries, mapped, stopped);
done:
    PyBuffer_Release(&section);
    PyBuffer_Release(&table);
    return result;
}

static PyObject *filter_records(PyObject *self, PyObject *args) {
    Py_buffer section, table;
    Py_ssize_t count;
    long long base_offset, latest;
    unsigned long long slots;
    int tombstones_stay;
    if (!PyArg_ParseTuple(args, "y*nLLy*Kp", &section, &count, &base_offset, &latest, &table,
                          &slots, &tombstones_stay))
        return NULL;
    PyObject *result = NULL, *spans = NULL;
    if (slots == 0 || (unsigned long long)table.len < slots * ENTRY_BYTES || count < 0) {
        PyErr_SetString(PyExc_ValueError, "the table is smaller than its slots");
        goto done;
    }
    spans = PyBytes_FromStringAndSize(NULL, count * SPAN_FIELDS * (Py_ssize_t)sizeof(int64_t));
    if (spans == NULL)
        goto done;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(spans);
    const uint8_t *base = section.buf;
    Py_ssize_t position = 0, kept = 0;
    int everything = 1, tombstones = 0;
    long long max_delta = INT64_MIN;
    const char *fault = NULL;
    Record r;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!read_record(base, section.len, &position, &r, &fault)) {
            fault_error(base_offset, fault);
            goto done;
        }
        long long offset = base_offset + r.offset_delta;
        int keep;
        if (offset > latest) {
            keep = 1;
        } else if (r.key_length < 0) {
            keep = 0;
        } else {
            uint8_t digest[HASH_BYTES];
            md5(base + r.key_at, (size_t)r.key_length, digest);
            int held;
            Py_ssize_t at = find_slot(table.buf, slots, digest, &held);
            long long mapped = held ? (long long)be64((const uint8_t *)table.buf + at + HASH_BYTES) - 1
                                    : -1;
            keep = offset >= mapped && (r.has_value || tombstones_stay);
        }
        if (!keep) {
            everything = 0;
            continue;
        }
        int64_t *span = out + kept * SPAN_FIELDS;
        span[0] = r.start;
        span[1] = r.end;
        span[2] = r.timestamp_at;
        span[3] = r.rest_at;
        span[4] = r.timestamp_delta;
        kept++;
        tombstones |= !r.has_value;
        if (r.timestamp_delta > max_delta)
            max_delta = r.timestamp_delta;
    }
    if (position != section.len) {
        fault_error(base_offset, "bytes after its records");
        goto done;
    }
    if (_PyBytes_Resize(&spans, kept * SPAN_FIELDS * (Py_ssize_t)sizeof(int64_t)) < 0)
        goto done; /* spans is NULL then */
    result = Py_BuildValue("OiiL", spans, everything, tombstones, max_delta);
done:
    Py_XDECREF(spans);
    PyBuffer_Release(&section);
    PyBuffer_Release(&table);
    return result;
}

static size_t put_zigzag(uint8_t *p, int64_t value) {
    uint64_t encoded = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    size_t n = 0;
    while (encoded & ~(uint64_t)0x7F) {
        p[n++] = (uint8_t)((encoded & 0x7F) | 0x80);
        encoded >>= 7;
    }
    p[n++] = (uint8_t)encoded;
    return n;
}

static PyObject *assemble(PyObject *self, PyObject *args) {
    Py_buffer section, spans;
    long long shift;
    if (!PyArg_ParseTuple(args, "y*y*L", &section, &spans, &shift))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t kept = spans.len / (Py_ssize_t)(SPAN_FIELDS * sizeof(int64_t));
    const int64_t *span = spans.buf;
    const uint8_t *base = section.buf;
    /* Each record grows by at most its length varint's and its timestamp varint's bytes. */
    Py_ssize_t bound = 0;
    for (Py_ssize_t i = 0; i < kept; i++) {
        const int64_t *s = span + i * SPAN_FIELDS;
        if (s[0] < 0 || s[0] > s[2] - 1 || s[2] > s[3] || s[3] > s[1] || s[1] > section.len) {
            PyErr_SetString(PyExc_ValueError, "a span outside the section");
            goto done;
        }
        bound += (s[1] - s[0]) + 20;
    }
    result = PyBytes_FromStringAndSize(NULL, bound);
    if (result == NULL)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result), *p = out;
    for (Py_ssize_t i = 0; i < kept; i++) {
        const int64_t *s = span + i * SPAN_FIELDS;
        if (shift == 0) {
            memcpy(p, base + s[0], (size_t)(s[1] - s[0]));
            p += s[1] - s[0];
            continue;
        }
        uint8_t timestamp[10];
        size_t timestamp_bytes = put_zigzag(timestamp, s[4] + shift);
        int64_t body = 1 + (int64_t)timestamp_bytes + (s[1] - s[3]);
        p += put_zigzag(p, body);
        *p++ = base[s[2] - 1]; /* attributes */
        memcpy(p, timestamp, timestamp_bytes);
        p += timestamp_bytes;
        memcpy(p, base + s[3], (size_t)(s[1] - s[3]));
        p += s[1] - s[3];
    }
    if (_PyBytes_Resize(&result, p - out) < 0)
        result = NULL;
done:
    PyBuffer_Release(&section);
    PyBuffer_Release(&spans);
    return result;
}

static PyObject *md5_digest(PyObject *self, PyObject *args) {
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "y*", &data))
        return NULL;
    uint8_t digest[HASH_BYTES];
    md5(data.buf, (size_t)data.len, digest);
    PyBuffer_Release(&data);
    return PyBytes_FromStringAndSize((const char *)digest, HASH_BYTES);
}

static PyMethodDef methods[] = {
    {"map_keys", map_keys, METH_VARARGS, "Map a records section's keys into the offset map."},
    {"filter_records", filter_records, METH_VARARGS, "The records of a section the map keeps."},
    {"assemble", assemble, METH_VARARGS, "The kept records, their timestamp deltas shifted."},
    {"md5", md5_digest, METH_VARARGS, "MD5, as the map hashes keys."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cclean", NULL, -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__cclean(void) { return PyModule_Create(&module); }
