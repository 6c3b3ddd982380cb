/*
 * fake_nvml.c -- a FAKE libnvidia-ml.so.1 for tests.
 *
 * THIS IS NOT NVIDIA'S LIBRARY AND IT TOUCHES NO GPU.  It is a test double of the NVIDIA
 * Management Library: the real nvidia-ml-py (pynvml) loads it in place of the driver's
 * libnvidia-ml.so.1 so that the Gotthard GPU collector can be tested on machines without a
 * GPU.  Every value it reports comes from a text fixture file named by the environment
 * variable FAKE_NVML_FIXTURE (format: tests/fakenvml/README.md).
 *
 * It is compiled against NVIDIA's real nvml.h (nvidia-nvml-dev wheel) with
 * -DNVML_NO_UNVERSIONED_FUNC_DEFS, so every exported NVML function is written under its exact
 * symbol name (nvmlDeviceGetCount_v2, ...) and its definition is type-checked against the
 * header's prototype; -Wmissing-prototypes makes a misspelt NVML name (one nvml.h does not
 * declare) a compile error.  Struct layouts are the header's own.
 *
 * Behaviour in brief:
 *  - the fixture is re-parsed only when the file's identity/size/mtime/ctime changes;
 *  - a fixture value "ERR:<n>" makes the corresponding call return NVML error n;
 *  - an absent key makes the corresponding call return NVML_ERROR_NOT_SUPPORTED;
 *  - one mutex guards all state: every call holds it for its duration, except
 *    nvmlEventSetWait_v2, which releases it while it sleeps between fixture polls.
 *
 * Fake-only helper symbols (fake_nvml_*) let tests check lifecycle, GPM sample leaks and
 * struct layouts; the real library has none of them.
 */
#define _GNU_SOURCE
#include <nvml.h>

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define FAKE_ENV_VAR "FAKE_NVML_FIXTURE"
#define FAKE_MAX_GPUS 64    /* "count" is clamped to this */
#define FAKE_MAX_MIG 16     /* "<i>.mig.count" is clamped to this */
#define FAKE_POLL_MS 10     /* nvmlEventSetWait_v2 fixture poll interval */
#define FAKE_KEY_MAX 160
#define DEVICE_MAGIC 0x46414b45u /* "FAKE" */
#define SAMPLE_MAGIC 0x47504d53u /* "GPMS" */
#define EVSET_MAGIC 0x45565354u  /* "EVST" */
#define NO_INSTANCE 0xFFFFFFFFu

/* ---- fake-only helpers (declared here so -Wmissing-prototypes checks everything else) ---- */
int fake_nvml_init_count(void);
int fake_nvml_init_calls(void);
int fake_nvml_shutdown_calls(void);
int fake_nvml_gpm_samples_live(void);
int fake_nvml_gpm_bad_frees(void);
int fake_nvml_event_sets_live(void);
int fake_nvml_fixture_loads(void);
long fake_nvml_sizeof(const char *type_name);
long fake_nvml_offsetof(const char *type_dot_field);
void fake_nvml_reset(void);

/* ======================================================================================== */
/* Fixture store                                                                            */
/* ======================================================================================== */

struct fx_entry {
    const char *key; /* points into g_fx.buf */
    const char *val; /* points into g_fx.buf, trimmed, may be "" */
    size_t line;
};

struct fx_event {
    unsigned long long n;
    unsigned int gpu;
    unsigned long long xid;
    unsigned int gi;
    unsigned int ci;
};

static struct {
    char *buf;
    struct fx_entry *ent;
    size_t nent;
    struct fx_event *ev;
    size_t nev;
    int have_path;      /* a load was attempted for path[] */
    int readable;       /* the last load read the file */
    char path[4096];
    struct stat st;     /* identity of the file last read */
} g_fx;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_refcount;
static int g_init_calls;
static int g_shutdown_calls;
static int g_fixture_loads;
static int g_gpm_bad_frees;

static void warnx_(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "fake_nvml: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

static void fx_clear(void)
{
    free(g_fx.buf);
    free(g_fx.ent);
    free(g_fx.ev);
    g_fx.buf = NULL;
    g_fx.ent = NULL;
    g_fx.ev = NULL;
    g_fx.nent = 0;
    g_fx.nev = 0;
}

static int cmp_entry(const void *a, const void *b)
{
    const struct fx_entry *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c != 0)
        return c;
    return (x->line > y->line) - (x->line < y->line);
}

static int cmp_event(const void *a, const void *b)
{
    const struct fx_event *x = a, *y = b;
    return (x->n > y->n) - (x->n < y->n);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* Unsigned integer: decimal, or hex with a 0x prefix; the whole string must be consumed. */
static int parse_u64(const char *s, unsigned long long *out)
{
    char *end;
    int base = 10;
    if (s == NULL || *s == '\0' || *s == '-' || *s == '+' || is_space(*s))
        return 0;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        base = 16;
    errno = 0;
    *out = strtoull(s, &end, base);
    return errno == 0 && *end == '\0' && end != s;
}

static int parse_i64(const char *s, long long *out)
{
    char *end;
    if (s == NULL || *s == '\0' || is_space(*s))
        return 0;
    errno = 0;
    *out = strtoll(s, &end, 10);
    return errno == 0 && *end == '\0' && end != s;
}

static int parse_f64(const char *s, double *out)
{
    char *end;
    if (s == NULL || *s == '\0' || is_space(*s))
        return 0;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && *end == '\0' && end != s;
}

/* "event.<n> <gpu>:<xid>[:<gi>:<ci>]" */
static int parse_event(const char *key, const char *val, struct fx_event *ev)
{
    char tail;
    unsigned long long gpu, xid, gi = NO_INSTANCE, ci = NO_INSTANCE;
    if (!parse_u64(key + strlen("event."), &ev->n) || ev->n == 0)
        return 0;
    int got = sscanf(val, "%llu:%llu:%llu:%llu%c", &gpu, &xid, &gi, &ci, &tail);
    if (got != 2 && got != 4)
        return 0;
    if (gpu >= FAKE_MAX_GPUS || gi > 0xFFFFFFFFull || ci > 0xFFFFFFFFull)
        return 0;
    ev->gpu = (unsigned int)gpu;
    ev->xid = xid;
    ev->gi = (unsigned int)gi;
    ev->ci = (unsigned int)ci;
    return 1;
}

/* Read and parse the fixture; on any I/O failure the store is left empty. */
static void fx_load(const char *path)
{
    FILE *f;
    size_t cap = 0, len = 0, lines = 0;

    fx_clear();
    g_fx.have_path = 1;
    g_fx.readable = 0;
    memset(&g_fx.st, 0, sizeof g_fx.st);
    g_fixture_loads++;
    if (strlen(path) >= sizeof g_fx.path) {
        g_fx.path[0] = '\0';
        warnx_("%s%s: fixture path too long", "", "");
        return;
    }
    strcpy(g_fx.path, path);

    f = fopen(path, "rb");
    if (f == NULL || fstat(fileno(f), &g_fx.st) != 0) {
        warnx_("cannot read fixture %s (%s); every call behaves as for an empty fixture", path,
               strerror(errno));
        if (f != NULL)
            fclose(f);
        memset(&g_fx.st, 0, sizeof g_fx.st);
        return;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 8192;
            char *nb = realloc(g_fx.buf, ncap);
            if (nb == NULL) {
                fclose(f);
                fx_clear();
                return;
            }
            g_fx.buf = nb;
            cap = ncap;
        }
        size_t got = fread(g_fx.buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0)
            break;
    }
    fclose(f);
    if (g_fx.buf == NULL)
        return;
    g_fx.buf[len] = '\0';
    g_fx.readable = 1;

    for (size_t i = 0; i < len; i++)
        lines += g_fx.buf[i] == '\n';
    lines += 1;
    g_fx.ent = calloc(lines, sizeof *g_fx.ent);
    g_fx.ev = calloc(lines, sizeof *g_fx.ev);
    if (g_fx.ent == NULL || g_fx.ev == NULL) {
        fx_clear();
        g_fx.readable = 0;
        return;
    }

    char *p = g_fx.buf;
    size_t lineno = 0;
    while (p != NULL && *p != '\0') {
        char *nl = strchr(p, '\n');
        if (nl != NULL)
            *nl = '\0';
        lineno++;
        char *key = p;
        p = nl ? nl + 1 : NULL;

        while (is_space(*key))
            key++;
        if (*key == '\0' || *key == '#')
            continue;
        char *val = key;
        while (*val != '\0' && !is_space(*val))
            val++;
        if (*val != '\0')
            *val++ = '\0';
        while (is_space(*val))
            val++;
        char *end = val + strlen(val);
        while (end > val && is_space(end[-1]))
            *--end = '\0';

        g_fx.ent[g_fx.nent].key = key;
        g_fx.ent[g_fx.nent].val = val;
        g_fx.ent[g_fx.nent].line = lineno;
        g_fx.nent++;
    }

    /* Sort by key, later lines last; then keep only the last line of each key. */
    qsort(g_fx.ent, g_fx.nent, sizeof *g_fx.ent, cmp_entry);
    size_t out = 0;
    for (size_t i = 0; i < g_fx.nent; i++) {
        if (out > 0 && strcmp(g_fx.ent[out - 1].key, g_fx.ent[i].key) == 0)
            g_fx.ent[out - 1] = g_fx.ent[i];
        else
            g_fx.ent[out++] = g_fx.ent[i];
    }
    g_fx.nent = out;

    for (size_t i = 0; i < g_fx.nent; i++) {
        const struct fx_entry *e = &g_fx.ent[i];
        if (strncmp(e->key, "event.", 6) != 0)
            continue;
        if (parse_event(e->key, e->val, &g_fx.ev[g_fx.nev]))
            g_fx.nev++;
        else
            warnx_("ignoring malformed event line '%s %s' (want event.<n> <gpu>:<xid>[:<gi>:<ci>])",
                   e->key, e->val);
    }
    qsort(g_fx.ev, g_fx.nev, sizeof *g_fx.ev, cmp_event);
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Called with g_lock held at the start of every call: one getenv + one stat. */
static void fx_refresh(void)
{
    struct stat st;
    const char *path = getenv(FAKE_ENV_VAR);

    if (path == NULL || *path == '\0') {
        if (g_fx.have_path || g_fx.nent != 0) {
            fx_clear();
            g_fx.have_path = 0;
            g_fx.readable = 0;
            g_fx.path[0] = '\0';
        }
        return;
    }
    int ok = stat(path, &st) == 0;
    if (g_fx.have_path && strcmp(path, g_fx.path) == 0) {
        if (!ok && !g_fx.readable)
            return; /* still missing: warned already */
        if (ok && g_fx.readable && same_file(&st, &g_fx.st))
            return;
    }
    fx_load(path);
}

enum fx_kind { FX_ABSENT, FX_VALUE, FX_ERROR };

/* Look a key up. FX_VALUE: *val set. FX_ERROR: *err set ("ERR:<n>", or UNKNOWN if malformed). */
static enum fx_kind fx_find(const char *key, const char **val, nvmlReturn_t *err)
{
    size_t lo = 0, hi = g_fx.nent;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, g_fx.ent[mid].key);
        if (c == 0) {
            const char *v = g_fx.ent[mid].val;
            if (strncmp(v, "ERR:", 4) == 0) {
                unsigned long long code;
                if (!parse_u64(v + 4, &code) || code == 0 || code > 0xFFFFFFFFull) {
                    warnx_("malformed error value '%s %s'", key, v);
                    *err = NVML_ERROR_UNKNOWN;
                } else {
                    *err = (nvmlReturn_t)code;
                }
                return FX_ERROR;
            }
            *val = v;
            return FX_VALUE;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return FX_ABSENT;
}

static nvmlReturn_t fx_str(const char *key, const char **out)
{
    nvmlReturn_t err = NVML_ERROR_UNKNOWN;
    switch (fx_find(key, out, &err)) {
    case FX_VALUE:
        return NVML_SUCCESS;
    case FX_ERROR:
        return err;
    case FX_ABSENT:
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

static nvmlReturn_t bad_value(const char *key, const char *val)
{
    warnx_("malformed value '%s %s'", key, val);
    return NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t fx_u64(const char *key, unsigned long long *out)
{
    const char *v;
    nvmlReturn_t r = fx_str(key, &v);
    if (r != NVML_SUCCESS)
        return r;
    return parse_u64(v, out) ? NVML_SUCCESS : bad_value(key, v);
}

static nvmlReturn_t fx_u32(const char *key, unsigned int *out)
{
    unsigned long long v;
    nvmlReturn_t r = fx_u64(key, &v);
    if (r != NVML_SUCCESS)
        return r;
    if (v > 0xFFFFFFFFull)
        return bad_value(key, "(larger than 32 bits)");
    *out = (unsigned int)v;
    return NVML_SUCCESS;
}

static nvmlReturn_t fx_f64(const char *key, double *out)
{
    const char *v;
    nvmlReturn_t r = fx_str(key, &v);
    if (r != NVML_SUCCESS)
        return r;
    return parse_f64(v, out) ? NVML_SUCCESS : bad_value(key, v);
}

/* Is the key in the fixture at all (with a value or an ERR:<n>)? */
static int fx_present(const char *key)
{
    const char *v;
    nvmlReturn_t err;
    return fx_find(key, &v, &err) != FX_ABSENT;
}

/* For keys with a default: absent -> dflt; "ERR:<n>" (even ERR:3) -> n. */
static nvmlReturn_t fx_u64_or(const char *key, unsigned long long dflt, unsigned long long *out)
{
    if (!fx_present(key)) {
        *out = dflt;
        return NVML_SUCCESS;
    }
    return fx_u64(key, out);
}

static nvmlReturn_t fx_u32_or(const char *key, unsigned int dflt, unsigned int *out)
{
    if (!fx_present(key)) {
        *out = dflt;
        return NVML_SUCCESS;
    }
    return fx_u32(key, out);
}

/* ======================================================================================== */
/* Handles and lifecycle                                                                    */
/* ======================================================================================== */

struct nvmlDevice_st {
    unsigned int magic;
    int gpu;          /* GPU index */
    int mig;          /* MIG slot under the GPU, or -1 for the GPU itself */
    char prefix[32];  /* fixture key prefix: "<i>." or "<i>.mig.<j>." */
};

struct nvmlGpmSample_st {
    unsigned int magic;
    int taken;        /* filled by nvmlGpmSampleGet / nvmlGpmMigSampleGet */
    int gpu;
    int mig;          /* -1: whole GPU */
    struct nvmlGpmSample_st *next;
};

struct nvmlEventSet_st {
    unsigned int magic;
    unsigned long long registered[FAKE_MAX_GPUS]; /* event-type mask per GPU index */
    unsigned long long delivered;                 /* highest event.<n> delivered */
    struct nvmlEventSet_st *next;
};

static struct nvmlDevice_st g_gpu[FAKE_MAX_GPUS];
static struct nvmlDevice_st g_mig[FAKE_MAX_GPUS][FAKE_MAX_MIG];
static struct nvmlGpmSample_st *g_samples;
static int g_samples_live;
static struct nvmlEventSet_st *g_sets;
static int g_sets_live;

__attribute__((constructor)) static void fake_nvml_setup_handles(void)
{
    for (int i = 0; i < FAKE_MAX_GPUS; i++) {
        g_gpu[i].magic = DEVICE_MAGIC;
        g_gpu[i].gpu = i;
        g_gpu[i].mig = -1;
        snprintf(g_gpu[i].prefix, sizeof g_gpu[i].prefix, "%d.", i);
        for (int j = 0; j < FAKE_MAX_MIG; j++) {
            g_mig[i][j].magic = DEVICE_MAGIC;
            g_mig[i][j].gpu = i;
            g_mig[i][j].mig = j;
            snprintf(g_mig[i][j].prefix, sizeof g_mig[i][j].prefix, "%d.mig.%d.", i, j);
        }
    }
}

/* Lock, refresh the fixture, check initialisation. Always pair with leave(). */
static nvmlReturn_t enter(void)
{
    pthread_mutex_lock(&g_lock);
    fx_refresh();
    return g_refcount > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

static nvmlReturn_t leave(nvmlReturn_t ret)
{
    pthread_mutex_unlock(&g_lock);
    return ret;
}

static unsigned int gpu_count(void)
{
    unsigned int n;
    if (fx_u32("count", &n) != NVML_SUCCESS)
        return 0;
    return n > FAKE_MAX_GPUS ? FAKE_MAX_GPUS : n;
}

static unsigned int mig_count(int gpu)
{
    char key[FAKE_KEY_MAX];
    unsigned int n;
    snprintf(key, sizeof key, "%d.mig.count", gpu);
    if (fx_u32(key, &n) != NVML_SUCCESS)
        return 0;
    return n > FAKE_MAX_MIG ? FAKE_MAX_MIG : n;
}

static int mig_slot_present(int gpu, int mig)
{
    char key[FAKE_KEY_MAX];
    const char *v;
    nvmlReturn_t err;
    snprintf(key, sizeof key, "%d.mig.%d.uuid", gpu, mig);
    return fx_find(key, &v, &err) == FX_VALUE;
}

static struct nvmlDevice_st *device_of(nvmlDevice_t h)
{
    uintptr_t p = (uintptr_t)h;
    uintptr_t g0 = (uintptr_t)g_gpu, g1 = g0 + sizeof g_gpu;
    uintptr_t m0 = (uintptr_t)g_mig, m1 = m0 + sizeof g_mig;
    if (p >= g0 && p < g1 && (p - g0) % sizeof(struct nvmlDevice_st) == 0)
        return h;
    if (p >= m0 && p < m1 && (p - m0) % sizeof(struct nvmlDevice_st) == 0)
        return h;
    return NULL;
}

static int is_lost(int gpu)
{
    char key[FAKE_KEY_MAX];
    unsigned long long v;
    snprintf(key, sizeof key, "%d.lost", gpu);
    return fx_u64(key, &v) == NVML_SUCCESS && v != 0;
}

/* Validate a handle (with the lock held): exists, in range, present, GPU not lost. */
static nvmlReturn_t check_device(nvmlDevice_t h, struct nvmlDevice_st **out)
{
    struct nvmlDevice_st *d = device_of(h);
    if (d == NULL || d->magic != DEVICE_MAGIC)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned int)d->gpu >= gpu_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->mig >= 0 && ((unsigned int)d->mig >= mig_count(d->gpu) ||
                        !mig_slot_present(d->gpu, d->mig)))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_lost(d->gpu))
        return NVML_ERROR_GPU_IS_LOST;
    *out = d;
    return NVML_SUCCESS;
}

static nvmlReturn_t enter_device(nvmlDevice_t h, struct nvmlDevice_st **out)
{
    nvmlReturn_t r = enter();
    if (r != NVML_SUCCESS)
        return r;
    return check_device(h, out);
}

static void device_key(const struct nvmlDevice_st *d, const char *suffix, char *key)
{
    snprintf(key, FAKE_KEY_MAX, "%s%s", d->prefix, suffix);
}

static nvmlReturn_t dev_u64(const struct nvmlDevice_st *d, const char *suffix,
                            unsigned long long *out)
{
    char key[FAKE_KEY_MAX];
    device_key(d, suffix, key);
    return fx_u64(key, out);
}

static nvmlReturn_t dev_u32(const struct nvmlDevice_st *d, const char *suffix, unsigned int *out)
{
    char key[FAKE_KEY_MAX];
    device_key(d, suffix, key);
    return fx_u32(key, out);
}

static nvmlReturn_t dev_str(const struct nvmlDevice_st *d, const char *suffix, const char **out)
{
    char key[FAKE_KEY_MAX];
    device_key(d, suffix, key);
    return fx_str(key, out);
}

/* Copy a NUL-terminated string into a caller buffer of `length` bytes, as NVML does. */
static nvmlReturn_t copy_string(const char *s, char *buf, unsigned int length)
{
    size_t n = strlen(s);
    if (buf == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

/* Common shape: device handle + one unsigned fixture key. */
static nvmlReturn_t device_u32_call(nvmlDevice_t device, const char *suffix, unsigned int *out)
{
    struct nvmlDevice_st *d;
    unsigned int v;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && out == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = dev_u32(d, suffix, &v)) == NVML_SUCCESS)
        *out = v;
    return leave(r);
}

static nvmlReturn_t device_u64_call(nvmlDevice_t device, const char *suffix,
                                    unsigned long long *out)
{
    struct nvmlDevice_st *d;
    unsigned long long v;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && out == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = dev_u64(d, suffix, &v)) == NVML_SUCCESS)
        *out = v;
    return leave(r);
}

static nvmlReturn_t device_string_call(nvmlDevice_t device, const char *suffix, char *buf,
                                       unsigned int length)
{
    struct nvmlDevice_st *d;
    const char *v;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && (r = dev_str(d, suffix, &v)) == NVML_SUCCESS)
        r = copy_string(v, buf, length);
    return leave(r);
}

static nvmlReturn_t system_string_call(const char *key, char *buf, unsigned int length)
{
    const char *v;
    nvmlReturn_t r = enter();
    if (r == NVML_SUCCESS && (r = fx_str(key, &v)) == NVML_SUCCESS)
        r = copy_string(v, buf, length);
    return leave(r);
}

static unsigned long long now_usec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000ull;
}

/* ---- init / shutdown / errors ---------------------------------------------------------- */

static nvmlReturn_t do_init(void)
{
    const char *v;
    nvmlReturn_t err = NVML_SUCCESS;
    nvmlReturn_t r = NVML_SUCCESS;

    pthread_mutex_lock(&g_lock);
    fx_refresh();
    if (g_fx.have_path && !g_fx.readable)
        r = NVML_ERROR_UNKNOWN; /* FAKE_NVML_FIXTURE names a file that cannot be read */
    else if (fx_find("init", &v, &err) == FX_ERROR)
        r = err;
    if (r == NVML_SUCCESS) {
        g_refcount++;
        g_init_calls++;
    }
    return leave(r);
}

nvmlReturn_t nvmlInit(void)
{
    return do_init();
}

nvmlReturn_t nvmlInit_v2(void)
{
    return do_init();
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init();
}

nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        return leave(NVML_ERROR_UNINITIALIZED);
    g_refcount--;
    g_shutdown_calls++;
    return leave(NVML_SUCCESS);
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

/* ---- system ------------------------------------------------------------------------------ */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return system_string_call("driver_version", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return system_string_call("nvml_version", version, length);
}

static nvmlReturn_t cuda_version_call(int *out)
{
    const char *v;
    long long n = 0;
    nvmlReturn_t r = enter();
    if (r == NVML_SUCCESS && out == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = fx_str("cuda_version", &v)) == NVML_SUCCESS) {
        if (parse_i64(v, &n) && n >= 0 && n <= 0x7FFFFFFF)
            *out = (int)n;
        else
            r = bad_value("cuda_version", v);
    }
    return leave(r);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return cuda_version_call(cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return cuda_version_call(cudaDriverVersion);
}

/* ---- enumeration ------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    unsigned int n;
    nvmlReturn_t r = enter();
    if (r == NVML_SUCCESS && deviceCount == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        r = fx_u32_or("count", 0, &n); /* absent: no GPUs */
        if (r == NVML_SUCCESS)
            *deviceCount = n > FAKE_MAX_GPUS ? FAKE_MAX_GPUS : n;
    }
    return leave(r);
}

/* Succeeds even for a lost GPU: it fell off the bus after enumeration. */
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t r = enter();
    if (r == NVML_SUCCESS && (device == NULL || index >= gpu_count()))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *device = &g_gpu[index];
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && index == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && d->mig >= 0)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS)
        *index = (unsigned int)d->gpu;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    return device_string_call(device, "name", name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    return device_string_call(device, "uuid", uuid, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return device_u32_call(device, "minor", minorNumber);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct nvmlDevice_st *d;
    const char *v;
    unsigned int domain, bus, dev, fn, id = 0, subsys = 0;
    char tail;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && pci == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = dev_str(d, "pci_bus_id", &v)) == NVML_SUCCESS) {
        if (sscanf(v, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4 || bus > 0xff ||
            dev > 0x1f || fn > 7) {
            r = bad_value("pci_bus_id", v);
        }
    }
    if (r == NVML_SUCCESS) {
        char key[FAKE_KEY_MAX];
        device_key(d, "pci_device_id", key);
        r = fx_u32_or(key, 0, &id);
        device_key(d, "pci_subsystem_id", key);
        if (r == NVML_SUCCESS)
            r = fx_u32_or(key, 0, &subsys);
    }
    if (r == NVML_SUCCESS) {
        memset(pci, 0, sizeof *pci);
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
        pci->pciDeviceId = id;
        pci->pciSubSystemId = subsys;
        snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", domain, bus, dev, fn);
        snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X",
                 domain & 0xFFFFu, bus, dev, fn);
    }
    return leave(r);
}

/* ---- utilisation, memory, power, temperature, clocks --------------------------------------- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    struct nvmlDevice_st *d;
    unsigned int gpu = 0, mem = 0;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && utilization == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        r = dev_u32(d, "util.gpu", &gpu);
    if (r == NVML_SUCCESS)
        r = dev_u32(d, "util.memory", &mem);
    if (r == NVML_SUCCESS) {
        utilization->gpu = gpu;
        utilization->memory = mem;
    }
    return leave(r);
}

/* total is required; used/reserved default to 0; free defaults to total - used - reserved. */
static nvmlReturn_t read_memory(const struct nvmlDevice_st *d, unsigned long long *total,
                                unsigned long long *reserved, unsigned long long *free_,
                                unsigned long long *used)
{
    char key[FAKE_KEY_MAX];
    nvmlReturn_t r = dev_u64(d, "memory.total", total);
    if (r != NVML_SUCCESS)
        return r;
    device_key(d, "memory.used", key);
    if ((r = fx_u64_or(key, 0, used)) != NVML_SUCCESS)
        return r;
    device_key(d, "memory.reserved", key);
    if ((r = fx_u64_or(key, 0, reserved)) != NVML_SUCCESS)
        return r;
    device_key(d, "memory.free", key);
    if (fx_present(key))
        return fx_u64(key, free_);
    unsigned long long taken = *used + *reserved;
    *free_ = taken >= *total ? 0 : *total - taken;
    return NVML_SUCCESS;
}

/* v1 semantics: used = reserved + allocated (nvml.h nvmlMemory_t). */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct nvmlDevice_st *d;
    unsigned long long total, reserved, free_, used;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && memory == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = read_memory(d, &total, &reserved, &free_, &used)) == NVML_SUCCESS) {
        memory->total = total;
        memory->free = free_;
        memory->used = used + reserved;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct nvmlDevice_st *d;
    unsigned long long total, reserved, free_, used;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && memory == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && memory->version != nvmlMemory_v2)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS && (r = read_memory(d, &total, &reserved, &free_, &used)) == NVML_SUCCESS) {
        memory->total = total;
        memory->reserved = reserved;
        memory->free = free_;
        memory->used = used;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return device_u32_call(device, "power_mw", power);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return device_u32_call(device, "power_limit_mw", limit);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    return device_u64_call(device, "energy_mj", energy);
}

static const char *temperature_key(unsigned int sensor)
{
    switch (sensor) {
    case NVML_TEMPERATURE_GPU: return "temp.gpu";
    case NVML_TEMPERATURE_GPU_MAX: return "temp.gpu_max";
    default: return NULL;
    }
}

static nvmlReturn_t read_temperature(const struct nvmlDevice_st *d, unsigned int sensor, int *out)
{
    const char *suffix = temperature_key(sensor);
    const char *v;
    long long t;
    nvmlReturn_t r;
    if (suffix == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((r = dev_str(d, suffix, &v)) != NVML_SUCCESS)
        return r;
    if (!parse_i64(v, &t) || t < -273 || t > 100000)
        return bad_value(suffix, v);
    *out = (int)t;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    struct nvmlDevice_st *d;
    int t;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && temp == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = read_temperature(d, (unsigned int)sensorType, &t)) == NVML_SUCCESS)
        *temp = t < 0 ? 0u : (unsigned int)t;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *temperature)
{
    struct nvmlDevice_st *d;
    int t;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && temperature == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && temperature->version != nvmlTemperature_v1)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS &&
        (r = read_temperature(d, (unsigned int)temperature->sensorType, &t)) == NVML_SUCCESS)
        temperature->temperature = t;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int *clock)
{
    static const char *const keys[NVML_CLOCK_COUNT] = {
        [NVML_CLOCK_GRAPHICS] = "clock.graphics",
        [NVML_CLOCK_SM] = "clock.sm",
        [NVML_CLOCK_MEM] = "clock.mem",
        [NVML_CLOCK_VIDEO] = "clock.video",
    };
    if ((unsigned int)type >= NVML_CLOCK_COUNT) {
        struct nvmlDevice_st *d;
        nvmlReturn_t r = enter_device(device, &d);
        return leave(r == NVML_SUCCESS ? NVML_ERROR_INVALID_ARGUMENT : r);
    }
    return device_u32_call(device, keys[type], clock);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *clocksEventReasons)
{
    return device_u64_call(device, "clocks_event_reasons", clocksEventReasons);
}

nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device,
                                          nvmlPerfPolicyType_t perfPolicyType,
                                          nvmlViolationTime_t *violTime)
{
    struct nvmlDevice_st *d;
    char suffix[32];
    unsigned long long ns;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS &&
        (violTime == NULL || (unsigned int)perfPolicyType >= NVML_PERF_POLICY_COUNT))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        snprintf(suffix, sizeof suffix, "violation.%u", (unsigned int)perfPolicyType);
        if ((r = dev_u64(d, suffix, &ns)) == NVML_SUCCESS) {
            violTime->referenceTime = now_usec();
            violTime->violationTime = ns;
        }
    }
    return leave(r);
}

/* ---- errors and health ------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts)
{
    struct nvmlDevice_st *d;
    unsigned long long v;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS &&
        (eccCounts == NULL || (unsigned int)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
         (unsigned int)counterType >= NVML_ECC_COUNTER_TYPE_COUNT))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        const char *kind = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED ? "corrected"
                                                                         : "uncorrected";
        char suffix[48];
        snprintf(suffix, sizeof suffix, "ecc.%s%s",
                 counterType == NVML_AGGREGATE_ECC ? "aggregate." : "", kind);
        if ((r = dev_u64(d, suffix, &v)) == NVML_SUCCESS)
            *eccCounts = v;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred)
{
    struct nvmlDevice_st *d;
    const char *v;
    unsigned int a, b, c, e;
    char tail;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS &&
        (corrRows == NULL || uncRows == NULL || isPending == NULL || failureOccurred == NULL))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = dev_str(d, "remapped_rows", &v)) == NVML_SUCCESS) {
        if (sscanf(v, "%u,%u,%u,%u%c", &a, &b, &c, &e, &tail) == 4) {
            *corrRows = a;
            *uncRows = b;
            *isPending = c;
            *failureOccurred = e;
        } else {
            r = bad_value("remapped_rows", v);
        }
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    return device_u32_call(device, "pcie_replay", value);
}

/* ---- field values ----------------------------------------------------------------------- */

/* Value syntax: "u:<n>" unsigned long long, "i:<n>" signed long long, "d:<x>" double,
 * plain number = unsigned long long.  Absent: NOT_SUPPORTED for that entry. */
static void fill_field(const struct nvmlDevice_st *d, nvmlFieldValue_t *fv,
                       unsigned long long ts)
{
    char key[FAKE_KEY_MAX];
    const char *v = NULL;
    nvmlReturn_t err = NVML_ERROR_UNKNOWN;
    enum fx_kind kind;

    fv->timestamp = (long long)ts;
    fv->latencyUsec = 0;
    snprintf(key, sizeof key, "%sfield.%u.%u", d->prefix, fv->fieldId, fv->scopeId);
    kind = fx_find(key, &v, &err);
    if (kind == FX_ABSENT && fv->scopeId == 0) {
        snprintf(key, sizeof key, "%sfield.%u", d->prefix, fv->fieldId);
        kind = fx_find(key, &v, &err);
    }
    if (kind == FX_ABSENT) {
        fv->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        return;
    }
    if (kind == FX_ERROR) {
        fv->nvmlReturn = err;
        return;
    }
    memset(&fv->value, 0, sizeof fv->value);
    if (strncmp(v, "d:", 2) == 0) {
        fv->valueType = NVML_VALUE_TYPE_DOUBLE;
        fv->nvmlReturn = parse_f64(v + 2, &fv->value.dVal) ? NVML_SUCCESS : bad_value(key, v);
    } else if (strncmp(v, "i:", 2) == 0) {
        long long s;
        fv->valueType = NVML_VALUE_TYPE_SIGNED_LONG_LONG;
        fv->nvmlReturn = parse_i64(v + 2, &s) ? NVML_SUCCESS : bad_value(key, v);
        fv->value.sllVal = s;
    } else {
        const char *num = strncmp(v, "u:", 2) == 0 ? v + 2 : v;
        fv->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        fv->nvmlReturn = parse_u64(num, &fv->value.ullVal) ? NVML_SUCCESS : bad_value(key, v);
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && (valuesCount < 0 || (valuesCount > 0 && values == NULL)))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        unsigned long long ts = now_usec();
        for (int k = 0; k < valuesCount; k++)
            fill_field(d, &values[k], ts);
    }
    return leave(r);
}

/* ---- processes ------------------------------------------------------------------------ */

/* One "pid:usedBytes[:gi:ci]" item (usedBytes may be "na"); returns chars consumed or 0. */
static int parse_process(const char *s, nvmlProcessInfo_t *out)
{
    unsigned long long pid, gi = NO_INSTANCE, ci = NO_INSTANCE, used;
    char usedbuf[32];
    int n = 0, m = 0;
    if (sscanf(s, " %llu:%31[0-9a-zA-Z]%n", &pid, usedbuf, &n) != 2)
        return 0;
    if (sscanf(s + n, ":%llu:%llu%n", &gi, &ci, &m) == 2)
        n += m;
    if (strcmp(usedbuf, "na") == 0 || strcmp(usedbuf, "NA") == 0)
        used = (unsigned long long)NVML_VALUE_NOT_AVAILABLE;
    else if (!parse_u64(usedbuf, &used))
        return 0;
    if (pid > 0xFFFFFFFFull || gi > 0xFFFFFFFFull || ci > 0xFFFFFFFFull)
        return 0;
    while (is_space(s[n]))
        n++;
    out->pid = (unsigned int)pid;
    out->usedGpuMemory = used;
    out->gpuInstanceId = (unsigned int)gi;
    out->computeInstanceId = (unsigned int)ci;
    return n;
}

/* Parse the list; with out == NULL only count. Returns -1 if malformed. */
static long parse_processes(const char *v, nvmlProcessInfo_t *out, unsigned int cap)
{
    long n = 0;
    nvmlProcessInfo_t tmp;
    const char *p = v;
    while (is_space(*p))
        p++;
    if (*p == '\0')
        return 0;
    for (;;) {
        int used = parse_process(p, &tmp);
        if (used == 0)
            return -1;
        if (out != NULL && (unsigned long)n < cap)
            out[n] = tmp;
        n++;
        p += used;
        if (*p == '\0')
            return n;
        if (*p != ',')
            return -1;
        p++;
    }
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    struct nvmlDevice_st *d;
    const char *v;
    long n = 0;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && infoCount == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (r = dev_str(d, "procs", &v)) == NVML_SUCCESS) {
        n = parse_processes(v, NULL, 0);
        if (n < 0)
            r = bad_value("procs", v);
    }
    if (r == NVML_SUCCESS) {
        if (*infoCount < (unsigned long)n) {
            *infoCount = (unsigned int)n;
            r = NVML_ERROR_INSUFFICIENT_SIZE;
        } else if (n > 0 && infos == NULL) {
            r = NVML_ERROR_INVALID_ARGUMENT;
        } else {
            parse_processes(v, infos, *infoCount);
            *infoCount = (unsigned int)n;
        }
    }
    return leave(r);
}

/* ---- MIG ----------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    struct nvmlDevice_st *d;
    const char *v;
    unsigned int cur, pend;
    char tail;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && (currentMode == NULL || pendingMode == NULL))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && d->mig >= 0)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS && (r = dev_str(d, "mig.mode", &v)) == NVML_SUCCESS) {
        int got = sscanf(v, "%u,%u%c", &cur, &pend, &tail);
        if (got == 1)
            pend = cur;
        if ((got == 1 || got == 2) && cur <= 1 && pend <= 1) {
            *currentMode = cur;
            *pendingMode = pend;
        } else {
            r = bad_value("mig.mode", v);
        }
    }
    return leave(r);
}

/* nvml.h: "Returns zero if MIG is not supported or enabled" -- so an absent key is 0. */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct nvmlDevice_st *d;
    unsigned int n = 0;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && count == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && d->mig >= 0)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        char key[FAKE_KEY_MAX];
        device_key(d, "mig.count", key);
        r = fx_u32_or(key, 0, &n);
        if (r == NVML_SUCCESS)
            *count = n > FAKE_MAX_MIG ? FAKE_MAX_MIG : n;
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    struct nvmlDevice_st *d;
    char suffix[48];
    const char *v;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && (migDevice == NULL || d->mig >= 0 || index >= mig_count(d->gpu)))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        char key[FAKE_KEY_MAX];
        snprintf(suffix, sizeof suffix, "mig.%u.uuid", index);
        device_key(d, suffix, key);
        r = fx_present(key) ? fx_str(key, &v) : NVML_ERROR_NOT_FOUND; /* absent: empty slot */
    }
    if (r == NVML_SUCCESS)
        *migDevice = &g_mig[d->gpu][index];
    return leave(r);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && isMigDevice == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *isMigDevice = d->mig >= 0;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter_device(device, &d);
    unsigned int v;
    if (r == NVML_SUCCESS && id == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && d->mig < 0)
        r = NVML_ERROR_NOT_SUPPORTED; /* a whole-GPU handle has no GPU instance */
    if (r == NVML_SUCCESS && (r = dev_u32(d, "gi", &v)) == NVML_SUCCESS)
        *id = v;
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter_device(migDevice, &d);
    if (r == NVML_SUCCESS && (device == NULL || d->mig < 0))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *device = &g_gpu[d->gpu];
    return leave(r);
}

/* ---- GPM ----------------------------------------------------------------------------- */

static int gpm_supported(int gpu, nvmlReturn_t *err)
{
    char key[FAKE_KEY_MAX];
    unsigned long long v;
    snprintf(key, sizeof key, "%d.gpm.supported", gpu);
    /* absent: like a pre-Hopper GPU, isSupportedDevice 0 without an error */
    *err = fx_u64_or(key, 0, &v);
    return *err == NVML_SUCCESS && v != 0;
}

static struct nvmlGpmSample_st *sample_of(nvmlGpmSample_t s)
{
    for (struct nvmlGpmSample_st *p = g_samples; p != NULL; p = p->next)
        if (p == s)
            return p;
    return NULL;
}

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t err;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && gpmSupport == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && gpmSupport->version != NVML_GPM_SUPPORT_VERSION)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS) {
        int ok = gpm_supported(d->gpu, &err);
        r = err;
        if (r == NVML_SUCCESS)
            gpmSupport->isSupportedDevice = (unsigned int)ok;
    }
    return leave(r);
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    nvmlReturn_t r = enter();
    if (r == NVML_SUCCESS && gpmSample == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        struct nvmlGpmSample_st *s = calloc(1, sizeof *s);
        if (s == NULL) {
            r = NVML_ERROR_MEMORY;
        } else {
            s->magic = SAMPLE_MAGIC;
            s->gpu = -1;
            s->mig = -1;
            s->next = g_samples;
            g_samples = s;
            g_samples_live++;
            *gpmSample = s;
        }
    }
    return leave(r);
}

/* Does not require nvmlInit: a sample can be freed after shutdown. Unknown pointer (never
 * allocated, or already freed) -> INVALID_ARGUMENT and fake_nvml_gpm_bad_frees() counts it. */
nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    nvmlReturn_t r = NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_lock);
    for (struct nvmlGpmSample_st **pp = &g_samples; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == gpmSample) {
            struct nvmlGpmSample_st *s = *pp;
            *pp = s->next;
            s->magic = 0;
            free(s);
            g_samples_live--;
            r = NVML_SUCCESS;
            break;
        }
    }
    if (r != NVML_SUCCESS)
        g_gpm_bad_frees++;
    return leave(r);
}

static nvmlReturn_t take_sample(int gpu, int mig, nvmlGpmSample_t gpmSample)
{
    nvmlReturn_t err;
    struct nvmlGpmSample_st *s = sample_of(gpmSample);
    if (s == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!gpm_supported(gpu, &err))
        return err != NVML_SUCCESS ? err : NVML_ERROR_NOT_SUPPORTED;
    s->taken = 1;
    s->gpu = gpu;
    s->mig = mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS)
        r = take_sample(d->gpu, d->mig, gpmSample);
    return leave(r);
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t gpmSample)
{
    struct nvmlDevice_st *d;
    int found = -1;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && d->mig >= 0)
        r = NVML_ERROR_INVALID_ARGUMENT; /* wants the parent GPU handle */
    if (r == NVML_SUCCESS) {
        unsigned int n = mig_count(d->gpu);
        for (unsigned int j = 0; j < n && found < 0; j++) {
            char key[FAKE_KEY_MAX];
            unsigned int gi;
            snprintf(key, sizeof key, "%d.mig.%u.gi", d->gpu, j);
            if (mig_slot_present(d->gpu, (int)j) && fx_u32(key, &gi) == NVML_SUCCESS &&
                gi == gpuInstanceId)
                found = (int)j;
        }
        r = found < 0 ? NVML_ERROR_NOT_FOUND : take_sample(d->gpu, found, gpmSample);
    }
    return leave(r);
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet)
{
    struct nvmlGpmSample_st *s1, *s2;
    struct nvmlDevice_st *d;
    nvmlReturn_t r = enter();
    if (r == NVML_SUCCESS && metricsGet == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        r = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (r == NVML_SUCCESS && metricsGet->numMetrics > NVML_GPM_METRIC_MAX)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        s1 = sample_of(metricsGet->sample1);
        s2 = sample_of(metricsGet->sample2);
        if (s1 == NULL || s2 == NULL || !s1->taken || !s2->taken || s1->gpu != s2->gpu ||
            s1->mig != s2->mig)
            r = NVML_ERROR_INVALID_ARGUMENT;
    }
    if (r == NVML_SUCCESS) {
        nvmlDevice_t h = s1->mig < 0 ? &g_gpu[s1->gpu] : &g_mig[s1->gpu][s1->mig];
        r = check_device(h, &d);
    }
    if (r == NVML_SUCCESS) {
        for (unsigned int k = 0; k < metricsGet->numMetrics; k++) {
            nvmlGpmMetric_t *m = &metricsGet->metrics[k];
            char suffix[32];
            double v = 0.0;
            m->metricInfo.shortName = NULL;
            m->metricInfo.longName = NULL;
            m->metricInfo.unit = NULL;
            if (m->metricId == 0 || m->metricId >= NVML_GPM_METRIC_MAX) {
                m->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
                continue;
            }
            snprintf(suffix, sizeof suffix, "gpm.%u", m->metricId);
            char key[FAKE_KEY_MAX];
            device_key(d, suffix, key);
            m->nvmlReturn = fx_f64(key, &v);
            m->value = m->nvmlReturn == NVML_SUCCESS ? v : 0.0;
        }
    }
    return leave(r);
}

/* ---- events ----------------------------------------------------------------------------- */

static struct nvmlEventSet_st *set_of(nvmlEventSet_t set)
{
    for (struct nvmlEventSet_st *p = g_sets; p != NULL; p = p->next)
        if (p == set && p->magic == EVSET_MAGIC)
            return p;
    return NULL;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    nvmlReturn_t r = enter();
    if (r == NVML_SUCCESS && set == NULL)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS) {
        struct nvmlEventSet_st *s = calloc(1, sizeof *s);
        if (s == NULL) {
            r = NVML_ERROR_MEMORY;
        } else {
            s->magic = EVSET_MAGIC;
            s->next = g_sets;
            g_sets = s;
            g_sets_live++;
            *set = s;
        }
    }
    return leave(r);
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    nvmlReturn_t r = enter();
    if (r != NVML_SUCCESS)
        return leave(r);
    r = NVML_ERROR_INVALID_ARGUMENT;
    for (struct nvmlEventSet_st **pp = &g_sets; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == set) {
            struct nvmlEventSet_st *s = *pp;
            *pp = s->next;
            s->magic = 0;
            free(s);
            g_sets_live--;
            r = NVML_SUCCESS;
            break;
        }
    }
    return leave(r);
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                              unsigned long long *eventTypes)
{
    return device_u64_call(device, "supported_events", eventTypes);
}

/* Registration needs every requested type in "<i>.supported_events" (absent = none);
 * "<i>.register_events ERR:<n>" refuses it with error n. */
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                      nvmlEventSet_t set)
{
    struct nvmlDevice_st *d;
    struct nvmlEventSet_st *s = NULL;
    const char *v;
    unsigned long long supported = 0;
    nvmlReturn_t r = enter_device(device, &d);
    if (r == NVML_SUCCESS && ((s = set_of(set)) == NULL || eventTypes == 0))
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && d->mig >= 0)
        r = NVML_ERROR_NOT_SUPPORTED;
    if (r == NVML_SUCCESS) {
        char key[FAKE_KEY_MAX];
        nvmlReturn_t refused = NVML_SUCCESS;
        device_key(d, "register_events", key);
        if (fx_find(key, &v, &refused) == FX_ERROR)
            r = refused; /* absent or a plain value: allowed */
    }
    if (r == NVML_SUCCESS) {
        char key[FAKE_KEY_MAX];
        device_key(d, "supported_events", key);
        r = fx_u64_or(key, 0, &supported); /* absent: no event types */
        if (r == NVML_SUCCESS && (eventTypes & ~supported) != 0)
            r = NVML_ERROR_NOT_SUPPORTED;
    }
    if (r == NVML_SUCCESS)
        s->registered[d->gpu] |= eventTypes;
    return leave(r);
}

/* The next undelivered fixture event for a device registered for XIDs on this set. */
static const struct fx_event *next_event(const struct nvmlEventSet_st *s)
{
    unsigned int n = gpu_count();
    for (size_t i = 0; i < g_fx.nev; i++) {
        const struct fx_event *e = &g_fx.ev[i];
        if (e->n <= s->delivered || e->gpu >= n)
            continue;
        if (s->registered[e->gpu] & nvmlEventTypeXidCriticalError)
            return e;
    }
    return NULL;
}

static struct timespec deadline_after_ms(unsigned int ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

/* Milliseconds left until `t`, 0 if passed. */
static long ms_until(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ns = (long long)(t->tv_sec - now.tv_sec) * 1000000000LL + (t->tv_nsec - now.tv_nsec);
    return ns <= 0 ? 0 : (long)((ns + 999999) / 1000000);
}

/* Delivers each "event.<n>" once per set; polls the fixture every FAKE_POLL_MS without
 * holding the lock; "event_wait ERR:<n>" makes it fail with n. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    struct timespec deadline = deadline_after_ms(timeoutms);
    nvmlReturn_t r = enter();
    const char *v;

    for (;;) {
        struct nvmlEventSet_st *s;
        const struct fx_event *e;
        if (r != NVML_SUCCESS)
            return leave(r);
        if (data == NULL || (s = set_of(set)) == NULL)
            return leave(NVML_ERROR_INVALID_ARGUMENT);
        if (fx_find("event_wait", &v, &r) == FX_ERROR)
            return leave(r);
        if ((e = next_event(s)) != NULL) {
            memset(data, 0, sizeof *data);
            data->device = &g_gpu[e->gpu];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = e->xid;
            data->gpuInstanceId = e->gi;
            data->computeInstanceId = e->ci;
            s->delivered = e->n;
            return leave(NVML_SUCCESS);
        }
        long left = ms_until(&deadline);
        if (left <= 0)
            return leave(NVML_ERROR_TIMEOUT);
        pthread_mutex_unlock(&g_lock);
        long step = left < FAKE_POLL_MS ? left : FAKE_POLL_MS;
        struct timespec nap = {step / 1000, (step % 1000) * 1000000L};
        nanosleep(&nap, NULL);
        r = enter(); /* re-checks init: nvmlShutdown while waiting -> UNINITIALIZED */
    }
}

/* ======================================================================================== */
/* Fake-only helpers                                                                        */
/* ======================================================================================== */

static int locked_int(const int *p)
{
    pthread_mutex_lock(&g_lock);
    int v = *p;
    pthread_mutex_unlock(&g_lock);
    return v;
}

int fake_nvml_init_count(void) { return locked_int(&g_refcount); }
int fake_nvml_init_calls(void) { return locked_int(&g_init_calls); }
int fake_nvml_shutdown_calls(void) { return locked_int(&g_shutdown_calls); }
int fake_nvml_gpm_samples_live(void) { return locked_int(&g_samples_live); }
int fake_nvml_gpm_bad_frees(void) { return locked_int(&g_gpm_bad_frees); }
int fake_nvml_event_sets_live(void) { return locked_int(&g_sets_live); }
int fake_nvml_fixture_loads(void) { return locked_int(&g_fixture_loads); }

/* Forget everything between tests: refcount, counters, live samples and event sets. */
void fake_nvml_reset(void)
{
    pthread_mutex_lock(&g_lock);
    while (g_samples != NULL) {
        struct nvmlGpmSample_st *s = g_samples;
        g_samples = s->next;
        s->magic = 0;
        free(s);
    }
    while (g_sets != NULL) {
        struct nvmlEventSet_st *s = g_sets;
        g_sets = s->next;
        s->magic = 0;
        free(s);
    }
    g_samples_live = g_sets_live = 0;
    g_refcount = g_init_calls = g_shutdown_calls = g_fixture_loads = g_gpm_bad_frees = 0;
    fx_clear();
    g_fx.have_path = 0;
    g_fx.readable = 0;
    g_fx.path[0] = '\0';
    pthread_mutex_unlock(&g_lock);
}

struct layout {
    const char *name;
    size_t value;
};

#define SIZE(t) {#t, sizeof(t)}
#define OFF(t, f) {#t "." #f, offsetof(t, f)}

static const struct layout g_sizes[] = {
    SIZE(nvmlDevice_t), SIZE(nvmlEventSet_t), SIZE(nvmlGpmSample_t), SIZE(nvmlReturn_t),
    SIZE(nvmlPciInfo_t), SIZE(nvmlUtilization_t), SIZE(nvmlMemory_t), SIZE(nvmlMemory_v2_t),
    SIZE(nvmlProcessInfo_t), SIZE(nvmlViolationTime_t), SIZE(nvmlEventData_t),
    SIZE(nvmlValue_t), SIZE(nvmlFieldValue_t), SIZE(nvmlGpmMetric_t), SIZE(nvmlGpmMetricsGet_t),
    SIZE(nvmlGpmSupport_t), SIZE(nvmlTemperature_t),
};

static const struct layout g_offsets[] = {
    OFF(nvmlPciInfo_t, busIdLegacy), OFF(nvmlPciInfo_t, domain), OFF(nvmlPciInfo_t, bus),
    OFF(nvmlPciInfo_t, device), OFF(nvmlPciInfo_t, pciDeviceId),
    OFF(nvmlPciInfo_t, pciSubSystemId), OFF(nvmlPciInfo_t, busId),
    OFF(nvmlMemory_v2_t, version), OFF(nvmlMemory_v2_t, total), OFF(nvmlMemory_v2_t, reserved),
    OFF(nvmlMemory_v2_t, free), OFF(nvmlMemory_v2_t, used),
    OFF(nvmlProcessInfo_t, pid), OFF(nvmlProcessInfo_t, usedGpuMemory),
    OFF(nvmlProcessInfo_t, gpuInstanceId), OFF(nvmlProcessInfo_t, computeInstanceId),
    OFF(nvmlViolationTime_t, referenceTime), OFF(nvmlViolationTime_t, violationTime),
    OFF(nvmlEventData_t, device), OFF(nvmlEventData_t, eventType),
    OFF(nvmlEventData_t, eventData), OFF(nvmlEventData_t, gpuInstanceId),
    OFF(nvmlEventData_t, computeInstanceId),
    OFF(nvmlFieldValue_t, fieldId), OFF(nvmlFieldValue_t, scopeId),
    OFF(nvmlFieldValue_t, timestamp), OFF(nvmlFieldValue_t, latencyUsec),
    OFF(nvmlFieldValue_t, valueType), OFF(nvmlFieldValue_t, nvmlReturn),
    OFF(nvmlFieldValue_t, value),
    OFF(nvmlGpmMetric_t, metricId), OFF(nvmlGpmMetric_t, nvmlReturn),
    OFF(nvmlGpmMetric_t, value), OFF(nvmlGpmMetric_t, metricInfo),
    OFF(nvmlGpmMetricsGet_t, version), OFF(nvmlGpmMetricsGet_t, numMetrics),
    OFF(nvmlGpmMetricsGet_t, sample1), OFF(nvmlGpmMetricsGet_t, sample2),
    OFF(nvmlGpmMetricsGet_t, metrics),
    OFF(nvmlGpmSupport_t, version), OFF(nvmlGpmSupport_t, isSupportedDevice),
    OFF(nvmlTemperature_t, version), OFF(nvmlTemperature_t, sensorType),
    OFF(nvmlTemperature_t, temperature),
    OFF(nvmlUtilization_t, gpu), OFF(nvmlUtilization_t, memory),
};

static long find_layout(const struct layout *table, size_t n, const char *name)
{
    if (name == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(table[i].name, name) == 0)
            return (long)table[i].value;
    return -1;
}

/* sizeof an nvml.h type by name ("nvmlFieldValue_t"), -1 if not in the table. */
long fake_nvml_sizeof(const char *type_name)
{
    return find_layout(g_sizes, sizeof g_sizes / sizeof g_sizes[0], type_name);
}

/* offsetof by "type.field" ("nvmlFieldValue_t.value"), -1 if not in the table. */
long fake_nvml_offsetof(const char *type_dot_field)
{
    return find_layout(g_offsets, sizeof g_offsets / sizeof g_offsets[0], type_dot_field);
}
