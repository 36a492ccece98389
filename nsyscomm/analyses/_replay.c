/* The level loop of nsyscomm.analyses.replay.replay() in C (optional; same results, bit for bit).
 *
 * A gloo job's graph is a chain per rank joined at every collective: as many levels as calls,
 * a few operations each, so the numpy version pays a dozen array calls per level, which
 * dominated the what-if replays of a long gloo job.
 * Here each level is a plain loop; the arithmetic is the same, in the same order:
 * ready = max over in-edges of end[src]; st = ready + delay; plain: end = st + dur;
 * group member: gstart[g] = max (or min) of its members' st; end = gstart[g] + dur, except a
 * member that does not wait for its group (free: a buffered send), which ends at st + dur.
 *
 * replay(order, level_ptr, edge_ptr, src, dst, group, dur, delay, ready, use_min, any_min,
 *        start, end, gstart, free): every array a contiguous buffer of int64 or float64 (use_min,
 *        free: uint8), ready/start/end/gstart filled in place (ready and gstart come initialised).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static int get(PyObject *o, Py_buffer *b, int writable) {
    return PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0));
}

static PyObject *replay(PyObject *self, PyObject *args) {
    PyObject *o[15];
    int any_min;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOpOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8],
                          &o[9], &any_min, &o[11], &o[12], &o[13], &o[14]))
        return NULL;
    Py_buffer b[15];
    int got[15] = {0};
    int writable[15] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 0};
    for (int i = 0; i < 15; i++) {
        if (i == 10) continue;
        if (get(o[i], &b[i], writable[i]) < 0) goto fail;
        got[i] = 1;
    }
    {
        const int64_t *order = b[0].buf, *level_ptr = b[1].buf, *edge_ptr = b[2].buf, *src = b[3].buf,
                      *dst = b[4].buf, *group = b[5].buf;
        const double *dur = b[6].buf, *delay = b[7].buf;
        double *ready = b[8].buf, *start = b[11].buf, *end = b[12].buf, *gstart = b[13].buf;
        const uint8_t *use_min = b[9].buf, *free_ = b[14].buf;
        Py_ssize_t levels = b[1].len / (Py_ssize_t)sizeof(int64_t) - 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t L = 0; L < levels; L++) {
            for (int64_t e = edge_ptr[L]; e < edge_ptr[L + 1]; e++) {
                double v = end[src[e]];   /* np.maximum: a NaN on either side wins */
                if (v != v || v > ready[dst[e]]) ready[dst[e]] = v;
            }
            /* starts first, then the groups' starts, then the ends: as the numpy version */
            for (int64_t k = level_ptr[L]; k < level_ptr[L + 1]; k++) {
                int64_t op = order[k];
                double st = ready[op] + delay[op];
                start[op] = st;
                int64_t g = group[op];
                if (g < 0) {
                    end[op] = st + dur[op];
                } else if (use_min[g]) {
                    if (st != st || st < gstart[g]) gstart[g] = st;
                } else {
                    if (st != st || st > gstart[g]) gstart[g] = st;
                }
            }
            for (int64_t k = level_ptr[L]; k < level_ptr[L + 1]; k++) {
                int64_t op = order[k];
                int64_t g = group[op];
                if (g < 0) continue;
                if (free_[op]) { end[op] = start[op] + dur[op]; continue; }
                double gs = gstart[g];
                if (any_min && (gs != gs || gs < start[op])) start[op] = gs;
                end[op] = gstart[g] + dur[op];
            }
        }
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < 15; i++) if (got[i]) PyBuffer_Release(&b[i]);
    Py_RETURN_NONE;
fail:
    for (int i = 0; i < 15; i++) if (got[i]) PyBuffer_Release(&b[i]);
    return NULL;
}

/* levels(n_nodes, src, dst, level): replay._levels() in C, the longest-path level of each node
 * (Kahn's algorithm, one frontier at a time: a node's level is the round its last in-edge is
 * removed). Fills level (int64, n_nodes) in place; returns the number of nodes placed (fewer
 * than n_nodes: a cycle). */
static PyObject *levels(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *os, *od, *ol;
    if (!PyArg_ParseTuple(args, "nOOO", &n, &os, &od, &ol)) return NULL;
    Py_buffer bs, bd, bl;
    if (get(os, &bs, 0) < 0) return NULL;
    if (get(od, &bd, 0) < 0) { PyBuffer_Release(&bs); return NULL; }
    if (get(ol, &bl, 1) < 0) { PyBuffer_Release(&bs); PyBuffer_Release(&bd); return NULL; }
    const int64_t *src = bs.buf, *dst = bd.buf;
    int64_t *level = bl.buf;
    Py_ssize_t m = bs.len / (Py_ssize_t)sizeof(int64_t);
    int64_t *indeg = calloc((size_t)n + 1, sizeof(int64_t)), *ptr = calloc((size_t)n + 2, sizeof(int64_t));
    int64_t *adj = malloc(((size_t)m + 1) * sizeof(int64_t)), *cur = malloc(((size_t)n + 1) * sizeof(int64_t));
    int64_t *nxt = malloc(((size_t)n + 1) * sizeof(int64_t));
    Py_ssize_t done = 0;
    if (!indeg || !ptr || !adj || !cur || !nxt) {
        free(indeg); free(ptr); free(adj); free(cur); free(nxt);
        PyBuffer_Release(&bs); PyBuffer_Release(&bd); PyBuffer_Release(&bl);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < m; e++) { indeg[dst[e]]++; ptr[src[e] + 1]++; }
    for (Py_ssize_t i = 0; i < n; i++) ptr[i + 1] += ptr[i];
    {
        int64_t *fill = calloc((size_t)n + 1, sizeof(int64_t));
        for (Py_ssize_t e = 0; e < m && fill; e++) adj[ptr[src[e]] + fill[src[e]]++] = dst[e];
        free(fill);
    }
    Py_ssize_t nc = 0, nn;
    for (Py_ssize_t i = 0; i < n; i++) { level[i] = 0; if (indeg[i] == 0) cur[nc++] = i; }
    int64_t lv = 0;
    while (nc) {
        nn = 0;
        for (Py_ssize_t k = 0; k < nc; k++) {
            int64_t u = cur[k];
            level[u] = lv;
            done++;
            for (int64_t e = ptr[u]; e < ptr[u + 1]; e++)
                if (--indeg[adj[e]] == 0) nxt[nn++] = adj[e];
        }
        int64_t *t = cur; cur = nxt; nxt = t;
        nc = nn;
        lv++;
    }
    Py_END_ALLOW_THREADS
    free(indeg); free(ptr); free(adj); free(cur); free(nxt);
    PyBuffer_Release(&bs); PyBuffer_Release(&bd); PyBuffer_Release(&bl);
    return PyLong_FromSsize_t(done);
}

static PyMethodDef methods[] = {
    {"replay", replay, METH_VARARGS, "The level loop of nsyscomm.analyses.replay.replay()."},
    {"levels", levels, METH_VARARGS, "nsyscomm.analyses.replay._levels() in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replay", NULL, -1, methods};

PyMODINIT_FUNC PyInit__replay(void) {
    PyObject *m = PyModule_Create(&module);
    /* the call convention of replay(): 2 takes the free array (an older build is not used) */
    if (m && PyModule_AddIntConstant(m, "ABI", 2) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
