/* kiln_mpi.c - all-reduce and broadcast of kiln tensors over MPI (libkiln-mpi).
 *
 * One engine for every call: map (the tensors of unified-memory devices), agree (one small
 * all-reduce: do all ranks hold the same list, did any rank fail, which bucket size), plan (the
 * buckets: a pure function of the agreed list and bucket size, so every rank cuts the same
 * buckets whatever its device), fill (pack small tensors into per-dtype buckets, read discrete
 * devices' tensors into host buffers), agree again (did any rank fail to fill?), transfer (one MPI
 * collective per bucket, in place), finish (unpack, write back, unmap). The agreement steps are
 * what keep a rank's local failure, a mismatched list or a different bucket size from leaving
 * the others blocked in a collective or summing misaligned buffers. Uses only kiln's public
 * API. */
#include "kiln_mpi.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum mode {
    MODE_ALLREDUCE,
    MODE_BROADCAST,
} mode;

/* Tensors of unified-memory devices at least this large go to MPI directly (no packing). */
#define DIRECT_MIN ((size_t)1 << 20)
/* Elements per MPI call (MPI counts are int). */
#define MAX_COUNT ((size_t)1 << 30)

typedef struct item {
    kiln_tensor *t;
    kiln_dtype dtype;
    size_t nbytes;
    void *mapped; /* the mapped contents (unified memory), else NULL */
    size_t off;   /* offset in its bucket */
} item;

typedef struct bucket {
    kiln_dtype dtype;
    int first, count; /* indices into the order array */
    size_t bytes;
    unsigned char *buf;
    bool owned; /* buf is ours (packed), not a mapped tensor */
} bucket;

typedef struct job {
    const char *op; /* the public function's name, for messages */
    MPI_Comm comm;
    mode mode;
    kiln_mpi_op rop;
    int root, rank, size;
    int n;
    item *items;
    int *order;
    bucket *buckets;
    int nbuckets;
    size_t limit; /* the bucket size all ranks agreed on (the largest KILN_MPI_BUCKET_BYTES) */
} job;

static kiln_status mpi_error(const char *op, const char *call, int rc)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    return kiln_set_last_error(KILN_ERR_IO, "%s: %s failed: %s", op, call, text);
}

static MPI_Datatype mpi_type(kiln_dtype dt, mode m)
{
    switch (dt) {
    case KILN_F32:
        return MPI_FLOAT;
    case KILN_F64:
        return MPI_DOUBLE;
    case KILN_I32:
        return MPI_INT32_T;
    case KILN_I64:
        return MPI_INT64_T;
    case KILN_U8:
        return MPI_UINT8_T;
    case KILN_F16:
    case KILN_BF16:
        return m == MODE_BROADCAST ? MPI_UINT16_T : MPI_DATATYPE_NULL;
    }
    return MPI_DATATYPE_NULL;
}

static size_t dtype_size(kiln_dtype dt)
{
    switch (dt) {
    case KILN_F64:
    case KILN_I64:
        return 8;
    case KILN_F32:
    case KILN_I32:
        return 4;
    case KILN_F16:
    case KILN_BF16:
        return 2;
    case KILN_U8:
        return 1;
    }
    return 1;
}

static size_t bucket_limit(void)
{
    const char *e = getenv("KILN_MPI_BUCKET_BYTES");
    if (e && *e) {
        char *end;
        unsigned long long v = strtoull(e, &end, 10);
        if (*end == '\0' && v >= 64)
            return (size_t)v;
    }
    return KILN_MPI_BUCKET_BYTES;
}

static bool unified(const kiln_tensor *t)
{
    kiln_device_info info;
    return kiln_device_info_get(kiln_tensor_device(t), &info) == KILN_OK && info.unified_memory;
}

/* A fingerprint of the call (mode, op, root and the list's dtypes and sizes), equal on all ranks
 * exactly when they make the same call. FNV-1a. */
static uint64_t fingerprint(const job *j)
{
    uint64_t h = 1469598103934665603ull;
    uint64_t vals[3] = {(uint64_t)j->mode, (uint64_t)j->rop, (uint64_t)j->root};
    for (int k = 0; k < 3; k++)
        h = (h ^ vals[k]) * 1099511628211ull;
    h = (h ^ (uint64_t)j->n) * 1099511628211ull;
    for (int i = 0; i < j->n; i++) {
        h = (h ^ (uint64_t)j->items[i].dtype) * 1099511628211ull;
        h = (h ^ (uint64_t)j->items[i].nbytes) * 1099511628211ull;
    }
    return h;
}

/* Local checks and preparation; any failure is returned (with its message) and the caller still
 * takes part in the agreement so that the other ranks learn of it. */
static kiln_status check_args(job *j, kiln_tensor *const *ts)
{
    if (j->n < 0)
        return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "%s: n is %d; give n >= 0", j->op,
                                   j->n);
    if (j->n > 0 && !ts)
        return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "%s: the tensor list is NULL", j->op);
    if (j->mode == MODE_ALLREDUCE && j->rop != KILN_MPI_SUM && j->rop != KILN_MPI_MEAN)
        return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT,
                                   "%s: unknown op %d; use KILN_MPI_SUM or KILN_MPI_MEAN", j->op,
                                   (int)j->rop);
    for (int i = 0; i < j->n; i++) {
        kiln_tensor *t = ts[i];
        if (!t)
            return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "%s: tensor %d is NULL", j->op,
                                       i);
        for (int k = 0; k < i; k++)
            if (ts[k] == t)
                return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT,
                                           "%s: tensors %d and %d are the same tensor", j->op, k,
                                           i);
        kiln_dtype dt = kiln_tensor_dtype(t);
        if (mpi_type(dt, j->mode) == MPI_DATATYPE_NULL)
            return kiln_set_last_error(KILN_ERR_UNSUPPORTED,
                                       "%s: tensor %d is %s; MPI has no such type to reduce "
                                       "(cast it to F32)",
                                       j->op, i, kiln_dtype_name(dt));
        if (j->mode == MODE_ALLREDUCE && j->rop == KILN_MPI_MEAN && dt != KILN_F32 &&
            dt != KILN_F64)
            return kiln_set_last_error(KILN_ERR_UNSUPPORTED,
                                       "%s: KILN_MPI_MEAN of tensor %d, of an integer dtype; use "
                                       "KILN_MPI_SUM",
                                       j->op, i);
        j->items[i] = (item){.t = t, .dtype = dt, .nbytes = kiln_tensor_nbytes(t)};
    }
    return KILN_OK;
}

/* Group the items into buckets: per dtype (in the order dtypes first appear), large tensors
 * alone (in place when mapped, else in a buffer of their own), the others packed up to the
 * agreed bucket size. Only the agreed list and size decide: never whether this rank's device
 * maps its tensors, so that every rank cuts the same buckets (issue 21, defect 1). */
static kiln_status plan(job *j)
{
    size_t limit = j->limit;
    int placed = 0;
    bool *done = calloc((size_t)j->n + 1, sizeof *done);
    if (!done)
        return kiln_set_last_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", j->op);
    for (int s = 0; s < j->n; s++) {
        if (done[s])
            continue;
        kiln_dtype dt = j->items[s].dtype;
        bucket *open = NULL;
        for (int i = s; i < j->n; i++) {
            item *it = &j->items[i];
            if (done[i] || it->dtype != dt)
                continue;
            done[i] = true;
            j->order[placed] = i;
            if (it->nbytes >= DIRECT_MIN) {
                it->off = 0;
                j->buckets[j->nbuckets++] =
                    (bucket){dt, placed, 1, it->nbytes, it->mapped, it->mapped == NULL};
            } else {
                if (!open || open->bytes + it->nbytes > limit) {
                    open = &j->buckets[j->nbuckets++];
                    *open = (bucket){dt, placed, 0, 0, NULL, true};
                }
                it->off = open->bytes;
                open->bytes += it->nbytes;
                open->count++;
            }
            placed++;
        }
    }
    free(done);
    return KILN_OK;
}

/* Map the tensors of unified-memory devices. */
static kiln_status map_all(job *j)
{
    /* The root of a broadcast only reads: its tensors keep their version (autograd). */
    kiln_map_flags flags =
        j->mode == MODE_BROADCAST && j->rank == j->root ? KILN_MAP_READ : KILN_MAP_READ_WRITE;
    for (int i = 0; i < j->n; i++) {
        item *it = &j->items[i];
        if (it->nbytes == 0 || !unified(it->t))
            continue;
        kiln_status s = kiln_tensor_map(it->t, flags, &it->mapped);
        if (s != KILN_OK)
            return s;
    }
    return KILN_OK;
}

/* Plan the buckets, then pack or read every tensor into them. */
static kiln_status fill(job *j)
{
    kiln_status s = plan(j);
    if (s != KILN_OK)
        return s;
    /* A rank that only receives (broadcast, not the root) need not read its tensors. */
    bool fill = j->mode == MODE_ALLREDUCE || j->rank == j->root;
    for (int b = 0; b < j->nbuckets; b++) {
        bucket *bk = &j->buckets[b];
        if (!bk->owned)
            continue;
        bk->buf = malloc(bk->bytes ? bk->bytes : 1);
        if (!bk->buf)
            return kiln_set_last_error(KILN_ERR_OUT_OF_MEMORY,
                                       "%s: out of host memory for a %zu-byte bucket", j->op,
                                       bk->bytes);
        for (int k = 0; k < bk->count && fill; k++) {
            item *it = &j->items[j->order[bk->first + k]];
            if (it->nbytes == 0)
                continue;
            if (it->mapped)
                memcpy(bk->buf + it->off, it->mapped, it->nbytes);
            else if ((s = kiln_tensor_read(it->t, bk->buf + it->off, it->nbytes)) != KILN_OK)
                return s;
        }
    }
    return KILN_OK;
}

/* All ranks: the same call? Any rank failed? Which bucket size? (MPI_MAX of fingerprint,
 * -fingerprint, the negated status and the bucket size; 62-bit fingerprints so that negation
 * cannot overflow.) Ranks whose KILN_MPI_BUCKET_BYTES differ all use the largest. */
static kiln_status agree(job *j, kiln_status local)
{
    int64_t fp = (int64_t)(fingerprint(j) >> 2);
    int64_t mine[4] = {fp, -fp, -(int64_t)local, (int64_t)bucket_limit()}, all[4];
    int rc = MPI_Allreduce(mine, all, 4, MPI_INT64_T, MPI_MAX, j->comm);
    if (rc != MPI_SUCCESS)
        return local != KILN_OK ? local : mpi_error(j->op, "MPI_Allreduce", rc);
    j->limit = (size_t)all[3];
    if (local != KILN_OK)
        return local;
    if (all[2] != 0)
        return kiln_set_last_error((kiln_status)(-all[2]),
                                   "%s: another rank of the communicator failed before the "
                                   "transfer (%s); its own message says why",
                                   j->op, kiln_status_string((kiln_status)(-all[2])));
    if (all[0] != fp || -all[1] != fp)
        return kiln_set_last_error(KILN_ERR_SHAPE_MISMATCH,
                                   "%s: the ranks of the communicator passed different tensor "
                                   "lists (count, dtypes or sizes)%s; every rank must pass the "
                                   "same",
                                   j->op, j->mode == MODE_BROADCAST ? " or roots" : "");
    return KILN_OK;
}

/* After the buckets are filled: did any rank fail to fill (host memory, a device read)? */
static kiln_status agree_filled(job *j, kiln_status local)
{
    int64_t mine = -(int64_t)local, all = 0;
    int rc = MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_MAX, j->comm);
    if (rc != MPI_SUCCESS)
        return local != KILN_OK ? local : mpi_error(j->op, "MPI_Allreduce", rc);
    if (local != KILN_OK)
        return local;
    if (all != 0)
        return kiln_set_last_error((kiln_status)(-all),
                                   "%s: another rank of the communicator failed to read its "
                                   "tensors before the transfer (%s); its own message says why",
                                   j->op, kiln_status_string((kiln_status)(-all)));
    return KILN_OK;
}

static void scale(void *p, kiln_dtype dt, size_t bytes, int size)
{
    if (dt == KILN_F32) {
        float *f = p, d = (float)size;
        for (size_t i = 0; i < bytes / sizeof *f; i++)
            f[i] /= d;
    } else if (dt == KILN_F64) {
        double *f = p, d = (double)size;
        for (size_t i = 0; i < bytes / sizeof *f; i++)
            f[i] /= d;
    }
}

static kiln_status transfer(job *j)
{
    for (int b = 0; b < j->nbuckets; b++) {
        bucket *bk = &j->buckets[b];
        size_t es = dtype_size(bk->dtype), total = bk->bytes / es;
        MPI_Datatype type = mpi_type(bk->dtype, j->mode);
        for (size_t done = 0; done < total;) {
            size_t count = total - done < MAX_COUNT ? total - done : MAX_COUNT;
            unsigned char *p = bk->buf + done * es;
            int rc;
            if (j->mode == MODE_ALLREDUCE)
                rc = MPI_Allreduce(MPI_IN_PLACE, p, (int)count, type, MPI_SUM, j->comm);
            else
                rc = MPI_Bcast(p, (int)count, type, j->root, j->comm);
            if (rc != MPI_SUCCESS)
                return mpi_error(j->op, j->mode == MODE_ALLREDUCE ? "MPI_Allreduce" : "MPI_Bcast",
                                 rc);
            done += count;
        }
        if (j->mode == MODE_ALLREDUCE && j->rop == KILN_MPI_MEAN)
            scale(bk->buf, bk->dtype, bk->bytes, j->size);
    }
    return KILN_OK;
}

/* Unpack the buckets into the tensors (unless this rank only sent), then unmap them all. */
static kiln_status finish(job *j, bool unpack)
{
    kiln_status s = KILN_OK;
    for (int b = 0; b < j->nbuckets && unpack; b++) {
        bucket *bk = &j->buckets[b];
        for (int k = 0; k < bk->count && bk->owned && s == KILN_OK; k++) {
            item *it = &j->items[j->order[bk->first + k]];
            if (it->nbytes == 0)
                continue;
            if (it->mapped)
                memcpy(it->mapped, bk->buf + it->off, it->nbytes);
            else
                s = kiln_tensor_write(it->t, bk->buf + it->off, it->nbytes);
        }
    }
    for (int i = 0; i < j->n; i++) {
        if (!j->items[i].mapped)
            continue;
        kiln_status u = kiln_tensor_unmap(j->items[i].t);
        if (s == KILN_OK)
            s = u;
    }
    return s;
}

static kiln_status run(const char *op, MPI_Comm comm, kiln_tensor *const *ts, int n, mode m,
                       kiln_mpi_op rop, int root, kiln_status pre)
{
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return kiln_set_last_error(KILN_ERR_STATE,
                                   "%s: MPI is %s; call it between MPI_Init and "
                                   "MPI_Finalize",
                                   op, fin ? "finalized" : "not initialised");
    if (comm == MPI_COMM_NULL)
        return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT,
                                   "%s: the communicator is "
                                   "MPI_COMM_NULL",
                                   op);
    int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    job j = {.op = op, .comm = comm, .mode = m, .rop = rop, .root = root, .n = n > 0 ? n : 0};
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_rank(comm, &j.rank);
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_size(comm, &j.size);
    if (rc != MPI_SUCCESS)
        return mpi_error(op, "MPI_Comm_rank", rc);

    kiln_status s = pre;
    if (s == KILN_OK && m == MODE_BROADCAST && (root < 0 || root >= j.size))
        s = kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT,
                                "%s: root %d is not a rank of the communicator (size %d)", op, root,
                                j.size);
    size_t cap = (size_t)j.n + 1;
    j.items = calloc(cap, sizeof *j.items);
    j.order = calloc(cap, sizeof *j.order);
    j.buckets = calloc(cap, sizeof *j.buckets);
    if (s == KILN_OK && (!j.items || !j.order || !j.buckets))
        s = kiln_set_last_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    if (s == KILN_OK) {
        j.n = n;
        s = check_args(&j, ts);
        if (s != KILN_OK)
            j.n = 0; /* nothing mapped; keep finish() away from unfilled items */
    }
    if (s == KILN_OK)
        s = map_all(&j);
    s = agree(&j, s);
    if (s == KILN_OK)
        s = agree_filled(&j, fill(&j));
    bool sent = s == KILN_OK;
    if (sent)
        s = transfer(&j);
    /* After a failed transfer the buffers hold partial data: leave the tensors as they were. */
    kiln_status f = finish(&j, sent && s == KILN_OK && !(m == MODE_BROADCAST && j.rank == root));
    if (s == KILN_OK)
        s = f;
    for (int b = 0; b < j.nbuckets; b++)
        if (j.buckets[b].owned)
            free(j.buckets[b].buf);
    free(j.items);
    free(j.order);
    free(j.buckets);
    return s;
}

kiln_status kiln_mpi_allreduce(MPI_Comm comm, kiln_tensor *const *ts, int n, kiln_mpi_op op)
{
    return run("kiln_mpi_allreduce", comm, ts, n, MODE_ALLREDUCE, op, 0, KILN_OK);
}

kiln_status kiln_mpi_broadcast(MPI_Comm comm, kiln_tensor *const *ts, int n, int root)
{
    return run("kiln_mpi_broadcast", comm, ts, n, MODE_BROADCAST, KILN_MPI_SUM, root, KILN_OK);
}

/* The tensors of p (or their gradients) as an array; a missing gradient is KILN_ERR_STATE. */
static kiln_status collect(const char *op, const kiln_params *p, bool grads, kiln_tensor ***out,
                           int *n)
{
    *out = NULL;
    *n = 0;
    if (!p)
        return kiln_set_last_error(KILN_ERR_INVALID_ARGUMENT, "%s: the parameter list is NULL", op);
    int count = kiln_params_count(p);
    kiln_tensor **ts = calloc((size_t)count + 1, sizeof *ts);
    if (!ts)
        return kiln_set_last_error(KILN_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
    for (int i = 0; i < count; i++) {
        kiln_tensor *t = kiln_params_tensor(p, i);
        ts[i] = grads ? kiln_tensor_grad(t) : t;
        if (!ts[i]) {
            free(ts);
            return kiln_set_last_error(KILN_ERR_STATE,
                                       "%s: parameter '%s' has no gradient on this rank; run "
                                       "kiln_backward on every rank first",
                                       op, kiln_params_name(p, i));
        }
    }
    *out = ts;
    *n = count;
    return KILN_OK;
}

kiln_status kiln_mpi_average_grads(MPI_Comm comm, const kiln_params *p)
{
    const char *op = "kiln_mpi_average_grads";
    kiln_tensor **ts;
    int n;
    kiln_status pre = collect(op, p, true, &ts, &n);
    kiln_status s = run(op, comm, ts, n, MODE_ALLREDUCE, KILN_MPI_MEAN, 0, pre);
    free(ts);
    return s;
}

kiln_status kiln_mpi_broadcast_params(MPI_Comm comm, const kiln_params *p, int root)
{
    const char *op = "kiln_mpi_broadcast_params";
    kiln_tensor **ts;
    int n;
    kiln_status pre = collect(op, p, false, &ts, &n);
    kiln_status s = run(op, comm, ts, n, MODE_BROADCAST, KILN_MPI_SUM, root, pre);
    free(ts);
    return s;
}
