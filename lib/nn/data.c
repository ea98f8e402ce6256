/* data.c - data loading as PyTorch's torch.utils.data: a dataset of host arrays (TensorDataset),
 * kiln_random_split, a loader that yields device batches (DataLoader: batch size, shuffle each
 * epoch, drop_last), and kiln_randperm. Every order comes from Philox4x32-10 on the host (the
 * same function random.cl computes on devices), so a seed gives one order on every machine. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "dtype.h"
#include "ops/random.h"
#include "registry.h"
#include "scope.h"
#include "status.h"
#include "tensor.h"

/* ---- Philox and permutations ------------------------------------------------------------------
 */

/* Philox4x32-10 of counter (i lo, i hi, 0, 0) under key (seed lo, seed hi): random.cl's
 * kiln_philox_at, in C. */
static void philox_at(uint64_t i, uint64_t seed, uint32_t out[4])
{
    uint32_t c[4] = {(uint32_t)i, (uint32_t)(i >> 32), 0, 0};
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1, n3 = (uint32_t)p0;
        c[0] = n0, c[1] = n1, c[2] = n2, c[3] = n3;
    }
    memcpy(out, c, sizeof c);
}

/* perm[0..n-1] = a permutation of 0..n-1: Fisher-Yates from the end, position i (n-1 down to 1)
 * swapped with j = (the first two Philox words of counter i as a 64-bit number) mod (i + 1).
 * The modulo's bias is below 2^-32 for n < 2^32. kiln.h states this rule for kiln_randperm. */
static void permutation(int64_t n, uint64_t seed, int64_t *perm)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        uint32_t w[4];
        philox_at((uint64_t)i, seed, w);
        uint64_t r = (uint64_t)w[0] | (uint64_t)w[1] << 32;
        int64_t j = (int64_t)(r % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

kiln_status kiln_randperm(kiln_device *dev, int64_t n, uint64_t seed, kiln_tensor **out)
{
    const char *op = "kiln_randperm";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!dev)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: dev is NULL", op);
    if (n < 0 || (uint64_t)n > SIZE_MAX / sizeof(int64_t))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: n is %" PRId64 "; it must be >= 0 and fit in memory", op, n);
    int64_t *perm = kiln__malloc((size_t)(n ? n : 1) * sizeof *perm);
    if (!perm)
        return kiln__host_oom(op);
    permutation(n, kiln__seed_resolve(seed), perm);
    kiln_status s = kiln_tensor_from_host(dev, KILN_I64, 1, &n, perm, out);
    free(perm);
    return s;
}

/* ---- datasets ---------------------------------------------------------------------------------
 */

/* The samples, copied from the caller's arrays, shared by a dataset and its splits and loaders. */
typedef struct block {
    int refs;
    int64_t count;                   /* samples */
    kiln_dtype dtype[2];             /* features, targets */
    int ndim[2];                     /* of one sample */
    int64_t shape[2][KILN_MAX_DIMS]; /* of one sample */
    size_t sample_bytes[2];
    unsigned char *data[2]; /* data[1] NULL: no targets */
} block;

struct kiln_dataset {
    block *b;
    int64_t n;
    int64_t *index; /* the block's samples this dataset holds, in order; NULL: all of them */
};

static void block_release(block *b)
{
    if (b && --b->refs == 0) {
        free(b->data[0]);
        free(b->data[1]);
        free(b);
    }
}

void kiln_dataset_free(kiln_dataset *d)
{
    if (!d)
        return;
    block_release(d->b);
    free(d->index);
    free(d);
}

/* One array's checks: dtype, rank >= 1, sizes >= 0, bytes countable; its sample size. */
static kiln_status check_array(const char *op, const char *what, const void *p, kiln_dtype dtype,
                               int ndim, const int64_t *shape, size_t *sample_bytes)
{
    if (!p)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, what);
    if (!kiln__dtype_valid(dtype))
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s: unknown dtype %d", op, what,
                           (int)dtype);
    if (ndim < 1 || ndim > KILN_MAX_DIMS || !shape)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s has %d dims%s; it needs [samples, ...] (1 to %d dims)", op, what,
                           ndim, shape ? "" : " and no shape", KILN_MAX_DIMS);
    uint64_t bytes = kiln_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s's dimension %d is %" PRId64, op,
                               what, d, shape[d]);
        if (shape[d] && bytes > SIZE_MAX / 2 / (uint64_t)shape[d])
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: %s has more bytes than an address can count", op, what);
        if (d == 0)
            continue; /* the sample count: not part of one sample */
        bytes *= (uint64_t)shape[d];
    }
    *sample_bytes = (size_t)bytes;
    if (shape[0] && bytes > SIZE_MAX / 2 / (uint64_t)shape[0])
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: %s has more bytes than an address can count", op, what);
    return KILN_OK;
}

kiln_status kiln_dataset_create(const void *features, kiln_dtype features_dtype, int features_ndim,
                                const int64_t *features_shape, const void *targets,
                                kiln_dtype targets_dtype, int targets_ndim,
                                const int64_t *targets_shape, kiln_dataset **out)
{
    const char *op = "kiln_dataset_create";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    size_t sb[2] = {0, 0};
    kiln_status s = check_array(op, "features", features, features_dtype, features_ndim,
                                features_shape, &sb[0]);
    if (s == KILN_OK && targets)
        s = check_array(op, "targets", targets, targets_dtype, targets_ndim, targets_shape, &sb[1]);
    if (s == KILN_OK && targets && targets_shape[0] != features_shape[0])
        s = kiln__error(KILN_ERR_SHAPE_MISMATCH,
                        "%s: features hold %" PRId64 " samples but targets %" PRId64
                        " (dimension 0 counts the samples)",
                        op, features_shape[0], targets_shape[0]);
    if (s != KILN_OK)
        return s;
    block *b = kiln__calloc(1, sizeof *b);
    kiln_dataset *d = kiln__calloc(1, sizeof *d);
    int64_t n = features_shape[0];
    const void *src[2] = {features, targets};
    const int nd[2] = {features_ndim, targets_ndim};
    const int64_t *sh[2] = {features_shape, targets_shape};
    const kiln_dtype dt[2] = {features_dtype, targets_dtype};
    bool ok = b && d;
    for (int k = 0; ok && k < 2; k++) {
        if (!src[k])
            continue;
        size_t bytes = sb[k] * (size_t)n;
        b->data[k] = kiln__malloc(bytes ? bytes : 1);
        ok = b->data[k] != NULL;
        if (ok) {
            memcpy(b->data[k], src[k], bytes);
            b->dtype[k] = dt[k];
            b->ndim[k] = nd[k] - 1;
            memcpy(b->shape[k], sh[k] + 1, (size_t)(nd[k] - 1) * sizeof(int64_t));
            b->sample_bytes[k] = sb[k];
        }
    }
    if (!ok) {
        if (b) {
            free(b->data[0]);
            free(b->data[1]);
        }
        free(b);
        free(d);
        return kiln__host_oom(op);
    }
    b->refs = 1;
    b->count = n;
    d->b = b;
    d->n = n;
    *out = d;
    return KILN_OK;
}

int64_t kiln_dataset_size(const kiln_dataset *d)
{
    return d ? d->n : 0;
}

/* The block's index of d's i-th sample. */
static int64_t sample_at(const kiln_dataset *d, int64_t i)
{
    return d->index ? d->index[i] : i;
}

kiln_status kiln_random_split(const kiln_dataset *d, int n, const double *fractions, uint64_t seed,
                              kiln_dataset **parts)
{
    const char *op = "kiln_random_split";
    if (!parts)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: parts is NULL", op);
    if (n < 1 || n > 1000000)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: n is %d; it must be 1 to 1000000", op,
                           n);
    for (int k = 0; k < n; k++)
        parts[k] = NULL;
    if (!d || !fractions)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !d ? "d" : "fractions");
    double sum = 0;
    for (int k = 0; k < n; k++) {
        if (!(fractions[k] >= 0 && fractions[k] <= 1))
            return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                               "%s: fractions[%d] is %g; each must be in [0, 1]", op, k,
                               fractions[k]);
        sum += fractions[k];
    }
    if (fabs(sum - 1) > 1e-6)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: the fractions sum to %.9g, not 1", op,
                           sum);
    /* PyTorch's lengths: floor(f N) each, then the rest one by one to the parts in order */
    int64_t *len = kiln__calloc((size_t)n, sizeof *len);
    int64_t *perm = kiln__malloc((size_t)(d->n ? d->n : 1) * sizeof *perm);
    kiln_status s = len && perm ? KILN_OK : kiln__host_oom(op);
    int64_t given = 0;
    for (int k = 0; s == KILN_OK && k < n; k++) {
        len[k] = (int64_t)floor(fractions[k] * (double)d->n);
        given += len[k];
    }
    for (int64_t r = 0; s == KILN_OK && given + r < d->n; r++)
        len[r % n]++;
    if (s == KILN_OK)
        permutation(d->n, kiln__seed_resolve(seed), perm);
    int64_t at = 0;
    for (int k = 0; s == KILN_OK && k < n; k++) {
        kiln_dataset *p = kiln__calloc(1, sizeof *p);
        if (p)
            p->index = kiln__malloc((size_t)(len[k] ? len[k] : 1) * sizeof(int64_t));
        if (!p || !p->index) {
            free(p);
            s = kiln__host_oom(op);
            break;
        }
        for (int64_t i = 0; i < len[k]; i++)
            p->index[i] = sample_at(d, perm[at + i]);
        at += len[k];
        p->n = len[k];
        p->b = d->b;
        d->b->refs++;
        parts[k] = p;
    }
    free(len);
    free(perm);
    if (s != KILN_OK)
        for (int k = 0; k < n; k++) {
            kiln_dataset_free(parts[k]);
            parts[k] = NULL;
        }
    return s;
}

/* ---- loaders ----------------------------------------------------------------------------------
 */

struct kiln_loader {
    kiln_dataset *d; /* a copy of the caller's (its own index), holding the block */
    kiln_device *dev;
    int64_t batch, batches, next; /* batch size, batches per epoch, the next one */
    bool shuffle, drop_last;
    uint64_t seed, epoch;
    int64_t *order;        /* this epoch's order of d's samples */
    unsigned char *buf[2]; /* one batch of features and of targets */
    /* kiln_loader_pin_memory: batches are gathered into pinned host tensors (two per part, used
     * in turn, so that one fills while the other's copy may still run) and uploaded on the copy
     * queue, one batch ahead: ahead[] is batch ahead_at, uploading (ahead_at -1: none). */
    kiln_queue *copy;
    kiln_tensor *pinned[2][2]; /* [slot][part] */
    int slot;
    kiln_tensor *ahead[2];
    int64_t ahead_at;
};

/* Drop the batch uploading ahead: ordered onto this thread's queue first, so that its buffers go
 * back to that queue's pool and not to the copy queue's. */
static void drop_ahead(kiln_loader *l)
{
    for (int k = 0; k < 2; k++)
        if (l->ahead[k]) {
            kiln__check_handle(l->ahead[k], "kiln_loader", "batch");
            kiln_tensor_release(l->ahead[k]);
            l->ahead[k] = NULL;
        }
    l->ahead_at = -1;
}

/* Back to uploading each batch when it is asked for. */
static void unpin(kiln_loader *l)
{
    drop_ahead(l);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 2; k++) {
            kiln_tensor_release(l->pinned[i][k]);
            l->pinned[i][k] = NULL;
        }
    kiln_queue_release(l->copy);
    l->copy = NULL;
}

void kiln_loader_free(kiln_loader *l)
{
    if (!l)
        return;
    unpin(l);
    kiln_dataset_free(l->d);
    free(l->order);
    free(l->buf[0]);
    free(l->buf[1]);
    free(l);
}

/* The order of the epoch starting: Philox with key seed + epoch when shuffling. */
static void start_epoch(kiln_loader *l)
{
    if (l->shuffle)
        permutation(l->d->n, l->seed + l->epoch, l->order);
    else
        for (int64_t i = 0; i < l->d->n; i++)
            l->order[i] = i;
    l->next = 0;
}

kiln_status kiln_loader_create(const kiln_dataset *d, kiln_device *dev, int64_t batch_size,
                               bool shuffle, bool drop_last, uint64_t seed, kiln_loader **out)
{
    const char *op = "kiln_loader_create";
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    if (!d || !dev)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: %s is NULL", op, !d ? "d" : "dev");
    if (batch_size < 1)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT,
                           "%s: batch_size is %" PRId64 "; it must be >= 1", op, batch_size);
    kiln_status s = kiln__check_device(dev, op);
    if (s != KILN_OK)
        return s;
    int64_t batch = batch_size < d->n ? batch_size : (d->n ? d->n : 1);
    kiln_loader *l = kiln__calloc(1, sizeof *l);
    bool ok = l != NULL;
    if (ok) {
        l->d = kiln__calloc(1, sizeof *l->d);
        l->order = kiln__malloc((size_t)(d->n ? d->n : 1) * sizeof(int64_t));
        ok = l->d && l->order;
    }
    if (ok && d->index) {
        l->d->index = kiln__malloc((size_t)(d->n ? d->n : 1) * sizeof(int64_t));
        ok = l->d->index != NULL;
        if (ok)
            memcpy(l->d->index, d->index, (size_t)d->n * sizeof(int64_t));
    }
    for (int k = 0; ok && k < 2; k++)
        if (d->b->data[k]) {
            size_t bytes = d->b->sample_bytes[k] * (size_t)batch;
            l->buf[k] = kiln__malloc(bytes ? bytes : 1);
            ok = l->buf[k] != NULL;
        }
    if (!ok) {
        kiln_loader_free(l); /* l->d holds no block yet */
        return kiln__host_oom(op);
    }
    l->d->b = d->b;
    l->d->n = d->n;
    d->b->refs++;
    l->dev = dev;
    l->batch = batch_size;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->seed = kiln__seed_resolve(seed);
    l->batches = drop_last ? d->n / batch_size : (d->n + batch_size - 1) / batch_size;
    l->ahead_at = -1;
    start_epoch(l);
    *out = l;
    return KILN_OK;
}

int64_t kiln_loader_batches(const kiln_loader *l)
{
    return l ? l->batches : 0;
}

/* The samples in batch `at` (the last may be short). */
static int64_t batch_rows(const kiln_loader *l, int64_t at)
{
    int64_t first = at * l->batch, rows = l->d->n - first;
    return rows > l->batch ? l->batch : rows;
}

/* The shape of a batch of part k with rows samples (b->ndim[k] + 1 dimensions). */
static void batch_shape(const block *b, int k, int64_t rows, int64_t *shape)
{
    shape[0] = rows;
    memcpy(shape + 1, b->shape[k], (size_t)b->ndim[k] * sizeof(int64_t));
}

/* Copy the samples of batch `at`'s part k, in this epoch's order, to dst. */
static void gather(const kiln_loader *l, int64_t at, int k, unsigned char *dst)
{
    const block *b = l->d->b;
    size_t sb = b->sample_bytes[k];
    int64_t first = at * l->batch, rows = batch_rows(l, at);
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * sb, b->data[k] + (size_t)sample_at(l->d, l->order[first + r]) * sb,
               sb);
}

/* Batch `at` uploading on the copy queue into t[] (new tensors of no scope, their memory taken for
 * this thread's queue, so the copy waits for what was enqueued there until now): gathered into
 * the next pinned slot, which waits for its last copy first. */
static kiln_status upload(kiln_loader *l, int64_t at, kiln_tensor **t)
{
    const char *op = "kiln_loader_next";
    const block *b = l->d->b;
    int64_t rows = batch_rows(l, at);
    kiln_queue *caller = kiln_queue_current(l->dev);
    kiln_status s = KILN_OK;
    for (int k = 0; k < 2 && s == KILN_OK; k++) {
        if (!b->data[k])
            continue;
        kiln_tensor *pin = l->pinned[l->slot][k];
        void *host;
        s = kiln_tensor_map(pin, KILN_MAP_WRITE, &host);
        if (s != KILN_OK)
            break;
        gather(l, at, k, host);
        kiln_tensor_unmap(pin);
        int64_t shape[KILN_MAX_DIMS + 1];
        batch_shape(b, k, rows, shape);
        s = kiln__tensor_new(l->dev, b->dtype[k], b->ndim[k] + 1, shape, op, &t[k]);
        if (s != KILN_OK)
            break;
        kiln__scope_forget(t[k]);
        s = kiln_queue_set_current(l->dev, l->copy);
        if (s == KILN_OK)
            s = kiln__check_handle(t[k], op, "batch"); /* after the caller's queue's work on it */
        if (s == KILN_OK)
            s = kiln__tensor_copy_async(t[k], pin, (size_t)rows * b->sample_bytes[k], op);
        kiln_status r = kiln_queue_set_current(l->dev, caller);
        s = s != KILN_OK ? s : r;
    }
    l->slot ^= 1;
    if (s != KILN_OK)
        for (int k = 0; k < 2; k++) {
            kiln_tensor_release(t[k]);
            t[k] = NULL;
        }
    return s;
}

kiln_status kiln_loader_pin_memory(kiln_loader *l, bool on)
{
    const char *op = "kiln_loader_pin_memory";
    if (!l)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: l is NULL", op);
    if (on == (l->copy != NULL))
        return KILN_OK;
    if (!on) {
        unpin(l);
        return KILN_OK;
    }
    const block *b = l->d->b;
    int64_t rows = l->batch < l->d->n ? l->batch : (l->d->n ? l->d->n : 1);
    kiln_status s = kiln_queue_create(l->dev, &l->copy);
    for (int i = 0; i < 2 && s == KILN_OK; i++)
        for (int k = 0; k < 2 && s == KILN_OK; k++) {
            if (!b->data[k])
                continue;
            int64_t shape[KILN_MAX_DIMS + 1];
            batch_shape(b, k, rows, shape);
            s = kiln_tensor_empty_pinned(l->dev, b->dtype[k], b->ndim[k] + 1, shape,
                                         &l->pinned[i][k]);
            if (s == KILN_OK)
                kiln__scope_forget(l->pinned[i][k]);
        }
    if (s != KILN_OK)
        unpin(l);
    return s;
}

kiln_status kiln_loader_next(kiln_loader *l, kiln_tensor **x, kiln_tensor **y)
{
    const char *op = "kiln_loader_next";
    if (!x)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: x is NULL", op);
    *x = NULL;
    if (y)
        *y = NULL;
    if (!l)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "%s: l is NULL", op);
    if (l->next >= l->batches) { /* the epoch is over: the next call starts another */
        l->epoch++;
        start_epoch(l);
        return KILN_OK;
    }
    const block *b = l->d->b;
    kiln_tensor *t[2] = {NULL, NULL};
    kiln_status s = KILN_OK;
    if (l->copy) {
        if (l->ahead_at == l->next) {
            memcpy(t, l->ahead, sizeof t);
            l->ahead[0] = l->ahead[1] = NULL;
            l->ahead_at = -1;
        } else {
            s = upload(l, l->next, t);
        }
        /* Ordered onto this thread's queue now, before the next batch's copy is enqueued on the
         * copy queue: the step waits for this batch only. */
        for (int k = 0; k < 2 && s == KILN_OK; k++)
            if (t[k])
                s = kiln__check_handle(t[k], op, "batch");
        if (s == KILN_OK && l->next + 1 < l->batches) {
            s = upload(l, l->next + 1, l->ahead);
            l->ahead_at = s == KILN_OK ? l->next + 1 : -1;
        }
        for (int k = 0; k < 2 && s == KILN_OK; k++)
            if (t[k])
                kiln__scope_adopt(t[k]);
    } else {
        int64_t rows = batch_rows(l, l->next);
        for (int k = 0; k < 2 && s == KILN_OK; k++) {
            if (!b->data[k] || (k == 1 && !y))
                continue;
            gather(l, l->next, k, l->buf[k]);
            int64_t shape[KILN_MAX_DIMS + 1];
            batch_shape(b, k, rows, shape);
            s = kiln_tensor_from_host(l->dev, b->dtype[k], b->ndim[k] + 1, shape, l->buf[k], &t[k]);
        }
    }
    if (s != KILN_OK) {
        kiln_tensor_release(t[0]);
        kiln_tensor_release(t[1]);
        return s;
    }
    l->next++;
    *x = t[0];
    if (y)
        *y = t[1];
    else
        kiln_tensor_release(t[1]);
    return KILN_OK;
}
