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
 * damage and every cut of real shapes. decode_entry's optional fourth argument, the
 * member types, has their values interned (intern_value below).
 *
 * The walk's other per-value and per-message loops, each beside its Python reference
 * and tested against it: frames (framing.MessageBuffer's split), key_new and
 * group_fields (entries.py), name_rows (sweep.py).
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
static PyObject *type_name_made(PyObject *names, Py_ssize_t names_max,
                                const unsigned char *t, Py_ssize_t len);

/* The last TYPES types named (as sent, their lower-cased text): an entry's five or six
 * types are the same in every entry of a search, and a bytes object made per type to
 * look each up in the names table was 1.3 % of a cold initgroups of bigroupuser (py-spy
 * of testing.replay). A type's text is its lower case whatever table it came from. */
#define TYPES 16
static struct {
    PyObject *kind, *name;
} _types[TYPES];
static int _types_next;

static PyObject *
type_name(PyObject *names, Py_ssize_t names_max, const unsigned char *t, Py_ssize_t len)
{
    for (int i = 0; i < TYPES && _types[i].kind != NULL; i++) {
        PyObject *kind = _types[i].kind;
        if (PyBytes_GET_SIZE(kind) == len && memcmp(PyBytes_AS_STRING(kind), t, len) == 0) {
            /* The names table as type_name_made leaves it (the reference's). */
            if (PyDict_GET_SIZE(names) < names_max) {
                int in = PyDict_Contains(names, kind);
                if (in < 0 || (in == 0 && PyDict_SetItem(names, kind, _types[i].name) < 0))
                    return NULL;
            }
            return Py_NewRef(_types[i].name);
        }
    }
    PyObject *name = type_name_made(names, names_max, t, len);
    if (name != NULL) {
        PyObject *kind = PyBytes_FromStringAndSize((const char *)t, len);
        if (kind == NULL) {
            Py_DECREF(name);
            return NULL;
        }
        Py_XSETREF(_types[_types_next].kind, kind);
        Py_XSETREF(_types[_types_next].name, Py_NewRef(name));
        _types_next = (_types_next + 1) % TYPES;
    }
    return name;
}

static PyObject *
type_name_made(PyObject *names, Py_ssize_t names_max, const unsigned char *t, Py_ssize_t len)
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

/* The values of the attributes read interned (decode_entry's interned types: the
 * member attribute): one bytes object per distinct value while a request runs, found
 * by the value's hash with no object made. A cold initgroups of a user in 2,000 groups
 * reads 96,000 member values naming 5,400 DNs: each made, hashed, looked up in the
 * request's memo of keys and freed, where the one interned object keeps its hash.
 * Bounded: past INTERN_MAX distinct values, values are made as before; intern_clear()
 * (at each request's end) lets them go. */
#define INTERN_SLOTS (1 << 17)
#define INTERN_MAX (INTERN_SLOTS / 2)
static PyObject *_interned[INTERN_SLOTS];
static Py_ssize_t _ninterned;

static PyObject *
intern_value(const unsigned char *v, Py_ssize_t len)
{
    Py_hash_t h = _Py_HashBytes(v, len);
    size_t i = (size_t)h & (INTERN_SLOTS - 1);
    for (;;) {
        PyObject *o = _interned[i];
        if (o == NULL)
            break;
        if (PyBytes_GET_SIZE(o) == len && PyObject_Hash(o) == h /* kept in o */
            && memcmp(PyBytes_AS_STRING(o), v, len) == 0)
            return Py_NewRef(o);
        i = (i + 1) & (INTERN_SLOTS - 1);
    }
    PyObject *o = PyBytes_FromStringAndSize((const char *)v, len);
    if (o == NULL || _ninterned >= INTERN_MAX)
        return o;
    if (PyObject_Hash(o) != h) /* the bytes hash is _Py_HashBytes: never, but not assumed */
        return o;
    _interned[i] = Py_NewRef(o);
    _ninterned++;
    return o;
}

static PyObject *
intern_clear(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(args))
{
    if (_ninterned) {
        for (size_t i = 0; i < INTERN_SLOTS; i++)
            Py_CLEAR(_interned[i]);
        _ninterned = 0;
    }
    Py_RETURN_NONE;
}

/* The entry read into *out, or 0 (declined) / -1 (failure, error set). */
static int
read_entry(const unsigned char *b, Py_ssize_t n, PyObject *names, Py_ssize_t names_max,
           PyObject *interned, PyObject **out)
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
        int intern = interned == NULL ? 0 : PySet_Contains(interned, name);
        if (intern < 0) {
            Py_DECREF(name);
            goto failed;
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
            PyObject *v = intern ? intern_value(b + a, vpos - a)
                                 : PyBytes_FromStringAndSize((const char *)b + a, vpos - a);
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
    PyObject *names, *out = NULL, *interned = NULL;
    Py_ssize_t names_max;
    if (!PyArg_ParseTuple(args, "y*O!n|O!:decode_entry", &buf, &PyDict_Type, &names, &names_max,
                          &PyFrozenSet_Type, &interned))
        return NULL;
    int r = read_entry((const unsigned char *)buf.buf, buf.len, names, names_max, interned, &out);
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

/* ---- Group entries: the fields Decoder.group_entry reads, and member values keyed.
 *
 * A cold initgroups of a user in 2,000 groups reads 2,168 group entries: per group,
 * Decoder.group_entry's Python (names, the gid, the class, two stamps, the computed-
 * members rule) was 18 % of the backend's CPU, and keying the round's 44,000 member
 * values (MemberKeys.new_values and .of) 7 % (perf/results/2026-12-07-cold-floor). */

static PyObject *_oc_key; /* "objectclass", Entry.attrs' key of the classes */

/* Is the member value v[0:n] its own normalize_dn key (cached/dn.py, _own_keys):
 * every octet a printable ASCII character that is no upper-case letter, space or one
 * of \ + " ;, RDNs of exactly one "=" each between the commas, and no RDN's type an
 * alias of dn._TYPE_ALIASES? aliases: a tuple of bytes. 1, 0, or -1 (failure). */
static int
own_key(const unsigned char *v, Py_ssize_t n, PyObject *aliases)
{
    if (n == 0)
        return 0;
    Py_ssize_t rdn = 0, eq = -1;
    for (Py_ssize_t i = 0; i <= n; i++) {
        unsigned char c = i < n ? v[i] : ',';
        if (c == ',') {
            if (eq < 0)
                return 0; /* an RDN without "=" (an empty one included) */
            Py_ssize_t tlen = eq - rdn;
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(aliases); k++) {
                PyObject *a = PyTuple_GET_ITEM(aliases, k);
                if (!PyBytes_Check(a))
                    return -1;
                if (PyBytes_GET_SIZE(a) == tlen && memcmp(PyBytes_AS_STRING(a), v + rdn, tlen) == 0)
                    return 0;
            }
            rdn = i + 1;
            eq = -1;
            continue;
        }
        if (c == '=') {
            if (eq >= 0)
                return 0; /* a second "=" in an RDN */
            eq = i;
            continue;
        }
        if (c <= 0x20 || c >= 0x7F || (c >= 'A' && c <= 'Z') || c == '\\' || c == '+' || c == '"'
            || c == ';')
            return 0;
    }
    return 1;
}

/* MemberKeys.new_values then MemberKeys.of for the lists of member values of a
 * round's groups, where every new value is its own key: (the new values (not in
 * memo), each once in the order first met; the keys of each list), after
 * memo[value] = key and spelled.setdefault(key, key) were done for each new value in
 * that order (what .of does for them). None, with memo and spelled untouched, when a
 * new value is not its own key (or a value is not bytes): the caller takes the
 * Python path. */
static PyObject *
key_new(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *lists, *memo, *spelled, *aliases;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:key_new", &PyList_Type, &lists, &PyDict_Type, &memo,
                          &PyDict_Type, &spelled, &PyTuple_Type, &aliases))
        return NULL;
    PyObject *seen = PyDict_New(); /* new value -> its key, ordered */
    PyObject *keyed = PyList_New(PyList_GET_SIZE(lists));
    if (seen == NULL || keyed == NULL)
        goto failed;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lists); i++) {
        PyObject *vals = PyList_GET_ITEM(lists, i);
        if (!PyList_Check(vals) && !PyTuple_Check(vals))
            goto declined;
        Py_ssize_t m = PySequence_Fast_GET_SIZE(vals);
        PyObject **items = PySequence_Fast_ITEMS(vals);
        PyObject *keys = PyList_New(m);
        if (keys == NULL)
            goto failed;
        PyList_SET_ITEM(keyed, i, keys);
        for (Py_ssize_t j = 0; j < m; j++) {
            PyObject *v = items[j];
            if (!PyBytes_CheckExact(v))
                goto declined;
            PyObject *key = PyDict_GetItemWithError(memo, v);
            if (key == NULL && !PyErr_Occurred())
                key = PyDict_GetItemWithError(seen, v);
            if (key != NULL) {
                PyList_SET_ITEM(keys, j, Py_NewRef(key));
                continue;
            }
            if (PyErr_Occurred())
                goto failed;
            int r = own_key((const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v),
                            aliases);
            if (r < 0) {
                PyErr_SetString(PyExc_TypeError, "key_new: aliases must be bytes");
                goto failed;
            }
            if (r == 0)
                goto declined;
            key = PyUnicode_DecodeASCII(PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), NULL);
            if (key == NULL)
                goto failed;
            PyList_SET_ITEM(keys, j, key);
            if (PyDict_SetItem(seen, v, key) < 0)
                goto failed;
        }
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        goto failed;
    Py_ssize_t pos = 0;
    PyObject *v, *key;
    while (PyDict_Next(seen, &pos, &v, &key)) {
        if (PyDict_SetItem(memo, v, key) < 0 || PyDict_SetDefault(spelled, key, key) == NULL
            || PyList_Append(out, v) < 0) {
            Py_DECREF(out);
            goto failed;
        }
    }
    Py_DECREF(seen);
    return Py_BuildValue("(NN)", out, keyed);

declined:
    Py_DECREF(seen);
    Py_DECREF(keyed);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(seen);
    Py_XDECREF(keyed);
    return NULL;
}

/* entries.names: the values as text, or NULL with no error (one not UTF-8 or holding
 * a NUL), or NULL with an error (failure). A new reference. */
static PyObject *
name_texts(PyObject *vals)
{
    Py_ssize_t m = PySequence_Fast_GET_SIZE(vals);
    PyObject *out = PyList_New(m);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *v = PySequence_Fast_GET_ITEM(vals, j);
        if (!PyBytes_Check(v)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "group_fields: a value is not bytes");
            return NULL;
        }
        const char *b = PyBytes_AS_STRING(v);
        Py_ssize_t n = PyBytes_GET_SIZE(v);
        if (memchr(b, 0, n) != NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyObject *t = PyUnicode_DecodeUTF8(b, n, NULL);
        if (t == NULL) {
            Py_DECREF(out);
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return NULL;
            PyErr_Clear();
            return NULL;
        }
        PyList_SET_ITEM(out, j, t);
    }
    return out;
}

/* The values of attrs[key] (a list or tuple), or NULL (absent) with no error; -1 in *err on a
 * value that is not a list. Borrowed. */
static PyObject *
values_of(PyObject *attrs, PyObject *key, int *err)
{
    PyObject *vals = PyDict_GetItemWithError(attrs, key);
    if (vals == NULL) {
        if (PyErr_Occurred())
            *err = -1;
        return NULL;
    }
    if (!PyList_Check(vals) && !PyTuple_Check(vals)) {
        PyErr_SetString(PyExc_TypeError, "group_fields: values are not a list");
        *err = -1;
        return NULL;
    }
    return vals;
}

/* schema.first: the first value as text (invalid UTF-8 replaced), "" for none. */
static PyObject *
first_text(PyObject *vals)
{
    if (vals == NULL || PySequence_Fast_GET_SIZE(vals) == 0)
        return PyUnicode_FromStringAndSize("", 0);
    PyObject *v = PySequence_Fast_GET_ITEM(vals, 0);
    if (!PyBytes_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "group_fields: a value is not bytes");
        return NULL;
    }
    return PyUnicode_DecodeUTF8(PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), "replace");
}

/* entries.int_id: the first value when it is ASCII digits, else None. */
static PyObject *
int_of(PyObject *vals)
{
    if (vals == NULL || PySequence_Fast_GET_SIZE(vals) == 0)
        Py_RETURN_NONE;
    PyObject *v = PySequence_Fast_GET_ITEM(vals, 0);
    if (!PyBytes_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "group_fields: a value is not bytes");
        return NULL;
    }
    const char *b = PyBytes_AS_STRING(v);
    Py_ssize_t n = PyBytes_GET_SIZE(v);
    if (n == 0)
        Py_RETURN_NONE;
    long long x = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (b[i] < '0' || b[i] > '9')
            Py_RETURN_NONE;
        if (i < 18)
            x = x * 10 + (b[i] - '0');
    }
    if (n <= 18)
        return PyLong_FromLongLong(x);
    return PyLong_FromString(b, NULL, 10); /* bytes objects end with a NUL */
}

/* Is the octet string v lower-cased equal to the ASCII lower-case s (bytes.lower)? */
static int
lower_equal(const char *v, Py_ssize_t n, const char *s, Py_ssize_t sn)
{
    if (n != sn)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if ((c >= 'A' && c <= 'Z' ? c + 32 : c) != (unsigned char)s[i])
            return 0;
    }
    return 1;
}

/* computed.computed(attrs, plain): 1, 0, or -1 (failure). */
static int
members_computed(PyObject *attrs, PyObject *ocs, PyObject *plain)
{
    static const char *schemes[] = {"ldap://", "ldaps://", "ldapi://"};
    if (ocs != NULL) {
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(ocs); j++) {
            PyObject *v = PySequence_Fast_GET_ITEM(ocs, j);
            if (PyBytes_Check(v)
                && lower_equal(PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v), "groupofurls", 11))
                return 1;
        }
    }
    Py_ssize_t pos = 0;
    PyObject *k, *vals;
    while (PyDict_Next(attrs, &pos, &k, &vals)) {
        int r = PySet_Contains(plain, k);
        if (r < 0)
            return -1;
        if (r || (!PyList_Check(vals) && !PyTuple_Check(vals)))
            continue;
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(vals); j++) {
            PyObject *v = PySequence_Fast_GET_ITEM(vals, j);
            if (!PyBytes_Check(v))
                continue;
            const char *b = PyBytes_AS_STRING(v);
            Py_ssize_t n = PyBytes_GET_SIZE(v);
            for (int s = 0; s < 3; s++) {
                Py_ssize_t sn = (Py_ssize_t)strlen(schemes[s]);
                if (n >= sn && lower_equal(b, sn, schemes[s], sn))
                    return 1;
            }
        }
    }
    return 0;
}

/* Decoder.group_entry's reading of one group's attributes (Entry.attrs), by spec =
 * (name key, gid key or None, modstamp key, usn key or "", class as configured,
 * class lower-cased, plain or None), the lower-cased keys of entries.GroupKeys:
 * (names(name values) or None, int_id(gid values) or None (also when the gid key is
 * None), the entry of the group class, first(modstamp), first(usn) or "", the
 * members computed, more than one name value). */
static PyObject *
group_fields(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *attrs, *kname, *kgid, *kmod, *kusn, *oc, *oc_lower, *plain;
    if (!PyArg_ParseTuple(args, "O!(UOUUSSO):group_fields", &PyDict_Type, &attrs, &kname, &kgid,
                          &kmod, &kusn, &oc, &oc_lower, &plain))
        return NULL;
    if (plain != Py_None && !PyAnySet_Check(plain)) {
        PyErr_SetString(PyExc_TypeError, "group_fields: plain is not a set");
        return NULL;
    }
    int err = 0;
    PyObject *got = NULL, *gid = NULL, *mod = NULL, *usn = NULL;
    PyObject *nv = values_of(attrs, kname, &err);
    if (err)
        return NULL;
    if (nv == NULL) {
        got = PyList_New(0);
    } else {
        got = name_texts(nv);
        if (got == NULL && !PyErr_Occurred())
            got = Py_NewRef(Py_None);
    }
    if (got == NULL)
        return NULL;
    if (kgid == Py_None) {
        gid = Py_NewRef(Py_None);
    } else {
        if (!PyUnicode_Check(kgid)) {
            PyErr_SetString(PyExc_TypeError, "group_fields: the gid key is not text");
            goto failed;
        }
        PyObject *gv = values_of(attrs, kgid, &err);
        if (err)
            goto failed;
        gid = int_of(gv);
        if (gid == NULL)
            goto failed;
    }
    PyObject *ocs = values_of(attrs, _oc_key, &err);
    if (err)
        goto failed;
    int is_class = 1;
    if (ocs != NULL && PySequence_Fast_GET_SIZE(ocs) > 0) {
        is_class = 0;
        const char *c = PyBytes_AS_STRING(oc), *cl = PyBytes_AS_STRING(oc_lower);
        Py_ssize_t cn = PyBytes_GET_SIZE(oc), cln = PyBytes_GET_SIZE(oc_lower);
        for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(ocs) && !is_class; j++) {
            PyObject *v = PySequence_Fast_GET_ITEM(ocs, j);
            if (!PyBytes_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "group_fields: a value is not bytes");
                goto failed;
            }
            const char *b = PyBytes_AS_STRING(v);
            Py_ssize_t n = PyBytes_GET_SIZE(v);
            if ((n == cn && memcmp(b, c, n) == 0) || lower_equal(b, n, cl, cln))
                is_class = 1;
        }
    }
    PyObject *mv = values_of(attrs, kmod, &err);
    if (err)
        goto failed;
    mod = first_text(mv);
    if (mod == NULL)
        goto failed;
    if (PyUnicode_GET_LENGTH(kusn) == 0) {
        usn = PyUnicode_FromStringAndSize("", 0);
    } else {
        PyObject *uv = values_of(attrs, kusn, &err);
        if (err)
            goto failed;
        usn = first_text(uv);
    }
    if (usn == NULL)
        goto failed;
    int comp = 0;
    if (plain != Py_None) {
        comp = members_computed(attrs, ocs, plain);
        if (comp < 0)
            goto failed;
    }
    return Py_BuildValue("(NNONNNO)", got, gid, is_class ? Py_True : Py_False, mod, usn,
                         PyBool_FromLong(comp),
                         nv != NULL && PySequence_Fast_GET_SIZE(nv) > 1 ? Py_True : Py_False);
failed:
    Py_XDECREF(got);
    Py_XDECREF(gid);
    Py_XDECREF(mod);
    Py_XDECREF(usn);
    return NULL;
}

/* An ASCII decimal of one digit or more (bytes.isdigit), its value in *v, which stops
 * at LLONG_MAX (the caller's bounds are below it, as any such value is above them). */
static int
decimal(PyObject *b, long long *v)
{
    if (!PyBytes_Check(b))
        return 0;
    Py_ssize_t n = PyBytes_GET_SIZE(b);
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(b);
    if (n == 0)
        return 0;
    long long x = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        x = x <= (LLONG_MAX - 9) / 10 ? x * 10 + (s[i] - '0') : LLONG_MAX;
    }
    *v = x;
    return 1;
}

/* sweep.name_rows_py in C (its docstring; tests/unit/test_name_rows_c.py): each key of
 * hits named from its swept row, known[key] = member_type((kind, name)) for the usual
 * user (one name, UTF-8 without NUL, uid and gid ASCII decimals in [lo, hi]), else
 * known[key] = slow(row), in the order of hits. lo and hi: 0 <= lo, hi < LLONG_MAX. */
static PyObject *
name_rows(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *hits, *swept, *known, *mtype, *kind, *slow;
    long long lo, hi;
    if (!PyArg_ParseTuple(args, "O!O!LLO!O!OO:name_rows", &PyList_Type, &hits, &PyDict_Type,
                          &swept, &lo, &hi, &PyDict_Type, &known, &PyType_Type, &mtype, &kind,
                          &slow))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)mtype, &PyTuple_Type) || lo < 0 || hi >= LLONG_MAX) {
        PyErr_SetString(PyExc_ValueError, "name_rows: not a tuple type, or bounds out of range");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(hits); i++) {
        PyObject *k = PyList_GET_ITEM(hits, i);
        PyObject *row = PyDict_GetItemWithError(swept, k);
        if (row == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetObject(PyExc_KeyError, k);
            return NULL;
        }
        Py_INCREF(row);  /* slow() may change swept */
        PyObject *member = NULL;
        PyObject *vals = PyTuple_Check(row) && PyTuple_GET_SIZE(row) == 2
                             ? PyTuple_GET_ITEM(row, 1) : NULL;
        if (vals != NULL && PyList_Check(vals) && PyList_GET_SIZE(vals) == 3) {
            PyObject *names = PyList_GET_ITEM(vals, 0), *uids = PyList_GET_ITEM(vals, 1),
                     *gids = PyList_GET_ITEM(vals, 2);
            long long uid, gid;
            if (PyList_Check(names) && PyList_Check(uids) && PyList_Check(gids)
                && PyList_GET_SIZE(names) == 1 && PyList_GET_SIZE(uids) > 0
                && PyList_GET_SIZE(gids) > 0 && decimal(PyList_GET_ITEM(gids, 0), &gid)
                && lo <= gid && gid <= hi && decimal(PyList_GET_ITEM(uids, 0), &uid)
                && lo <= uid && uid <= hi && PyBytes_Check(PyList_GET_ITEM(names, 0))) {
                PyObject *nb = PyList_GET_ITEM(names, 0);
                const char *b = PyBytes_AS_STRING(nb);
                Py_ssize_t n = PyBytes_GET_SIZE(nb);
                PyObject *name = memchr(b, 0, n) ? NULL : PyUnicode_DecodeUTF8(b, n, NULL);
                if (name == NULL && PyErr_Occurred()) {
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                        Py_DECREF(row);
                        return NULL;
                    }
                    PyErr_Clear();
                }
                if (name != NULL) {
                    /* tuple.__new__(member_type, (kind, name)): new_member */
                    PyObject *pair = PyTuple_Pack(2, kind, name);
                    Py_DECREF(name);
                    PyObject *targs = pair == NULL ? NULL : PyTuple_Pack(1, pair);
                    Py_XDECREF(pair);
                    if (targs == NULL) {
                        Py_DECREF(row);
                        return NULL;
                    }
                    member = PyTuple_Type.tp_new((PyTypeObject *)mtype, targs, NULL);
                    Py_DECREF(targs);
                    if (member == NULL) {
                        Py_DECREF(row);
                        return NULL;
                    }
                }
            }
        }
        if (member == NULL) {
            member = PyObject_CallOneArg(slow, row);
            if (member == NULL) {
                Py_DECREF(row);
                return NULL;
            }
        }
        Py_DECREF(row);
        int bad = PyDict_SetItem(known, k, member);
        Py_DECREF(member);
        if (bad)
            return NULL;
    }
    Py_RETURN_NONE;
}

/* framing.MessageBuffer.feed's split of its buffer (framing.split_py, its reference):
 * (the whole messages from its start, each a bytes of its own; where the first
 * message not whole begins; the position of a header that is not a definite BER
 * length, or announces more than limit bytes, or -1). Short-form messages are taken
 * whatever the limit (it is at least 0x81). */
static PyObject *
frames(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *buf;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "O!n:frames", &PyByteArray_Type, &buf, &limit))
        return NULL;
    const unsigned char *b = (const unsigned char *)PyByteArray_AS_STRING(buf);
    Py_ssize_t end = PyByteArray_GET_SIZE(buf), pos = 0, bad = -1;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    while (end - pos >= 2) {
        unsigned char f = b[pos + 1];
        Py_ssize_t need;
        if (f < 0x80) {
            need = (Py_ssize_t)f + 2;
        } else {
            int n = f & 0x7F;
            if (n == 0 || n > 8) {
                bad = pos;
                break;
            }
            if (end - pos < 2 + n)
                break; /* the header is not all in */
            unsigned long long len = 0;
            int over = 0;
            for (int i = 0; i < n; i++) {
                if (len >> 56)
                    over = 1;
                len = (len << 8) | b[pos + 2 + i];
            }
            if (over || len > (unsigned long long)limit
                || (Py_ssize_t)len + 2 + n > limit) {
                bad = pos;
                break;
            }
            need = (Py_ssize_t)len + 2 + n;
        }
        if (end - pos < need)
            break;
        PyObject *m = PyBytes_FromStringAndSize((const char *)b + pos, need);
        if (m == NULL || PyList_Append(out, m) < 0) {
            Py_XDECREF(m);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(m);
        pos += need;
    }
    return Py_BuildValue("(Nnn)", out, pos, bad);
}

static PyMethodDef methods[] = {
    {"decode_entry", decode_entry, METH_VARARGS,
     "decode_entry(buf, names, names_max): entry.read_entry in C (same answers)."},
    {"decode_rows", decode_rows, METH_VARARGS,
     "decode_rows(msgs, i, shapes): entry.read_rows in C (same rows, same index)."},
    {"key_new", key_new, METH_VARARGS,
     "key_new(lists, memo, spelled, aliases): MemberKeys.new_values and .of for own keys."},
    {"group_fields", group_fields, METH_VARARGS,
     "group_fields(attrs, spec): the fields Decoder.group_entry reads, in C."},
    {"frames", frames, METH_VARARGS,
     "frames(buf, limit): framing.split_py in C (the same messages, end, bad header)."},
    {"intern_clear", intern_clear, METH_NOARGS,
     "intern_clear(): the values decode_entry interned let go (at a request's end)."},
    {"name_rows", name_rows, METH_VARARGS,
     "name_rows(hits, swept, lo, hi, known, member_type, kind, slow): sweep.name_rows_py."},
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
    _oc_key = PyUnicode_InternFromString("objectclass");
    if (_oc_key == NULL)
        return NULL;
    return PyModule_Create(&module);
}
