/* The steady-state path of nsyscomm's hot collective wrappers (the one-tensor calls: all_reduce,
 * broadcast, reduce, all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single), in C:
 * every Python statement there is per-call overhead, and the budget per call, caller included,
 * is in docs/performance.md ("wrapper overhead per call").
 *
 * It does exactly what the Python hot wrapper in python_layer.py does, reading wrapper.py's globals
 * at each call (so annotate(False), step changes and test monkeypatches take effect at once).
 * Whenever something is not in steady state (rank marker not yet emitted, torch.profiler
 * recording, a group or (group, dtype) template not cached yet, an argument it cannot read), it
 * calls the Python wrapper instead, which handles it and fills the caches.
 *
 * The autograd-key guard: the Python wrapper enters torch._C._AutoDispatchBelowAutograd (a pybind
 * object, a large share of the per-call budget). Here the same c10::impl::ExcludeDispatchKeyGuard
 * is constructed on the C stack through its exported C++ symbols in libc10 (resolved by
 * configure(); the Itanium ABI passes `this` and the one-word DispatchKeySet in registers). wrapper.py checks at annotate()
 * that it excludes the same keys as the Python guard, and otherwise does not use it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#endif

typedef struct {
    void *tls;
    uint64_t saved;
} ExcludeGuard;  /* c10::impl::ExcludeDispatchKeyGuard: PODLocalDispatchKeySet*, DispatchKeySet */

typedef void (*guard_ctor_t)(ExcludeGuard *self, uint64_t keyset);
typedef void (*guard_dtor_t)(ExcludeGuard *self);

static guard_ctor_t g_ctor = NULL;
static guard_dtor_t g_dtor = NULL;
static uint64_t g_keyset = 0;

/* wrapper._TLS.busy: "inside an annotated call on this thread". A data descriptor on the class
 * over this C thread-local, so Python reads and writes tls.busy as before and the C path reads the
 * flag with no attribute lookup. */
static _Thread_local int t_busy = 0;

static PyObject *busy_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (!obj) {
        Py_INCREF(self);
        return self;
    }
    return PyBool_FromLong(t_busy);
}

static int busy_set(PyObject *self, PyObject *obj, PyObject *value) {
    int b = value ? PyObject_IsTrue(value) : 0;
    if (b < 0)
        return -1;
    t_busy = b;
    return 0;
}

static PyTypeObject BusyType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsyscomm.capture._fastpath.BusyFlag",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_descr_get = busy_get,
    .tp_descr_set = busy_set,
    .tp_new = PyType_GenericNew,
    .tp_doc = "A per-thread bool, as a data descriptor (wrapper._TLS.busy).",
};

static PyObject *s_enabled, *s_rank_marked, *s_prof, *s_is_prof, *s_groups, *s_step,
    *s_call_sites, *s_site, *s_push, *s_pop, *s_raising, *s_below, *s_warn_once, *s_counter, *s_numel, *s_dtype,
    *s_element_size, *s_enter, *s_exit, *s_one, *s_zero, *s_empty, *s_pop_key;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fn;       /* the original torch function */
    PyObject *slow;     /* the Python hot wrapper */
    PyObject *globals;  /* wrapper.py's module dict */
    PyObject *tmpls;    /* (group, dtype) -> message template, shared with the Python wrapper */
    PyObject *api;      /* label for warnings */
    PyObject *t_kw, *g_kw, *a_kw;
    Py_ssize_t t_idx, g_idx, a_idx;
    PyObject *dict;     /* __wrapped__, __name__, ... like a function's */
} Hot;

/* borrowed global of wrapper.py, or NULL (no exception) */
static inline PyObject *G(Hot *self, PyObject *name) { return PyDict_GetItemWithError(self->globals, name); }

/* argument idx of a vectorcall, else keyword kw, else NULL; borrowed */
static PyObject *arg(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, Py_ssize_t idx, PyObject *kw) {
    if (idx < nargs)
        return args[idx];
    if (kwnames) {
        Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *k = PyTuple_GET_ITEM(kwnames, i);
            if (k == kw || PyUnicode_Compare(k, kw) == 0)
                return args[nargs + i];
        }
    }
    return NULL;
}

static PyObject *call_slow(Hot *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

/* The annotation failed: say so once through wrapper._warn_once (same key and text as the Python
 * wrapper), never raise into user code. pop=1: the NVTX pop failed. */
static void warn(Hot *self, int pop) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyObject *w = G(self, s_warn_once);
    PyObject *v = value ? value : Py_None;
    if (w) {
        PyObject *text = pop ? PyUnicode_FromFormat("nsyscomm: NVTX pop failed (%R)", v)
                             : PyUnicode_FromFormat("nsyscomm: could not annotate %U (%R); this call is not annotated",
                                                    self->api, v);
        if (text) {
            PyObject *r = PyObject_CallFunctionObjArgs(w, pop ? s_pop_key : self->api, text, NULL);
            Py_XDECREF(r);
            Py_DECREF(text);
        }
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* "file:line function" of the first frame outside torch and nsyscomm, from wrapper._call_sites
 * (filled by wrapper._site on a miss); new reference */
static PyObject *caller(Hot *self) {
    PyObject *sites = G(self, s_call_sites);
    PyObject *site_fn = G(self, s_site);
    if (!sites || !site_fn)
        return NULL;
    PyFrameObject *f = PyEval_GetFrame();  /* borrowed: the wrapper's caller (C calls have no frame) */
    Py_XINCREF(f);
    while (f) {
        PyCodeObject *code = PyFrame_GetCode(f);
#if PY_VERSION_HEX >= 0x030B0000
        int lasti = PyFrame_GetLasti(f);
#else
        int lasti = f->f_lasti;
#endif
        PyObject *li = PyLong_FromLong(lasti);
        PyObject *key = li ? PyTuple_Pack(2, (PyObject *)code, li) : NULL;
        Py_DECREF(code);
        Py_XDECREF(li);
        if (!key) {
            Py_DECREF(f);
            return NULL;
        }
        PyObject *site = PyDict_GetItemWithError(sites, key);
        Py_DECREF(key);
        if (site) {
            Py_INCREF(site);
        } else {
            if (PyErr_Occurred()) {
                Py_DECREF(f);
                return NULL;
            }
            site = PyObject_CallOneArg(site_fn, (PyObject *)f);
            if (!site) {
                Py_DECREF(f);
                return NULL;
            }
        }
        if (PyUnicode_Check(site) && PyUnicode_GET_LENGTH(site) > 0) {
            Py_DECREF(f);
            return site;
        }
        Py_DECREF(site);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }
    Py_INCREF(s_empty);
    return s_empty;
}

/* Run fn below autograd with this thread's busy flag set; then pop the range when pushed. */
static PyObject *below(Hot *self, PyObject *const *args, size_t nargsf, PyObject *kwnames, int pushed) {
    PyObject *r = NULL;
    t_busy = 1;
    if (g_ctor) {
        ExcludeGuard guard;
        g_ctor(&guard, g_keyset);
        r = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
        g_dtor(&guard);
    } else {
        PyObject *cls = G(self, s_below);
        PyObject *gobj = cls ? PyObject_CallNoArgs(cls) : NULL;
        PyObject *entered = gobj ? PyObject_CallMethodNoArgs(gobj, s_enter) : NULL;
        if (!entered) {
            Py_XDECREF(gobj);
            PyErr_Clear();
            r = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
        } else {
            Py_DECREF(entered);
            r = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyObject *x = PyObject_CallMethodObjArgs(gobj, s_exit, Py_None, Py_None, Py_None, NULL);
            Py_XDECREF(x);
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
            Py_DECREF(gobj);
        }
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  /* the collective's own exception passes through unchanged */
    t_busy = 0;
    if (pushed) {
        if (!r) {  /* left by an exception: the flight record flags the call as not completed */
            PyObject *raising = G(self, s_raising);
            PyObject *y = raising ? PyObject_CallNoArgs(raising) : NULL;
            Py_XDECREF(y);
            PyErr_Clear();
        }
        PyObject *pop = G(self, s_pop);
        PyObject *x = pop ? PyObject_CallNoArgs(pop) : NULL;
        if (x)
            Py_DECREF(x);
        else if (PyErr_Occurred())
            warn(self, 1);
    }
    PyErr_Restore(type, value, tb);
    return r;
}

static PyObject *hot_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Hot *self = (Hot *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *en = G(self, s_enabled);
    if (!en || en != Py_True || t_busy) {
        PyErr_Clear();
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    }

    /* an asynchronous call: the Python wrapper marks its completion too (completion.py) */
    PyObject *a = arg(args, nargs, kwnames, self->a_idx, self->a_kw);
    if (a && (a == Py_True || (a != Py_False && a != Py_None && PyObject_IsTrue(a) != 0)))
        goto slow;

    /* not in steady state: the Python wrapper does it (and fills the caches) */
    PyObject *marked = G(self, s_rank_marked);
    PyObject *prof = G(self, s_prof);
    if (!marked || marked != Py_True || !prof)
        goto slow;
    PyObject *recording = PyObject_GetAttr(prof, s_is_prof);
    if (!recording)
        goto slow;
    int rec = PyObject_IsTrue(recording);
    Py_DECREF(recording);
    if (rec)
        goto slow;

    PyObject *pg = arg(args, nargs, kwnames, self->g_idx, self->g_kw);
    if (!pg)
        pg = Py_None;
    PyObject *groups = G(self, s_groups);
    PyObject *g = groups ? PyDict_GetItemWithError(groups, pg) : NULL;  /* borrowed */
    PyObject *t = arg(args, nargs, kwnames, self->t_idx, self->t_kw);
    if (!g || g == Py_None || !t)
        goto slow;
    Py_INCREF(g);
    PyObject *dt = PyObject_GetAttr(t, s_dtype);
    PyObject *key = dt ? PyTuple_Pack(2, g, dt) : NULL;
    Py_XDECREF(dt);
    PyObject *tm = key ? PyDict_GetItemWithError(self->tmpls, key) : NULL;
    Py_XINCREF(tm);  /* numel() may run Python code (a tensor subclass) */
    Py_XDECREF(key);
    PyObject *numel = tm ? PyObject_CallMethodNoArgs(t, s_numel) : NULL;
    PyObject *esize = numel ? PyObject_CallMethodNoArgs(t, s_element_size) : NULL;
    PyObject *nbytes = esize ? PyNumber_Multiply(numel, esize) : NULL;
    Py_XDECREF(esize);
    PyObject *counter = nbytes ? PyObject_GetAttr(g, s_counter) : NULL;
    Py_DECREF(g);
    if (!counter) {
        Py_XDECREF(tm);
        Py_XDECREF(numel);
        Py_XDECREF(nbytes);
        goto slow;
    }
    /* from here on the call has its sequence number: a failure means "not annotated", not a retry */
    PyObject *seq = PyIter_Next(counter);
    Py_DECREF(counter);
    int pushed = 0;
    PyObject *msg = NULL;
    if (seq) {
        PyObject *st = G(self, s_step);
        PyObject *who = caller(self);
        PyObject *tup = who ? PyTuple_Pack(6, nbytes, numel, seq, s_zero,
                                           (st && st != Py_None) ? st : s_empty, who) : NULL;
        Py_XDECREF(who);
        msg = tup ? PyUnicode_Format(tm, tup) : NULL;
        Py_XDECREF(tup);
        Py_DECREF(seq);
    }
    Py_DECREF(tm);
    Py_DECREF(numel);
    Py_DECREF(nbytes);
    if (msg) {
        PyObject *push = G(self, s_push);
        PyObject *x = push ? PyObject_CallOneArg(push, msg) : NULL;
        Py_DECREF(msg);
        if (x) {
            Py_DECREF(x);
            pushed = 1;
        }
    }
    if (!pushed)
        warn(self, 0);
    return below(self, args, nargsf, kwnames, pushed);

slow:
    PyErr_Clear();
    return call_slow(self, args, nargsf, kwnames);
}

static PyObject *hot_call(PyObject *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call(self, args, kwargs);
}

static int hot_traverse(Hot *self, visitproc visit, void *arg) {  /* Py_VISIT uses `arg` */
    Py_VISIT(self->fn);
    Py_VISIT(self->slow);
    Py_VISIT(self->globals);
    Py_VISIT(self->tmpls);
    Py_VISIT(self->dict);
    return 0;
}

static int hot_clear(Hot *self) {
    Py_CLEAR(self->fn);
    Py_CLEAR(self->slow);
    Py_CLEAR(self->globals);
    Py_CLEAR(self->tmpls);
    Py_CLEAR(self->api);
    Py_CLEAR(self->t_kw);
    Py_CLEAR(self->g_kw);
    Py_CLEAR(self->a_kw);
    Py_CLEAR(self->dict);
    return 0;
}

static void hot_dealloc(Hot *self) {
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hot_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"fn", "slow", "globals", "tmpls", "api", "t_idx", "t_kw", "g_idx", "g_kw",
                             "a_idx", "a_kw", NULL};
    PyObject *fn, *slow, *globals, *tmpls, *api, *t_kw, *g_kw, *a_kw;
    Py_ssize_t t_idx, g_idx, a_idx;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO!O!UnUnUnU", kwlist, &fn, &slow, &PyDict_Type, &globals,
                                     &PyDict_Type, &tmpls, &api, &t_idx, &t_kw, &g_idx, &g_kw, &a_idx, &a_kw))
        return NULL;
    Hot *self = (Hot *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    self->vectorcall = hot_vectorcall;
    PyObject **slots[] = {&self->fn, &self->slow, &self->globals, &self->tmpls, &self->api,
                          &self->t_kw, &self->g_kw, &self->a_kw};
    PyObject *vals[] = {fn, slow, globals, tmpls, api, t_kw, g_kw, a_kw};
    for (int i = 0; i < 8; i++) {
        Py_INCREF(vals[i]);
        *slots[i] = vals[i];
    }
    self->t_idx = t_idx;
    self->g_idx = g_idx;
    self->a_idx = a_idx;
    return (PyObject *)self;
}

static PyTypeObject HotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nsyscomm.capture._fastpath.Hot",
    .tp_basicsize = sizeof(Hot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Hot, vectorcall),
    .tp_call = hot_call,
    .tp_new = hot_new,
    .tp_traverse = (traverseproc)hot_traverse,
    .tp_clear = (inquiry)hot_clear,
    .tp_dealloc = (destructor)hot_dealloc,
    .tp_dictoffset = offsetof(Hot, dict),
    .tp_doc = "The C steady-state path of a hot collective wrapper (see python_layer.py).",
};

/* configure(libc10_path, keyset) -> bool: resolve ExcludeDispatchKeyGuard in the loaded libc10 */
static PyObject *configure(PyObject *mod, PyObject *args) {
    const char *path;
    unsigned long long ks;
    if (!PyArg_ParseTuple(args, "sK", &path, &ks))
        return NULL;
    g_ctor = NULL;
    g_dtor = NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);  /* torch loaded it already: never a second copy */
    if (!h)
        Py_RETURN_FALSE;
    guard_ctor_t c = (guard_ctor_t)dlsym(h, "_ZN3c104impl23ExcludeDispatchKeyGuardC1ENS_14DispatchKeySetE");
    guard_dtor_t d = (guard_dtor_t)dlsym(h, "_ZN3c104impl23ExcludeDispatchKeyGuardD1Ev");
    if (!c || !d)
        Py_RETURN_FALSE;
    g_keyset = (uint64_t)ks;
    g_ctor = c;
    g_dtor = d;
    Py_RETURN_TRUE;
}

static PyObject *unconfigure(PyObject *mod, PyObject *noargs) {
    g_ctor = NULL;
    g_dtor = NULL;
    Py_RETURN_NONE;
}

/* call fn() with the C guard held (for wrapper.py's self-check of the guard) */
static PyObject *guarded(PyObject *mod, PyObject *fn) {
    if (!g_ctor) {
        PyErr_SetString(PyExc_RuntimeError, "guard not configured");
        return NULL;
    }
    ExcludeGuard guard;
    g_ctor(&guard, g_keyset);
    PyObject *r = PyObject_CallNoArgs(fn);
    g_dtor(&guard);
    return r;
}

/* The fast NVTX emitter of wrapper._init_emitter, as C functions (no Python frame per push/pop):
 * the same nvtx 0.2.11 Cython objects, one EventAttributes per thread (in wrapper._tls.attrs)
 * re-pointed at each message. */
static PyObject *nv_attrs_type, *nv_message_type, *nv_push_range, *nv_pop_range, *nv_domain, *nv_tls;
static PyObject *s_attrs, *s_message;

static PyObject *nvtx_configure(PyObject *mod, PyObject *args) {
    PyObject *a[6];
    if (!PyArg_ParseTuple(args, "OOOOOO", &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]))
        return NULL;
    PyObject **slots[] = {&nv_attrs_type, &nv_message_type, &nv_push_range, &nv_pop_range, &nv_domain, &nv_tls};
    for (int i = 0; i < 6; i++) {
        Py_INCREF(a[i]);
        Py_XSETREF(*slots[i], a[i]);
    }
    Py_RETURN_NONE;
}

static PyObject *nvtx_push(PyObject *mod, PyObject *msg) {
    if (!nv_push_range) {
        PyErr_SetString(PyExc_RuntimeError, "nvtx emitter not configured");
        return NULL;
    }
    PyObject *margs[2] = {nv_domain, msg};
    PyObject *m = PyObject_Vectorcall(nv_message_type, margs, 2, NULL);
    if (!m)
        return NULL;
    PyObject *attrs = PyObject_GetAttr(nv_tls, s_attrs);
    if (!attrs) {
        Py_DECREF(m);
        return NULL;
    }
    int ok;
    if (attrs == Py_None) {
        Py_DECREF(attrs);
        PyObject *eargs[2] = {m, Py_None};
        attrs = PyObject_Vectorcall(nv_attrs_type, eargs, 2, NULL);
        ok = attrs && PyObject_SetAttr(nv_tls, s_attrs, attrs) == 0;
    } else {
        ok = PyObject_SetAttr(attrs, s_message, m) == 0;
    }
    Py_DECREF(m);
    if (!ok) {
        Py_XDECREF(attrs);
        return NULL;
    }
    PyObject *pargs[2] = {attrs, nv_domain};
    PyObject *r = PyObject_Vectorcall(nv_push_range, pargs, 2, NULL);
    Py_DECREF(attrs);
    return r;
}

static PyObject *nvtx_pop(PyObject *mod, PyObject *noargs) {
    if (!nv_pop_range) {
        PyErr_SetString(PyExc_RuntimeError, "nvtx emitter not configured");
        return NULL;
    }
    return PyObject_CallOneArg(nv_pop_range, nv_domain);
}

static PyMethodDef methods[] = {
    {"nvtx_configure", nvtx_configure, METH_VARARGS,
     "nvtx_configure(EventAttributes, Message, push_range, pop_range, domain_handle, tls)"},
    {"push", nvtx_push, METH_O, "push(msg): push an NVTX range of msg (after nvtx_configure)"},
    {"pop", nvtx_pop, METH_NOARGS, "pop(): pop the range"},
    {"configure", configure, METH_VARARGS, "configure(libc10_path, keyset_raw) -> bool"},
    {"unconfigure", unconfigure, METH_NOARGS, "stop using the C guard"},
    {"guarded", guarded, METH_O, "guarded(fn): fn() inside the C ExcludeDispatchKeyGuard"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_fastpath", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastpath(void) {
    struct {
        PyObject **p;
        const char *s;
    } names[] = {{&s_enabled, "_enabled"}, {&s_rank_marked, "_rank_marked"},
                 {&s_prof, "_prof"}, {&s_is_prof, "_is_profiler_enabled"}, {&s_groups, "_groups"},
                 {&s_step, "_step"}, {&s_call_sites, "_call_sites"}, {&s_site, "_site"}, {&s_push, "_push"},
                 {&s_pop, "_pop"}, {&s_raising, "_raising"}, {&s_below, "_Below"}, {&s_warn_once, "_warn_once"}, {&s_counter, "counter"},
                 {&s_numel, "numel"}, {&s_dtype, "dtype"}, {&s_element_size, "element_size"},
                 {&s_enter, "__enter__"}, {&s_exit, "__exit__"}, {&s_one, "1"}, {&s_zero, "0"}, {&s_empty, ""}, {&s_pop_key, "pop"}, {&s_attrs, "attrs"},
                 {&s_message, "message"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].p = PyUnicode_InternFromString(names[i].s);
        if (!*names[i].p)
            return NULL;
    }
    if (PyType_Ready(&HotType) < 0 || PyType_Ready(&BusyType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moddef);
    if (!m)
        return NULL;
    Py_INCREF(&HotType);
    if (PyModule_AddObject(m, "Hot", (PyObject *)&HotType) < 0) {
        Py_DECREF(&HotType);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *flag = PyObject_CallNoArgs((PyObject *)&BusyType);
    if (!flag || PyModule_AddObject(m, "busy_flag", flag) < 0) {
        Py_XDECREF(flag);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
