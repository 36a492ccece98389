/* The hot path of nsyscomm's flight record (nsyscomm/capture/flight_record.py, which documents the
 * file layout and holds the Python fallback): push(msg) writes a collective's message into the
 * next slot of the memory-mapped ring, then calls the NVTX push; pop() calls the NVTX pop, then
 * writes the finish time. Both run for every annotated call, so they are C: a memcpy and a
 * clock read each, no Python frame. raising() tells the next pop of this thread that its call is
 * being left by an exception: the slot is flagged, so the call reads as entered and not finished
 * (a rank whose collective failed because a peer died never completed it).
 *
 * Writes go to a MAP_SHARED file mapping: they are in the page cache as soon as they are stored,
 * so a SIGKILL or abort() of the process does not lose them. A slot's entry number is zeroed
 * before it is rewritten and set last, so a reader never takes a half-written slot for a call.
 * Every call runs with the GIL held: the counters need no atomics.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define HEADER_SIZE 512
#define SLOT_SIZE 512
#define MSG_OFF 40
#define MSG_MAX (SLOT_SIZE - MSG_OFF)
#define OFF_SLOTS 12
#define OFF_ENTERED 32
#define OFF_FINISHED 40
#define OFF_LAST_EXIT 48
#define STACK_MAX 32
#define OFF_FLAGS 36
#define FLAG_RAISED 1u

static Py_buffer g_view;
static int g_have_view = 0;
static char *g_base = NULL;
static uint32_t g_slots = 0;
static PyObject *g_push = NULL, *g_pop = NULL;

/* this thread's open ranges: the slot offset of each collective, -1 for other ranges */
static _Thread_local long t_stack[STACK_MAX];
static _Thread_local int t_depth = 0;
static _Thread_local int t_raising = 0;

static const char PREFIX[] = "nsyscomm:";

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t *u64(long off) { return (uint64_t *)(g_base + off); }

static PyObject *configure(PyObject *mod, PyObject *args) {
    PyObject *mm, *push, *pop;
    if (!PyArg_ParseTuple(args, "OOO", &mm, &push, &pop))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE) < 0)
        return NULL;
    if (view.len < HEADER_SIZE) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "ring mapping too small");
        return NULL;
    }
    if (g_have_view)
        PyBuffer_Release(&g_view);
    g_view = view;  /* held for the life of the process: the mapping stays valid */
    g_have_view = 1;
    g_base = (char *)view.buf;
    memcpy(&g_slots, g_base + OFF_SLOTS, 4);
    if ((Py_ssize_t)HEADER_SIZE + (Py_ssize_t)g_slots * SLOT_SIZE > view.len)
        g_slots = (uint32_t)((view.len - HEADER_SIZE) / SLOT_SIZE);
    Py_INCREF(push);
    Py_INCREF(pop);
    Py_XSETREF(g_push, push);
    Py_XSETREF(g_pop, pop);
    Py_RETURN_NONE;
}

static PyObject *ring_push(PyObject *mod, PyObject *msg) {
    if (!g_push) {
        PyErr_SetString(PyExc_RuntimeError, "flight record not configured");
        return NULL;
    }
    long off = -1;
    Py_ssize_t len = 0;
    const char *s = PyUnicode_Check(msg) ? PyUnicode_AsUTF8AndSize(msg, &len) : NULL;
    if (!s)
        PyErr_Clear();
    if (s && g_slots && len >= (Py_ssize_t)(sizeof(PREFIX) - 1) && memcmp(s, PREFIX, sizeof(PREFIX) - 1) == 0) {
        uint64_t n = *u64(OFF_ENTERED) + 1;
        off = HEADER_SIZE + (long)((n - 1) % g_slots) * SLOT_SIZE;
        uint32_t ln = (uint32_t)(len < MSG_MAX ? len : MSG_MAX);
        *u64(off) = 0;  /* being written */
        memcpy(g_base + off + MSG_OFF, s, ln);
        *u64(off + 8) = now_ns();
        *u64(off + 16) = 0;
        *u64(off + 24) = (uint64_t)pthread_self();
        memcpy(g_base + off + 32, &ln, 4);
        memset(g_base + off + OFF_FLAGS, 0, 4);
        __atomic_store_n(u64(off), n, __ATOMIC_RELEASE);
        __atomic_store_n(u64(OFF_ENTERED), n, __ATOMIC_RELEASE);
    }
    if (t_depth < STACK_MAX)
        t_stack[t_depth] = off;
    t_depth++;
    return PyObject_CallOneArg(g_push, msg);
}

static PyObject *ring_pop(PyObject *mod, PyObject *noargs) {
    if (!g_pop) {
        PyErr_SetString(PyExc_RuntimeError, "flight record not configured");
        return NULL;
    }
    PyObject *r = PyObject_CallNoArgs(g_pop);
    int raised = t_raising;
    t_raising = 0;
    if (t_depth > 0) {
        t_depth--;
        long off = t_depth < STACK_MAX ? t_stack[t_depth] : -1;
        if (off >= 0) {
            uint64_t t = now_ns();
            if (raised) {
                uint32_t flags = FLAG_RAISED;
                memcpy(g_base + off + OFF_FLAGS, &flags, 4);
            }
            *u64(off + 16) = t;
            *u64(OFF_FINISHED) += 1;
            *u64(OFF_LAST_EXIT) = t;
        }
    }
    return r;
}

static PyObject *ring_raising(PyObject *mod, PyObject *noargs) {
    t_raising = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(mmap, push, pop): record into mmap, then call push/pop"},
    {"push", ring_push, METH_O, "push(msg): record a collective's entry, then push its NVTX range"},
    {"pop", ring_pop, METH_NOARGS, "pop(): pop the NVTX range, then record the finish"},
    {"raising", ring_raising, METH_NOARGS, "raising(): this thread's next pop leaves its call by an exception"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {PyModuleDef_HEAD_INIT, "_flightring", NULL, -1, methods};

PyMODINIT_FUNC PyInit__flightring(void) { return PyModule_Create(&moddef); }
