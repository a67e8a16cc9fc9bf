/* cached.ldap._ber: the two hot readers of cached/ldap/entry.py in C
 * (docs/ARCHITECTURE.md, "The C entry reader").
 *
 * decode_entry(buf, names, names_max) reads one LDAPMessage carrying a
 * SearchResultEntry without controls as (messageID, objectName, {type lower-cased:
 * [values]}), or returns None for anything else: exactly what the pure-Python
 * reference, entry.read_entry, returns for the same arguments, None included.
 * decode_rows(msgs, i, shapes) reads the small entries of row searches (the sweep of
 * the user bases) from msgs[i] on into their shapes' rows, as entry.read_rows does,
 * and returns the index of the first message it declines; it reads every row as
 * decode_row's general loop does (no layout is learnt: that is the Python reader's
 * own speed-up). The references' docstrings list what is declined and why;
 * tests/unit/test_ber_c.py checks the same answers, rows and tables on random
 * damage and every cut of real shapes.
 *
 * Why C: a cold initgroups of a user in 2,000 groups reads 2,160 group entries with
 * 61,000 values, a loop per value that was 18 % of the backend's CPU in Python; a
 * cold `getent group large01` reads 5,000 user rows, 38 % (py-spy of perf.replay).
 *
 * The bytes come from the network: every octet is read at an index checked to be
 * below the buffer's length first (the references' IndexError, or their comparisons
 * of each length with its container's end), lengths have at most three octets, so
 * no sum can overflow a Py_ssize_t, and only bytes, str, int, list, tuple and dict
 * objects are built. The test places each message flush against a PROT_NONE page.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The value (start, end) of the TLV at pos whose length is short or of one to three
 * octets. 0: done; -1: an octet past the buffer or a longer form (the caller
 * declines). */
static int
container(const unsigned char *b, Py_ssize_t n, Py_ssize_t pos,
          Py_ssize_t *start, Py_ssize_t *end)
{
    if (pos + 1 >= n)
        return -1;
    unsigned char f = b[pos + 1];
    if (f < 0x80) {
        *start = pos + 2;
        *end = pos + 2 + f;
        return 0;
    }
    Py_ssize_t len;
    int k;
    if (f == 0x81)
        k = 1;
    else if (f == 0x82)
        k = 2;
    else if (f == 0x83)
        k = 3;
    else
        return -1;
    if (pos + 1 + k >= n)
        return -1;
    len = 0;
    for (int i = 0; i < k; i++)
        len = (len << 8) | b[pos + 2 + i];
    *start = pos + 2 + k;
    *end = *start + len;
    return 0;
}

/* The lower-cased text of an attribute type, from the names table or made (and
 * kept while the table is below names_max); NULL with no error set: declined (not
 * ASCII); NULL with an error set: failure. A new reference. */
static PyObject *
type_name(PyObject *names, Py_ssize_t names_max, const unsigned char *t, Py_ssize_t len)
{
    PyObject *kind = PyBytes_FromStringAndSize((const char *)t, len);
    if (kind == NULL)
        return NULL;
    PyObject *name = PyDict_GetItemWithError(names, kind);
    if (name != NULL) {
        Py_INCREF(name);
        Py_DECREF(kind);
        return name;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(kind);
        return NULL;
    }
    char lower[128]; /* len < 0x80: checked by the caller */
    for (Py_ssize_t i = 0; i < len; i++) {
        unsigned char c = t[i];
        if (c >= 0x80) {
            Py_DECREF(kind);
            return NULL; /* str.lower() of a non-ASCII type: the generic reader's */
        }
        lower[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
    }
    name = PyUnicode_DecodeASCII(lower, len, NULL);
    if (name == NULL) {
        Py_DECREF(kind);
        return NULL;
    }
    if (PyDict_GET_SIZE(names) < names_max && PyDict_SetItem(names, kind, name) < 0) {
        Py_DECREF(kind);
        Py_DECREF(name);
        return NULL;
    }
    Py_DECREF(kind);
    return name;
}

/* The entry read into *out, or 0 (declined) / -1 (failure, error set). */
static int
read_entry(const unsigned char *b, Py_ssize_t n, PyObject *names, Py_ssize_t names_max,
           PyObject **out)
{
    Py_ssize_t pos, end, a, pend, vpos, vend;
    if (n < 1 || b[0] != 0x30)
        return 0;
    if (container(b, n, 0, &pos, &end) < 0 || end != n || pos >= n || b[pos] != 0x02)
        return 0;
    if (pos + 1 >= n)
        return 0;
    Py_ssize_t ilen = b[pos + 1];
    a = pos + 2;
    pos = a + ilen;
    if (!(0 < ilen && ilen <= 4) || pos >= n || b[pos] != 0x64)
        return 0;
    /* messageID: a signed INTEGER of one to four octets */
    long msgid = (signed char)b[a];
    for (Py_ssize_t i = a + 1; i < pos; i++)
        msgid = msgid * 256 + b[i];
    /* searchResEntry spanning the rest of the message (no controls), objectName */
    if (container(b, n, pos, &pos, &end) < 0 || end != n || pos >= n || b[pos] != 0x04)
        return 0;
    if (container(b, n, pos, &a, &pos) < 0 || pos >= n || b[pos] != 0x30)
        return 0;
    Py_ssize_t dn_start = a, dn_end = pos;
    /* PartialAttributeList spanning the rest */
    if (container(b, n, pos, &pos, &end) < 0 || end != n)
        return 0;

    PyObject *attrs = PyDict_New();
    if (attrs == NULL)
        return -1;
    while (pos < n) {
        /* PartialAttribute ::= SEQUENCE { type OCTET STRING, vals SET OF OCTET STRING } */
        if (b[pos] != 0x30 || container(b, n, pos, &pos, &pend) < 0)
            goto declined;
        if (pend > n || pos >= n || b[pos] != 0x04 || pos + 1 >= n)
            goto declined;
        unsigned char f = b[pos + 1];
        Py_ssize_t t = pos + 2, bset = pos + 2 + f;
        if (f >= 0x80 || bset + 2 > pend || b[bset] != 0x31)
            goto declined;
        if (container(b, n, bset, &vpos, &vend) < 0 || vend != pend)
            goto declined;
        PyObject *name = type_name(names, names_max, b + t, bset - t);
        if (name == NULL) {
            if (PyErr_Occurred())
                goto failed;
            goto declined;
        }
        int dup = PyDict_Contains(attrs, name);
        if (dup != 0) {
            Py_DECREF(name);
            if (dup < 0)
                goto failed;
            goto declined;
        }
        PyObject *vals = PyList_New(0);
        if (vals == NULL || PyDict_SetItem(attrs, name, vals) < 0) {
            Py_XDECREF(vals);
            Py_DECREF(name);
            goto failed;
        }
        Py_DECREF(name);
        Py_DECREF(vals); /* attrs holds it */
        pos = pend;
        while (vpos < pend) {
            if (b[vpos] != 0x04 || vpos + 1 >= n)
                goto declined;
            f = b[vpos + 1];
            if (f < 0x80) {
                a = vpos + 2;
                vpos = a + f;
            } else if (f == 0x81) {
                if (vpos + 2 >= n)
                    goto declined;
                a = vpos + 3;
                vpos = a + b[vpos + 2];
            } else if (f == 0x82) {
                if (vpos + 3 >= n)
                    goto declined;
                a = vpos + 4;
                vpos = a + ((Py_ssize_t)b[vpos + 2] << 8 | b[vpos + 3]);
            } else {
                goto declined;
            }
            /* A value running past the SET's end: the reference ends its loop past
             * it and declines. */
            if (vpos > pend)
                goto declined;
            PyObject *v = PyBytes_FromStringAndSize((const char *)b + a, vpos - a);
            if (v == NULL)
                goto failed;
            int r = PyList_Append(vals, v);
            Py_DECREF(v);
            if (r < 0)
                goto failed;
        }
    }
    PyObject *dn = PyBytes_FromStringAndSize((const char *)b + dn_start, dn_end - dn_start);
    if (dn == NULL)
        goto failed;
    *out = Py_BuildValue("(lNN)", msgid, dn, attrs);
    return *out == NULL ? -1 : 1;

declined:
    Py_DECREF(attrs);
    return 0;
failed:
    Py_DECREF(attrs);
    return -1;
}

static PyObject *
decode_entry(PyObject *Py_UNUSED(self), PyObject *args)
{
    Py_buffer buf;
    PyObject *names, *out = NULL;
    Py_ssize_t names_max;
    if (!PyArg_ParseTuple(args, "y*O!n:decode_entry", &buf, &PyDict_Type, &names, &names_max))
        return NULL;
    int r = read_entry((const unsigned char *)buf.buf, buf.len, names, names_max, &out);
    PyBuffer_Release(&buf);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
    return out;
}

/* The shape of the rows of one message ID (entry.RowShape's slots, count and rows):
 * the last one met is kept across the messages of a call (runs of one search). */
typedef struct {
    long msgid;
    PyObject *slots; /* dict: attribute type as sent -> slot (-1: not asked) */
    PyObject *rows;  /* list the rows go to */
    Py_ssize_t count;
} Shape;

static void
shape_clear(Shape *sh)
{
    Py_CLEAR(sh->slots);
    Py_CLEAR(sh->rows);
    sh->count = 0;
}

/* sh set to the shape of msgid: 1, 0 when shapes has none (declined), -1 on failure. */
static int
shape_of(PyObject *shapes, long msgid, Shape *sh)
{
    if (sh->slots != NULL && sh->msgid == msgid)
        return 1;
    shape_clear(sh);
    PyObject *key = PyLong_FromLong(msgid);
    if (key == NULL)
        return -1;
    PyObject *shape = PyDict_GetItemWithError(shapes, key); /* borrowed */
    Py_DECREF(key);
    if (shape == NULL)
        return PyErr_Occurred() ? -1 : 0;
    Py_INCREF(shape);
    PyObject *count = PyObject_GetAttrString(shape, "count");
    sh->slots = PyObject_GetAttrString(shape, "slots");
    sh->rows = PyObject_GetAttrString(shape, "rows");
    Py_DECREF(shape);
    if (count == NULL || sh->slots == NULL || sh->rows == NULL || !PyDict_Check(sh->slots)
        || !PyList_Check(sh->rows)) {
        Py_XDECREF(count);
        shape_clear(sh);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "decode_rows: not a RowShape");
        return -1;
    }
    sh->count = PyLong_AsSsize_t(count);
    Py_DECREF(count);
    if (sh->count < 0) {
        shape_clear(sh);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "decode_rows: a negative count");
        return -1;
    }
    sh->msgid = msgid;
    return 1;
}

/* The slot of an attribute type: from the shape's table, or by its lower-cased
 * spelling (kept in the table while it holds fewer than 64). -1: not asked; -2:
 * declined (not ASCII); -3: failure. */
static Py_ssize_t
slot_of(Shape *sh, const unsigned char *t, Py_ssize_t len)
{
    PyObject *kind = PyBytes_FromStringAndSize((const char *)t, len);
    if (kind == NULL)
        return -3;
    PyObject *v = PyDict_GetItemWithError(sh->slots, kind);
    if (v == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(kind);
            return -3;
        }
        char lower[128]; /* len < 0x80: an attribute of a message of 129 octets at most */
        for (Py_ssize_t i = 0; i < len; i++) {
            unsigned char c = t[i];
            if (c >= 0x80) {
                Py_DECREF(kind);
                return -2; /* str.lower() of a non-ASCII type: the generic reader's */
            }
            lower[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
        }
        PyObject *low = PyBytes_FromStringAndSize(lower, len);
        if (low == NULL) {
            Py_DECREF(kind);
            return -3;
        }
        v = PyDict_GetItemWithError(sh->slots, low);
        Py_DECREF(low);
        if (v == NULL && PyErr_Occurred()) {
            Py_DECREF(kind);
            return -3;
        }
        PyObject *slot = v != NULL ? Py_NewRef(v) : PyLong_FromLong(-1);
        if (slot == NULL) {
            Py_DECREF(kind);
            return -3;
        }
        int r = PyDict_GET_SIZE(sh->slots) < 64 ? PyDict_SetItem(sh->slots, kind, slot) : 0;
        Py_DECREF(kind);
        Py_ssize_t i = PyLong_AsSsize_t(slot);
        Py_DECREF(slot);
        if (r < 0 || (i == -1 && PyErr_Occurred()))
            return -3;
        return i;
    }
    Py_DECREF(kind);
    Py_ssize_t i = PyLong_AsSsize_t(v);
    return i == -1 && PyErr_Occurred() ? -3 : i;
}

/* entry.decode_row of one message: 1 (its row appended), 0 (declined), -1 (failure). */
static int
read_row(const unsigned char *b, Py_ssize_t n, PyObject *shapes, Shape *sh)
{
    Py_ssize_t a, pos;
    long msgid;
    if (n < 9 || n > 129 || b[0] != 0x30 || b[1] != n - 2 || b[2] != 0x02)
        return 0;
    Py_ssize_t ilen = b[3];
    if (ilen == 1) {
        if (b[5] != 0x64 || b[6] != n - 7 || b[7] != 0x04)
            return 0;
        msgid = (signed char)b[4];
        a = 9;
        pos = 9 + b[8];
    } else {
        pos = 4 + ilen;
        if (!(0 < ilen && ilen <= 4) || pos + 4 > n || b[pos] != 0x64)
            return 0;
        if (b[pos + 1] != n - pos - 2 || b[pos + 2] != 0x04)
            return 0;
        msgid = (signed char)b[4];
        for (Py_ssize_t k = 5; k < pos; k++)
            msgid = msgid * 256 + b[k];
        a = pos + 4;
        pos = a + b[pos + 3];
    }
    int r = shape_of(shapes, msgid, sh);
    if (r <= 0)
        return r;
    /* PartialAttributeList spanning the rest */
    if (pos + 2 > n || b[pos] != 0x30 || b[pos + 1] != n - pos - 2)
        return 0;
    PyObject *dn = PyUnicode_DecodeUTF8((const char *)b + a, pos - a, NULL);
    if (dn == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
            return -1;
        PyErr_Clear();
        return 0; /* the generic reader's text (client._server_text) */
    }
    pos += 2;
    PyObject *out = PyList_New(sh->count); /* NULL items: slots not set yet */
    if (out == NULL) {
        Py_DECREF(dn);
        return -1;
    }
    while (pos < n) {
        /* PartialAttribute ::= SEQUENCE { type OCTET STRING, vals SET OF OCTET STRING };
         * every length one octet (the message is under 130), compared, never trusted */
        if (pos + 4 > n || b[pos] != 0x30 || b[pos + 2] != 0x04)
            goto declined;
        Py_ssize_t pend = pos + 2 + b[pos + 1];
        Py_ssize_t bset = pos + 4 + b[pos + 3];
        if (pend > n || bset + 2 > pend || b[bset] != 0x31 || bset + 2 + b[bset + 1] != pend)
            goto declined;
        Py_ssize_t i = slot_of(sh, b + pos + 4, bset - pos - 4);
        if (i == -3)
            goto failed;
        if (i == -2 || i >= sh->count || i < -1)
            goto declined;
        Py_ssize_t vpos = bset + 2;
        pos = pend;
        if (i < 0) {
            /* Not asked, but its values checked as the generic reader checks them */
            while (vpos < pend) {
                if (vpos + 2 > pend || b[vpos] != 0x04)
                    goto declined;
                vpos += 2 + b[vpos + 1];
            }
            if (vpos != pend)
                goto declined;
            continue;
        }
        if (PyList_GET_ITEM(out, i) != NULL)
            goto declined; /* the attribute twice: the generic reader joins them */
        PyObject *vals = PyList_New(0);
        if (vals == NULL)
            goto failed;
        PyList_SET_ITEM(out, i, vals);
        while (vpos < pend) {
            if (vpos + 2 > pend || b[vpos] != 0x04)
                goto declined;
            a = vpos + 2;
            vpos = a + b[vpos + 1];
            if (vpos > pend)
                goto declined;
            PyObject *v = PyBytes_FromStringAndSize((const char *)b + a, vpos - a);
            if (v == NULL)
                goto failed;
            r = PyList_Append(vals, v);
            Py_DECREF(v);
            if (r < 0)
                goto failed;
        }
    }
    for (Py_ssize_t i = 0; i < sh->count; i++) {
        if (PyList_GET_ITEM(out, i) == NULL) {
            PyObject *none = PyList_New(0); /* an attribute the entry lacks */
            if (none == NULL)
                goto failed;
            PyList_SET_ITEM(out, i, none);
        }
    }
    PyObject *row = PyTuple_Pack(2, dn, out);
    Py_DECREF(dn);
    Py_DECREF(out);
    if (row == NULL)
        return -1;
    r = PyList_Append(sh->rows, row);
    Py_DECREF(row);
    return r < 0 ? -1 : 1;

declined:
    Py_DECREF(dn);
    Py_DECREF(out);
    return 0;
failed:
    Py_DECREF(dn);
    Py_DECREF(out);
    return -1;
}

static PyObject *
decode_rows(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *msgs, *shapes;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!nO!:decode_rows", &PyList_Type, &msgs, &i, &PyDict_Type,
                          &shapes))
        return NULL;
    if (i < 0) {
        PyErr_SetString(PyExc_ValueError, "decode_rows: a negative index");
        return NULL;
    }
    Shape sh = {0, NULL, NULL, 0};
    for (; i < PyList_GET_SIZE(msgs); i++) {
        /* bytes (the client's messages), or any buffer (the tests' guard pages) */
        Py_buffer view;
        PyObject *m = PyList_GET_ITEM(msgs, i);
        if (PyObject_GetBuffer(m, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            break; /* not bytes: the caller's generic readers say what it is */
        }
        int r = read_row((const unsigned char *)view.buf, view.len, shapes, &sh);
        PyBuffer_Release(&view);
        if (r < 0) {
            shape_clear(&sh);
            return NULL;
        }
        if (r == 0)
            break;
    }
    shape_clear(&sh);
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"decode_entry", decode_entry, METH_VARARGS,
     "decode_entry(buf, names, names_max): entry.read_entry in C (same answers)."},
    {"decode_rows", decode_rows, METH_VARARGS,
     "decode_rows(msgs, i, shapes): entry.read_rows in C (same rows, same index)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cached.ldap._ber",
    "The SearchResultEntry reader of cached/ldap/entry.py (read_entry) in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__ber(void)
{
    return PyModule_Create(&module);
}
