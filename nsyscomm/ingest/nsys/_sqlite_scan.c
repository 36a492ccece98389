/* The first stage of the ingest for the common case: an nsys export's three big tables scanned
 * once each through SQLite's own C API, on every core, keeping only what the later stages use
 * (nsyscomm/ingest/nsys/reader.py, _scan()):
 *
 *   kernels   NCCL kernels whole (about 10% of the rows); the compute kernels' process, device,
 *             start, end, name id and whether they have a name (for the busy islands,
 *             nsyscomm/ingest/busy.py, and the kernels in each call's gap,
 *             nsyscomm/ingest/nsys/gap_kernels.py), in 29 bytes a kernel (COMPUTE_COLS);
 *   runtime   the launches whose (process, correlation id) is an NCCL kernel's;
 *   NVTX      the ranges whose name can matter (a registered name reader.py passes, or inline
 *             text with one of the prefixes of reader._RANGE_PATTERNS); the wrapper's
 *             messages in the layout it writes are split into their fields instead (split_message);
 *
 * and every process's first start and last end over the three (its elapsed time), and how many
 * NVTX ranges might be the program's own long ones (sql/host_ranges_nsys.sql): when none, the
 * caller skips that second pass over NVTX_EVENTS. Each output
 * equals what the DuckDB statements of the other path (reader._copy_tables and the SQL after
 * it) select; tests/extract/test_sqlite_scan.py compares the two.
 *
 * Why not DuckDB's SQLite scanner, as the other path does: it copies all the rows of the three
 * tables into DuckDB (6M for an 8-GPU profile), and the steps after it read them again; on 2
 * cores the whole summarize is bound by CPU (docs/performance.md).
 *
 * The tables are cut into chunks of rowids that the threads take in turn (kernels, NVTX, then
 * the launches, which need every NCCL kernel first); each thread has its own SQLite connection,
 * which calls the scan's row function of the table with each row's values (ROW_FUNCTION).
 * Every chunk writes its rows from its own offset in the outputs (its first rowid's), so threads
 * never share memory; the gaps are closed at the end.
 *
 * Anything unexpected (a value of another type than the column's, text that is not UTF-8, more
 * processes than PIDS) ends the scan with ValueError and the caller takes the DuckDB path, which
 * has the reference behaviour for it. The GIL is released for the whole scan. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>

#define MAX_THREADS 64
#define CHUNK_ROWS 65536
#define PIDS 4096                    /* processes per report: far more than a node runs */
#define BITMAP_MAX_ID (1LL << 26)    /* correlation-id bitmaps of 8 MB per process at most */
#define KERNELS 0
#define RUNTIME 1
#define NVTX 2

/* ---- every process's first start and last end ---- */
typedef struct {
    int64_t pid[PIDS], lo[PIDS], hi[PIDS];
    char has_lo[PIDS], has_hi[PIDS];
    int16_t slot[64];                /* a hash of the process -> its index + 1 (0: none yet) */
    int n, overflow;
} spans_t;

static void span_add(spans_t *s, int64_t pid, int has_start, int64_t start, int has_end, int64_t end) {
    /* rows of the processes interleave (a report's rows are in time order): the process is
     * looked up by a hash of it, and only on a miss by a search of the few there are */
    int h = (int)(((uint64_t)pid * 0x9E3779B97F4A7C15ULL) >> 58), i = s->slot[h] - 1;
    if (i < 0 || s->pid[i] != pid) {
        for (i = 0; i < s->n; i++)
            if (s->pid[i] == pid) break;
        if (i == s->n) {
            if (s->n == PIDS) { s->overflow = 1; return; }
            s->pid[i] = pid; s->has_lo[i] = s->has_hi[i] = 0; s->n++;
        }
        s->slot[h] = (int16_t)(i + 1);
    }
    if (has_start && (!s->has_lo[i] || start < s->lo[i])) { s->lo[i] = start; s->has_lo[i] = 1; }
    if (has_end && (!s->has_hi[i] || end > s->hi[i])) { s->hi[i] = end; s->has_hi[i] = 1; }
}

typedef struct { int64_t *v; uint8_t *ok; } col_t;

/* The compute kernels' columns, each as narrow as its values allow, without validity: the
 * process (24 bits), the device (-1: none) and the name id (-1: none) as int32, start and end
 * as int64, and whether the kernel has a name. A value past 32 bits ends the scan (ValueError). */
#define COMPUTE_COLS 6
static const int COMPUTE_WIDTH[COMPUTE_COLS] = {4, 4, 8, 8, 4, 1};
/* NVTX text columns: the name, and the string fields of the wrapper's messages (split_message) */
#define TEXTS 7
#define NAME 0

typedef struct {
    int table;
    int64_t lo, hi, base;            /* rowids; where its rows go in the table's outputs */
    int64_t n, n2;                   /* rows kept (n2: compute kernels) */
    char *text[TEXTS]; int64_t text_len[TEXTS], text_cap[TEXTS];   /* NVTX strings, one after the other */
} chunk_t;

typedef struct {
    const char *sql;
    int64_t rows;                    /* capacity of each output: the rowid range's length */
    int ncols, ncols2;
    col_t out[10];
    PyObject *bufs[20];              /* the bytearrays behind out (values, then validity) */
    char *out2[COMPUTE_COLS];        /* kernels: the compute kernels' columns (COMPUTE_WIDTH) */
    PyObject *bufs2[COMPUTE_COLS];   /* the bytearrays behind out2 */
    int64_t *text_end[TEXTS];        /* NVTX: end offset of each string in its chunk's text */
    uint8_t *text_ok[TEXTS];         /* NVTX: whether the row has that string (else NULL) */
} table_t;

typedef struct thread_s thread_t;

typedef struct {
    const char *uri;
    table_t t[3];
    chunk_t *chunks; int nchunks;
    int next;                        /* the next chunk to take (under mu) */
    volatile char *cancel;
    pthread_mutex_t mu; pthread_cond_t cv;
    int kernel_chunks_left, keys_ready;
    char err[256];
    /* kernels: the NCCL kernel names' ids (sorted) */
    const int64_t *nccl_ids; Py_ssize_t n_nccl_ids;
    /* runtime: the NCCL kernels' (process, correlation id) keys: a correlation-id bitmap per
     * process when the ids are small enough (a hash set missed the cache on every
     * launch), else an open-addressing set */
    int npid; int64_t bm_pid[64], bm_bits[64]; uint64_t *bm[64];
    int64_t *set_pid, *set_corr; uint64_t set_mask;
    /* NVTX: the registered names that matter, sorted by id */
    const int64_t *rel_ids; const char **rel_str; Py_ssize_t *rel_len; Py_ssize_t n_rel;
    int64_t long_ns;                 /* NVTX: the shortest range counted in long_ranges */
} job_t;

struct thread_s {
    job_t *job;
    chunk_t *chunk;                  /* the chunk being read: where the row functions write */
    int64_t seen;                    /* rows read, for the look at cancel every 4096 */
    spans_t spans;
    int last_pid;                    /* runtime: the last launch's process, in job->bm_pid */
    int64_t long_ranges;             /* NVTX: ranges that may be the program's own long ones */
    char err[256];
};

/* 1: a value, 0: NULL, -1: another type */
static int get_i64(sqlite3_value *v, int64_t *out) {
    int t = sqlite3_value_type(v);
    if (t == SQLITE_INTEGER) { *out = sqlite3_value_int64(v); return 1; }
    *out = 0;
    return t == SQLITE_NULL ? 0 : -1;
}

static void put(col_t *c, int64_t i, int64_t v, int ok) { c->v[i] = v; c->ok[i] = (uint8_t)ok; }

static int in_sorted(const int64_t *a, Py_ssize_t n, int64_t x, Py_ssize_t *at) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (a[mid] < x) lo = mid + 1; else hi = mid;
    }
    if (at) *at = lo;
    return lo < n && a[lo] == x;
}

static uint64_t mix(int64_t a, int64_t b) {
    uint64_t h = ((uint64_t)a * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)b + 0x632BE59BD9B4E019ULL);
    h ^= h >> 29; h *= 0xBF58476D1CE4E5B9ULL; h ^= h >> 32;
    return h;
}

static int set_has(job_t *j, int64_t pid, int64_t corr) {
    for (uint64_t i = mix(pid, corr) & j->set_mask;; i = (i + 1) & j->set_mask) {
        if (j->set_pid[i] == INT64_MIN) return 0;
        if (j->set_pid[i] == pid && j->set_corr[i] == corr) return 1;
    }
}

static void set_add(job_t *j, int64_t pid, int64_t corr) {
    for (uint64_t i = mix(pid, corr) & j->set_mask;; i = (i + 1) & j->set_mask) {
        if (j->set_pid[i] == INT64_MIN) { j->set_pid[i] = pid; j->set_corr[i] = corr; return; }
        if (j->set_pid[i] == pid && j->set_corr[i] == corr) return;
    }
}

/* as sql/nccl_kernels.sql joins a launch to its kernel: same correlation id, same globalTid >> 24 */
static int launch_of_nccl(job_t *j, thread_t *th, int64_t pid, int64_t corr) {
    if (j->set_mask) return set_has(j, pid, corr);
    int i = th->last_pid;
    if (i >= j->npid || j->bm_pid[i] != pid) {   /* launches come in runs of one process */
        for (i = 0; i < j->npid && j->bm_pid[i] != pid; i++) {}
        if (i == j->npid) return 0;
        th->last_pid = i;
    }
    return corr >= 0 && corr < j->bm_bits[i] && (j->bm[i][corr >> 6] >> (corr & 63) & 1);
}

/* The NCCL kernels' keys, from the kernel chunks' rows (once all are read). 0, or -1: out of memory. */
static int build_keys(job_t *j) {
    table_t *k = &j->t[KERNELS];
    int64_t n = 0;
    int bitmaps = 1;
    for (int c = 0; c < j->nchunks; c++) {
        chunk_t *ch = &j->chunks[c];
        if (ch->table != KERNELS) continue;
        for (int64_t r = ch->base; r < ch->base + ch->n; r++) {
            if (!k->out[5].ok[r] || !k->out[4].ok[r]) continue;   /* globalPid, correlationId */
            int64_t pid = k->out[5].v[r] >> 24, corr = k->out[4].v[r];
            int i;
            n++;
            if (!bitmaps) continue;
            for (i = 0; i < j->npid && j->bm_pid[i] != pid; i++) {}
            if (i == j->npid) {
                if (j->npid == 64) { bitmaps = 0; continue; }
                j->bm_pid[i] = pid; j->bm_bits[i] = 0; j->npid++;
            }
            if (corr < 0 || corr >= BITMAP_MAX_ID) bitmaps = 0;
            else if (corr + 1 > j->bm_bits[i]) j->bm_bits[i] = corr + 1;
        }
    }
    if (!n) { j->npid = 0; return 0; }
    if (bitmaps) {
        for (int i = 0; i < j->npid; i++)
            if (!(j->bm[i] = calloc((size_t)(j->bm_bits[i] + 63) / 64, 8))) return -1;
    } else {
        uint64_t cap = 16;
        while (cap < (uint64_t)n * 2) cap *= 2;
        j->set_pid = malloc(cap * 8); j->set_corr = malloc(cap * 8); j->set_mask = cap - 1;
        if (!j->set_pid || !j->set_corr) return -1;
        for (uint64_t i = 0; i < cap; i++) j->set_pid[i] = INT64_MIN;
    }
    for (int c = 0; c < j->nchunks; c++) {
        chunk_t *ch = &j->chunks[c];
        if (ch->table != KERNELS) continue;
        for (int64_t r = ch->base; r < ch->base + ch->n; r++) {
            if (!k->out[5].ok[r] || !k->out[4].ok[r]) continue;
            int64_t pid = k->out[5].v[r] >> 24, corr = k->out[4].v[r];
            if (j->set_mask) { set_add(j, pid, corr); continue; }
            int i;
            for (i = 0; j->bm_pid[i] != pid; i++) {}
            j->bm[i][corr >> 6] |= 1ULL << (corr & 63);
        }
    }
    return 0;
}

#define PID_OF(g) (((g) >> 24) & 16777215)
#define BAD_TYPE(th, what) do { snprintf((th)->err, sizeof (th)->err, "a value of an unexpected type in %s", what); return -1; } while (0)

/* SELECT start, "end", deviceId, streamId, correlationId, globalPid, shortName */
static int kernel_row(thread_t *th, chunk_t *ch, sqlite3_value **row) {
    job_t *j = th->job; table_t *t = &j->t[KERNELS];
    int64_t v[7]; int ok[7];
    for (int c = 0; c < 7; c++)
        if ((ok[c] = get_i64(row[c], &v[c])) < 0) BAD_TYPE(th, "CUPTI_ACTIVITY_KIND_KERNEL");
    if (ok[5]) span_add(&th->spans, PID_OF(v[5]), ok[0], v[0], ok[1], v[1]);
    if (ok[6] && in_sorted(j->nccl_ids, j->n_nccl_ids, v[6], NULL)) {
        int64_t i = ch->base + ch->n++;
        for (int c = 0; c < 7; c++) put(&t->out[c], i, v[c], ok[c]);
    } else if (ok[0] && ok[1]) {
        /* named 0: a kernel without a name, a compute kernel only in a report without NCCL
         * kernels (sql/compute_kernels.sql: NULL NOT IN (empty set) is true); _scan decides */
        int64_t dev = ok[2] ? v[2] : -1, name = ok[6] ? v[6] : -1;
        if (dev < INT32_MIN || dev > INT32_MAX || name < INT32_MIN || name > INT32_MAX) {
            snprintf(th->err, sizeof th->err, "a device or kernel name id past 32 bits");
            return -1;
        }
        int64_t i = ch->base + ch->n2++;
        ((int32_t *)t->out2[0])[i] = ok[5] ? (int32_t)PID_OF(v[5]) : 0;
        ((int32_t *)t->out2[1])[i] = (int32_t)dev;
        ((int64_t *)t->out2[2])[i] = v[0];
        ((int64_t *)t->out2[3])[i] = v[1];
        ((int32_t *)t->out2[4])[i] = (int32_t)name;
        ((uint8_t *)t->out2[5])[i] = (uint8_t)ok[6];
    }
    return 0;
}

/* SELECT start, "end", globalTid, correlationId */
static int runtime_row(thread_t *th, chunk_t *ch, sqlite3_value **row) {
    job_t *j = th->job; table_t *t = &j->t[RUNTIME];
    int64_t v[4]; int ok[4];
    for (int c = 0; c < 4; c++)
        if ((ok[c] = get_i64(row[c], &v[c])) < 0) BAD_TYPE(th, "CUPTI_ACTIVITY_KIND_RUNTIME");
    if (!ok[0] || !ok[2]) return 0;   /* as _copy_tables: WHERE start IS NOT NULL AND globalTid IS NOT NULL */
    span_add(&th->spans, PID_OF(v[2]), 1, v[0], ok[1], v[1]);
    if (ok[3] && launch_of_nccl(j, th, v[2] >> 24, v[3])) {
        int64_t i = ch->base + ch->n++;
        for (int c = 0; c < 4; c++) put(&t->out[c], i, v[c], ok[c]);
    }
    return 0;
}

static int utf8_ok(const unsigned char *b, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {   /* ASCII, the common case, eight bytes at a time */
        uint64_t w;
        memcpy(&w, b + i, 8);
        if (w & 0x8080808080808080ULL) break;
    }
    while (i < n) {
        unsigned char c = b[i];
        if (c < 0x80) { i++; continue; }
        int k; uint32_t cp;
        if ((c & 0xE0) == 0xC0) { k = 1; cp = c & 0x1F; if (cp < 2) return 0; }
        else if ((c & 0xF0) == 0xE0) { k = 2; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { k = 3; cp = c & 0x07; }
        else return 0;
        for (int m = 1; m <= k; m++) {
            if (i + m >= n || (b[i + m] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (b[i + m] & 0x3F);
        }
        if ((k == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (k == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* row i's string of text column k: b[0..n), or NULL (b NULL) */
static int add_text(thread_t *th, chunk_t *ch, table_t *t, int k, int64_t i, const char *b, int64_t n) {
    if (b && ch->text_len[k] + n > ch->text_cap[k]) {
        int64_t cap = ch->text_cap[k] ? ch->text_cap[k] : 1 << 16;
        while (cap < ch->text_len[k] + n) cap *= 2;
        char *p = realloc(ch->text[k], (size_t)cap);
        if (!p) { snprintf(th->err, sizeof th->err, "out of memory"); return -1; }
        ch->text[k] = p; ch->text_cap[k] = cap;
    }
    if (b) { memcpy(ch->text[k] + ch->text_len[k], b, (size_t)n); ch->text_len[k] += n; }
    t->text_end[k][i] = ch->text_len[k];
    t->text_ok[k][i] = b != NULL;
    return 0;
}

static int has_prefix(const unsigned char *b, int64_t n) {
    /* reader._RANGE_PATTERNS: 'nsyscomm%', 'nccl%', 'gloo:%', 'ProfilerStep#%' (LIKE: case matters) */
    static const char *pre[] = {"nsyscomm", "nccl", "gloo:", "ProfilerStep#"};
    static const int len[] = {8, 4, 5, 13};
    for (int i = 0; i < 4; i++)
        if (n >= len[i] && memcmp(b, pre[i], (size_t)len[i]) == 0) return 1;
    return 0;
}

/* ---- the wrapper's messages, split ---- */

/* The fields of the nsyscomm wrapper's collective messages (nsyscomm/nvtx_format.py), for the
 * messages in the layout the wrapper writes: 'nsyscomm:OP|api=|bytes=|dtype=|numel=|pg=|gsize=
 * |granks=|seq=|async=|step=' then an optional '|peer=', then '|caller=' and the caller to the
 * end. sql/calls_nsys.sql splits the others (fields in another order, values that are not plain
 * integers) and, without this extension, all of them; its fast path reads these same fields.
 * An empty value is NULL; an integer is taken when it is a plain decimal that no 64-bit (32-bit
 * for gsize and peer) value can overflow, as DuckDB's TRY_CAST would read it; any other message
 * is left to the SQL (parsed = 0) with its name. */
#define MSG_INTS 6
#define MSG_STRS 6
#define KEY(s) {s, sizeof s - 1}
static const struct { const char *s; int len; } MSG_KEYS[12] = {
    KEY("nsyscomm:"), KEY("api="), KEY("bytes="), KEY("dtype="), KEY("numel="), KEY("pg="), KEY("gsize="),
    KEY("granks="), KEY("seq="), KEY("async="), KEY("step="), KEY("peer=")};
/* field -> its output: ints 0..5 (bytes, numel, gsize, seq, step, peer), strings 100 + 0..5
 * (op, api, dtype, pg, granks; caller is 105), -1: not kept (async) */
static const int MSG_OUT[12] = {100, 101, 0, 102, 1, 103, 2, 104, 3, -1, 4, 5};
static const int MSG_INT_DIGITS[MSG_INTS] = {18, 18, 9, 18, 18, 9};

static int plain_int(const char *b, int64_t n, int digits, int64_t *out) {
    int neg = n > 0 && b[0] == '-';
    if (n - neg < 1 || n - neg > digits) return 0;
    int64_t v = 0;
    for (int64_t i = neg; i < n; i++) {
        if (b[i] < '0' || b[i] > '9') return 0;
        v = v * 10 + (b[i] - '0');
    }
    *out = neg ? -v : v;
    return 1;
}

/* 1: the message's fields are in fs/fl (value starts and lengths, by output), 0: not this layout.
 * One pass over the fields: values hold no '|', so the first '|caller=' (where sql/calls_nsys.sql
 * ends the fields) is the first field that starts with 'caller=', and it has to come right after
 * step or peer. */
static int split_message(const char *b, int64_t n, const char **fs, int64_t *fl) {
    for (int k = 0; k < MSG_INTS + MSG_STRS; k++) { fs[k] = NULL; fl[k] = 0; }
    int64_t at = 0;
    for (int f = 0;; f++) {
        if (f >= 11 && n - at >= 7 && memcmp(b + at, "caller=", 7) == 0) {
            fs[MSG_INTS + 5] = b + at + 7; fl[MSG_INTS + 5] = n - at - 7;
            return 1;
        }
        if (f == 12) return 0;   /* a field after peer that is not the caller */
        int klen = MSG_KEYS[f].len;
        if (n - at < klen || memcmp(b + at, MSG_KEYS[f].s, (size_t)klen) != 0) return 0;
        int64_t end = at + klen;
        while (end < n && b[end] != '|') end++;
        int o = MSG_OUT[f];
        const char *v = b + at + klen;
        if (o >= 100) { fs[MSG_INTS + o - 100] = v; fl[MSG_INTS + o - 100] = end - at - klen; }
        else if (o >= 0) { fs[o] = v; fl[o] = end - at - klen; }
        if (end == n) return f >= 10;   /* the last field: step or peer, without a caller */
        at = end + 1;
    }
}

/* SELECT start, "end", eventType, globalTid, textId, text */
static int nvtx_row(thread_t *th, chunk_t *ch, sqlite3_value **row) {
    job_t *j = th->job; table_t *t = &j->t[NVTX];
    int64_t v[5]; int ok[5];
    if ((ok[2] = get_i64(row[2], &v[2])) < 0) BAD_TYPE(th, "NVTX_EVENTS");
    if (!ok[2] || (v[2] != 34 && v[2] != 59 && v[2] != 60)) return 0;   /* marks and ranges only */
    for (int c = 0; c < 5; c++)
        if (c != 2 && (ok[c] = get_i64(row[c], &v[c])) < 0) BAD_TYPE(th, "NVTX_EVENTS");
    /* a push/pop or start/end range of long_ns or more on a thread: sql/host_ranges_nsys.sql may
     * keep it unless its name (text first, then the registered one) is one of the prefixes it
     * leaves out; only the names this scan knows are checked here, so the count errs high */
    if ((v[2] == 59 || v[2] == 60) && ok[0] && ok[1] && ok[3] && v[1] - v[0] >= j->long_ns) {
        sqlite3_value *lv = row[5];
        int ltype = sqlite3_value_type(lv), known = 0;
        if (ltype == SQLITE_TEXT) known = has_prefix(sqlite3_value_text(lv), sqlite3_value_bytes(lv));
        else if (ltype == SQLITE_NULL) known = ok[4] && in_sorted(j->rel_ids, j->n_rel, v[4], NULL);
        if (!known) th->long_ranges++;
    }
    if (!ok[1]) { v[1] = v[0]; ok[1] = ok[0]; }            /* coalesce("end", start) */
    if (ok[3]) span_add(&th->spans, PID_OF(v[3]), ok[0], v[0], ok[1], v[1]);
    Py_ssize_t at;
    const char *name = NULL; int64_t len = 0;
    if (ok[4] && in_sorted(j->rel_ids, j->n_rel, v[4], &at)) {
        name = j->rel_str[at]; len = j->rel_len[at];
    } else {
        sqlite3_value *tv = row[5];
        int type = sqlite3_value_type(tv);
        if (type == SQLITE_TEXT) {
            const unsigned char *b = sqlite3_value_text(tv);
            int64_t n = sqlite3_value_bytes(tv);
            if (!utf8_ok(b, n)) { snprintf(th->err, sizeof th->err, "NVTX text that is not UTF-8"); return -1; }
            if (has_prefix(b, n)) { name = (const char *)b; len = n; }
        } else if (type != SQLITE_NULL) BAD_TYPE(th, "NVTX_EVENTS.text");
    }
    if (!name) return 0;
    int64_t i = ch->base + ch->n++;
    put(&t->out[0], i, v[0], ok[0]);
    put(&t->out[1], i, v[1], ok[1]);
    put(&t->out[2], i, v[3], ok[3]);
    /* a wrapper message in the wrapper's layout: its fields, and no name (scan_arrow.MESSAGE_FIELDS) */
    const char *fs[MSG_INTS + MSG_STRS]; int64_t fl[MSG_INTS + MSG_STRS], iv[MSG_INTS];
    int split = split_message(name, len, fs, fl);
    for (int c = 0; split && c < MSG_INTS; c++)
        if (fs[c] && fl[c] && !plain_int(fs[c], fl[c], MSG_INT_DIGITS[c], &iv[c])) split = 0;
    put(&t->out[3], i, split, 1);
    for (int c = 0; c < MSG_INTS; c++) {
        int has = split && fs[c] && fl[c];
        put(&t->out[4 + c], i, has ? iv[c] : 0, has);
    }
    for (int c = 0; c < MSG_STRS; c++) {
        int has = split && fs[MSG_INTS + c] && fl[MSG_INTS + c];
        if (add_text(th, ch, t, 1 + c, i, has ? fs[MSG_INTS + c] : NULL, fl[MSG_INTS + c]) < 0) return -1;
    }
    return add_text(th, ch, t, NAME, i, split ? NULL : name, len);
}

typedef int (*row_fn)(thread_t *, chunk_t *, sqlite3_value **);
static const row_fn ROW[3] = {kernel_row, runtime_row, nvtx_row};

/* ---- the rows, read inside SQLite's own loop ----
 *
 * Each table's statement (reader._scan) is 'SELECT count(*) FROM table WHERE rowid BETWEEN ?
 * AND ? AND nsyscomm_<table>(columns)': SQLite calls the function below once per row with the
 * row's values, already decoded, and the statement returns one row per chunk. Stepping through
 * a row at a time and asking for each value with sqlite3_column_value() cost a third more CPU
 * than SQLite's decoding of the values itself (every step re-enters the virtual machine; every
 * value asked is looked up again). The function is false for every row, so count(*) counts
 * nothing and nothing is returned. */
static const char *ROW_FUNCTION[3] = {"nsyscomm_kernel", "nsyscomm_launch", "nsyscomm_range"};
static const int ROW_ARGS[3] = {7, 4, 6};

static void read_row(sqlite3_context *ctx, int which, sqlite3_value **row) {
    thread_t *th = sqlite3_user_data(ctx);
    if ((++th->seen & 4095) == 0 && *th->job->cancel) snprintf(th->err, sizeof th->err, "cancelled");
    else if (th->chunk && th->chunk->table == which) ROW[which](th, th->chunk, row);
    else snprintf(th->err, sizeof th->err, "%s called outside its scan", ROW_FUNCTION[which]);
    if (th->err[0]) sqlite3_result_error(ctx, th->err, -1);   /* ends the statement */
    else sqlite3_result_int(ctx, 0);
}

static void kernel_fn(sqlite3_context *ctx, int n, sqlite3_value **row) { (void)n; read_row(ctx, KERNELS, row); }
static void launch_fn(sqlite3_context *ctx, int n, sqlite3_value **row) { (void)n; read_row(ctx, RUNTIME, row); }
static void range_fn(sqlite3_context *ctx, int n, sqlite3_value **row) { (void)n; read_row(ctx, NVTX, row); }
static void (*const ROW_FN[3])(sqlite3_context *, int, sqlite3_value **) = {kernel_fn, launch_fn, range_fn};

static int failed(job_t *j) {
    pthread_mutex_lock(&j->mu);
    int f = j->err[0] != 0;
    pthread_mutex_unlock(&j->mu);
    return f;
}

static void fail(job_t *j, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->err[0]) snprintf(j->err, sizeof j->err, "%s", msg);
    j->kernel_chunks_left = 0; j->keys_ready = 1;   /* nobody waits for keys that never come */
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void *worker(void *arg) {
    thread_t *th = arg;
    job_t *j = th->job;
    sqlite3 *db = NULL;
    sqlite3_stmt *st[3] = {NULL, NULL, NULL};
    if (sqlite3_open_v2(j->uri, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        fail(j, db ? sqlite3_errmsg(db) : "cannot open the database");
        sqlite3_close(db);
        return NULL;
    }
    for (int t = 0; t < 3; t++)
        if (sqlite3_create_function(db, ROW_FUNCTION[t], ROW_ARGS[t], SQLITE_UTF8, th, ROW_FN[t], NULL, NULL) != SQLITE_OK) {
            fail(j, sqlite3_errmsg(db));
            sqlite3_close(db);
            return NULL;
        }
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int c = j->err[0] ? j->nchunks : j->next++;
        pthread_mutex_unlock(&j->mu);
        if (c >= j->nchunks) break;
        if (*j->cancel) { fail(j, "cancelled"); break; }
        chunk_t *ch = &j->chunks[c];
        if (ch->table == RUNTIME) {
            /* the launches are matched to every NCCL kernel: wait for them (the thread that
             * finishes the last kernel chunk builds the keys) */
            pthread_mutex_lock(&j->mu);
            while (!j->keys_ready) pthread_cond_wait(&j->cv, &j->mu);
            pthread_mutex_unlock(&j->mu);
            if (failed(j)) break;
        }
        if (!st[ch->table] && sqlite3_prepare_v2(db, j->t[ch->table].sql, -1, &st[ch->table], NULL) != SQLITE_OK) {
            fail(j, sqlite3_errmsg(db));
            break;
        }
        sqlite3_stmt *s = st[ch->table];
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, ch->lo);
        sqlite3_bind_int64(s, 2, ch->hi);
        int rc, rows = 0;
        th->chunk = ch;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW)   /* the count of 0: one row */
            if (rows++ || sqlite3_column_count(s) != 1 || sqlite3_column_type(s, 0) != SQLITE_INTEGER
                || sqlite3_column_int64(s, 0) != 0) {
                if (!th->err[0]) snprintf(th->err, sizeof th->err, "a statement that is not the row function's count");
                break;
            }
        th->chunk = NULL;
        if (!th->err[0] && rc != SQLITE_DONE) snprintf(th->err, sizeof th->err, "%s", sqlite3_errmsg(db));
        if (!th->err[0] && th->spans.overflow) snprintf(th->err, sizeof th->err, "more than %d processes", PIDS);
        if (th->err[0]) { fail(j, th->err); break; }
        if (ch->table == KERNELS) {
            pthread_mutex_lock(&j->mu);
            int last = --j->kernel_chunks_left == 0;
            pthread_mutex_unlock(&j->mu);
            if (last) {
                int bad = build_keys(j) < 0;
                if (bad) fail(j, "out of memory");
                pthread_mutex_lock(&j->mu);
                j->keys_ready = 1;
                pthread_cond_broadcast(&j->cv);
                pthread_mutex_unlock(&j->mu);
            }
        }
    }
    for (int t = 0; t < 3; t++) sqlite3_finalize(st[t]);
    sqlite3_close(db);
    return NULL;
}

/* ---- Python glue ---- */

static PyObject *new_buf(int64_t bytes) {
    /* not zeroed: pages no row is written to are never touched */
    return PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(bytes > 0 ? bytes : 1));
}

static int setup_table(table_t *t, const char *sql, int64_t lo, int64_t hi, int ncols, int ncols2, int texts) {
    t->sql = sql;
    t->rows = sql && hi >= lo ? hi - lo + 1 : 0;
    t->ncols = ncols; t->ncols2 = ncols2;
    int b = 0;
    for (int c = 0; c < ncols; c++) {
        col_t *col = &t->out[c];
        if (!(t->bufs[b] = new_buf(t->rows * 8)) || !(t->bufs[b + 1] = new_buf(t->rows))) return -1;
        col->v = (int64_t *)PyByteArray_AS_STRING(t->bufs[b]);
        col->ok = (uint8_t *)PyByteArray_AS_STRING(t->bufs[b + 1]);
        b += 2;
    }
    for (int c = 0; c < ncols2; c++) {
        if (!(t->bufs2[c] = new_buf(t->rows * COMPUTE_WIDTH[c]))) return -1;
        t->out2[c] = PyByteArray_AS_STRING(t->bufs2[c]);
    }
    for (int k = 0; k < texts; k++)
        if (!(t->text_end[k] = malloc((size_t)(t->rows > 0 ? t->rows : 1) * 8))
            || !(t->text_ok[k] = malloc((size_t)(t->rows > 0 ? t->rows : 1)))) { PyErr_NoMemory(); return -1; }
    return 0;
}

/* {name: (values, valid)} of the table's kept rows, its chunks' gaps closed */
static PyObject *table_result(job_t *j, int which, const char **names, const char **names2,
                              const char **text_names) {
    table_t *t = &j->t[which];
    int64_t n = 0, n2 = 0;
    for (int c = 0; c < j->nchunks; c++) {
        chunk_t *ch = &j->chunks[c];
        if (ch->table != which) continue;
        if (ch->base != n)
            for (int k = 0; k < t->ncols; k++) {
                memmove(t->out[k].v + n, t->out[k].v + ch->base, (size_t)ch->n * 8);
                memmove(t->out[k].ok + n, t->out[k].ok + ch->base, (size_t)ch->n);
            }
        if (ch->base != n2)
            for (int k = 0; k < t->ncols2; k++)
                memmove(t->out2[k] + n2 * COMPUTE_WIDTH[k], t->out2[k] + ch->base * COMPUTE_WIDTH[k],
                        (size_t)(ch->n2 * COMPUTE_WIDTH[k]));
        n += ch->n; n2 += ch->n2;
    }
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int c = 0; c < t->ncols; c++) {
        PyObject *v = t->bufs[2 * c], *ok = t->bufs[2 * c + 1];
        if (PyByteArray_Resize(v, (Py_ssize_t)(n * 8)) < 0 || PyByteArray_Resize(ok, (Py_ssize_t)n) < 0) goto fail;
        PyObject *pair = PyTuple_Pack(2, v, ok);
        if (!pair || PyDict_SetItemString(d, names[c], pair) < 0) { Py_XDECREF(pair); goto fail; }
        Py_DECREF(pair);
    }
    for (int c = 0; c < t->ncols2; c++) {
        if (PyByteArray_Resize(t->bufs2[c], (Py_ssize_t)(n2 * COMPUTE_WIDTH[c])) < 0
            || PyDict_SetItemString(d, names2[c], t->bufs2[c]) < 0) goto fail;
    }
    for (int k = 0; k < TEXTS && t->text_end[k]; k++) {
        /* each text column as one buffer, its Arrow offsets (int64: large_string) and validity */
        int64_t text = 0;
        for (int c = 0; c < j->nchunks; c++)
            if (j->chunks[c].table == which) text += j->chunks[c].text_len[k];
        PyObject *data = new_buf(text), *offs = new_buf((n + 1) * 8), *valid = new_buf(n);
        if (!data || !offs || !valid) { Py_XDECREF(data); Py_XDECREF(offs); Py_XDECREF(valid); goto fail; }
        char *dst = PyByteArray_AS_STRING(data);
        int64_t *o = (int64_t *)PyByteArray_AS_STRING(offs);
        uint8_t *v = (uint8_t *)PyByteArray_AS_STRING(valid);
        int64_t at = 0, row = 0;
        o[0] = 0;
        for (int c = 0; c < j->nchunks; c++) {
            chunk_t *ch = &j->chunks[c];
            if (ch->table != which) continue;
            if (ch->text_len[k]) memcpy(dst + at, ch->text[k], (size_t)ch->text_len[k]);
            for (int64_t r = 0; r < ch->n; r++) {
                v[row] = t->text_ok[k][ch->base + r];
                o[++row] = at + t->text_end[k][ch->base + r];
            }
            at += ch->text_len[k];
        }
        if (PyByteArray_Resize(data, (Py_ssize_t)text) < 0 || PyByteArray_Resize(valid, (Py_ssize_t)n) < 0) {
            Py_DECREF(offs); Py_DECREF(data); Py_DECREF(valid);
            goto fail;
        }
        PyObject *triple = Py_BuildValue("(NNN)", offs, data, valid);
        if (!triple || PyDict_SetItemString(d, text_names[k], triple) < 0) { Py_XDECREF(triple); goto fail; }
        Py_DECREF(triple);
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static int int64_buffer(PyObject *o, Py_buffer *b) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (b->len % 8) { PyBuffer_Release(b); PyErr_SetString(PyExc_ValueError, "int64 buffer expected"); return -1; }
    return 0;
}

static void add_chunks(job_t *j, int which, int64_t lo) {
    for (int64_t at = 0; at < j->t[which].rows; at += CHUNK_ROWS) {
        chunk_t *ch = &j->chunks[j->nchunks++];
        memset(ch, 0, sizeof *ch);
        ch->table = which; ch->base = at; ch->lo = lo + at;
        ch->hi = lo + (at + CHUNK_ROWS < j->t[which].rows ? at + CHUNK_ROWS : j->t[which].rows) - 1;
    }
}

static PyObject *scan(PyObject *mod, PyObject *args) {
    (void)mod;
    const char *uri, *ksql, *rsql, *nsql;
    long long klo, khi, rlo, rhi, nlo, nhi;
    int nthreads;
    PyObject *ids_o, *rel_ids_o, *rel_strs, *cancel_o;
    long long long_ns;
    if (!PyArg_ParseTuple(args, "szLLzLLzLLiOOOOL", &uri, &ksql, &klo, &khi, &rsql, &rlo, &rhi, &nsql, &nlo, &nhi,
                          &nthreads, &ids_o, &rel_ids_o, &rel_strs, &cancel_o, &long_ns))
        return NULL;
    job_t *j = calloc(1, sizeof(job_t));
    thread_t *ths = NULL;
    PyObject *result = NULL;
    Py_buffer ids = {0}, rel_ids = {0}, cancel = {0};
    int have_ids = 0, have_rel = 0, have_cancel = 0, sync = 0;
    if (!j) return PyErr_NoMemory();
    if (int64_buffer(ids_o, &ids) < 0) goto done;
    have_ids = 1;
    if (int64_buffer(rel_ids_o, &rel_ids) < 0) goto done;
    have_rel = 1;
    if (PyObject_GetBuffer(cancel_o, &cancel, PyBUF_WRITABLE) < 0) goto done;
    have_cancel = 1;
    if (!PyList_Check(rel_strs) || PyList_GET_SIZE(rel_strs) != rel_ids.len / 8) {
        PyErr_SetString(PyExc_ValueError, "one bytes object per registered id expected");
        goto done;
    }
    j->uri = uri; j->cancel = (volatile char *)cancel.buf; j->long_ns = long_ns;
    j->nccl_ids = ids.buf; j->n_nccl_ids = ids.len / 8;
    j->rel_ids = rel_ids.buf; j->n_rel = rel_ids.len / 8;
    j->rel_str = calloc((size_t)j->n_rel + 1, sizeof(char *));
    j->rel_len = calloc((size_t)j->n_rel + 1, sizeof(Py_ssize_t));
    if (!j->rel_str || !j->rel_len) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < j->n_rel; i++) {
        PyObject *b = PyList_GET_ITEM(rel_strs, i);
        if (!PyBytes_Check(b)) { PyErr_SetString(PyExc_ValueError, "bytes expected"); goto done; }
        j->rel_str[i] = PyBytes_AS_STRING(b); j->rel_len[i] = PyBytes_GET_SIZE(b);
    }
    if (setup_table(&j->t[KERNELS], ksql, klo, khi, 7, COMPUTE_COLS, 0) < 0 || setup_table(&j->t[RUNTIME], rsql, rlo, rhi, 4, 0, 0) < 0
        || setup_table(&j->t[NVTX], nsql, nlo, nhi, 4 + MSG_INTS, 0, TEXTS) < 0)
        goto done;
    int64_t nch = 0;
    for (int t = 0; t < 3; t++) nch += j->t[t].rows / CHUNK_ROWS + 1;
    if (!(j->chunks = calloc((size_t)nch, sizeof(chunk_t)))) { PyErr_NoMemory(); goto done; }
    add_chunks(j, KERNELS, klo);
    j->kernel_chunks_left = j->nchunks;
    add_chunks(j, NVTX, nlo);
    add_chunks(j, RUNTIME, rlo);
    if (j->kernel_chunks_left == 0) j->keys_ready = 1;   /* no kernel: no launch is an NCCL kernel's */
    if (nthreads < 1) nthreads = 1;
    if (nthreads > MAX_THREADS) nthreads = MAX_THREADS;
    if (nthreads > j->nchunks) nthreads = j->nchunks > 0 ? j->nchunks : 1;
    if (!(ths = calloc((size_t)nthreads, sizeof(thread_t)))) { PyErr_NoMemory(); goto done; }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    sync = 1;
    pthread_t tid[MAX_THREADS];
    int started = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < nthreads; i++) {
        ths[i].job = j;
        if (i == nthreads - 1) { worker(&ths[i]); break; }   /* the calling thread works too */
        if (pthread_create(&tid[i], NULL, worker, &ths[i]) != 0) { fail(j, "cannot start a thread"); worker(&ths[i]); break; }
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    Py_END_ALLOW_THREADS
    if (j->err[0]) {
        PyErr_SetString(PyExc_ValueError, j->err);
        goto done;
    }
    static const char *kn[] = {"start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName"};
    static const char *kn2[COMPUTE_COLS] = {"compute_pid", "compute_device", "compute_start", "compute_end",
                                            "compute_name", "compute_named"};
    static const char *rn[] = {"start", "end", "globalTid", "correlationId"};
    static const char *nn[] = {"start", "end", "globalTid", "parsed", "bytes", "numel", "gsize", "seq", "step", "peer"};
    static const char *tn[TEXTS] = {"name", "op", "api", "dtype", "pg", "granks", "caller"};
    PyObject *k = table_result(j, KERNELS, kn, kn2, NULL), *r = table_result(j, RUNTIME, rn, NULL, NULL);
    PyObject *n = table_result(j, NVTX, nn, NULL, tn);
    /* every process's first start and last end, over the threads */
    spans_t *all = calloc(1, sizeof(spans_t));
    PyObject *sp = NULL;
    if (all && k && r && n) {
        for (int i = 0; i < nthreads; i++)
            for (int p = 0; p < ths[i].spans.n; p++)
                span_add(all, ths[i].spans.pid[p], ths[i].spans.has_lo[p], ths[i].spans.lo[p],
                         ths[i].spans.has_hi[p], ths[i].spans.hi[p]);
        if ((sp = PyList_New(all->n)))
            for (int p = 0; p < all->n; p++) {
                PyObject *lo_o = all->has_lo[p] ? PyLong_FromLongLong(all->lo[p]) : Py_NewRef(Py_None);
                PyObject *hi_o = all->has_hi[p] ? PyLong_FromLongLong(all->hi[p]) : Py_NewRef(Py_None);
                PyList_SET_ITEM(sp, p, Py_BuildValue("(LNN)", (long long)all->pid[p], lo_o, hi_o));
            }
    } else if (!all) PyErr_NoMemory();
    if (sp && all->overflow) {
        Py_CLEAR(sp);
        PyErr_Format(PyExc_ValueError, "more than %d processes", PIDS);
    }
    free(all);
    long long long_ranges = 0;
    for (int i = 0; i < nthreads; i++) long_ranges += ths[i].long_ranges;
    if (k && r && n && sp)
        result = Py_BuildValue("{sNsNsNsNsL}", "kernels", k, "runtime", r, "nvtx", n, "spans", sp, "long_ranges",
                               long_ranges);
    else { Py_XDECREF(k); Py_XDECREF(r); Py_XDECREF(n); Py_XDECREF(sp); }
done:
    if (sync) { pthread_mutex_destroy(&j->mu); pthread_cond_destroy(&j->cv); }
    for (int t = 0; t < 3; t++) {
        for (int b = 0; b < 20; b++) Py_XDECREF(j->t[t].bufs[b]);
        for (int b = 0; b < COMPUTE_COLS; b++) Py_XDECREF(j->t[t].bufs2[b]);
        for (int k = 0; k < TEXTS; k++) { free(j->t[t].text_end[k]); free(j->t[t].text_ok[k]); }
    }
    if (j->chunks)
        for (int c = 0; c < j->nchunks; c++)
            for (int k = 0; k < TEXTS; k++) free(j->chunks[c].text[k]);
    free(j->chunks);
    for (int i = 0; i < 64; i++) free(j->bm[i]);
    free(j->set_pid); free(j->set_corr);
    free((void *)j->rel_str); free(j->rel_len);
    free(j); free(ths);
    if (have_ids) PyBuffer_Release(&ids);
    if (have_rel) PyBuffer_Release(&rel_ids);
    if (have_cancel) PyBuffer_Release(&cancel);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(uri, kernel_sql, klo, khi, runtime_sql, rlo, rhi, nvtx_sql, nlo, nhi, threads, nccl_ids, rel_ids,\n"
     "     rel_values, cancel, long_ns) -> {'kernels': ..., 'runtime': ..., 'nvtx': ..., 'spans': [(pid, first, last)],\n"
     "     'long_ranges': NVTX ranges of long_ns or more that may be the program's own}\n"
     "A table whose SQL is None is not read. cancel: a bytearray whose first byte, set, stops the scan."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_sqlite_scan", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__sqlite_scan(void) { return PyModule_Create(&module); }
