/* mpi-helper.c - one rank of tests/test-mpi.py (run under mpirun). Checks libkiln-mpi against
 * values computed here from each rank's known inputs, and prints "rank R: ok" or "FAIL: ...".
 *
 *   mpi-helper values    all-reduce (SUM, MEAN) and broadcast of every dtype, sizes from 0 to
 *                        3 MiB, packed and direct, against sums computed on the host; the
 *                        parameter helpers (average_grads, broadcast_params)
 *   mpi-helper errors    bad arguments: the status on every rank, and no hang
 *   mpi-helper mismatch  rank 0 passes a different list: KILN_ERR_SHAPE_MISMATCH everywhere
 *   mpi-helper die       the last rank exits without MPI_Finalize while the others all-reduce
 *   mpi-helper plans     all-reduce and broadcast of a list with tensors above and below the
 *                        1 MiB direct threshold: test-mpi.py runs it with ranks whose bucket size
 *                        (KILN_MPI_BUCKET_BYTES) or device (unified memory or not) differ, which
 *                        must not change how the ranks cut their buckets (issue 21, defect 1)
 *
 * The device is KILN_TEST_MPI_DEVICE (default "cpu"); KILN_TEST_MPI_SMALL=1 takes small sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "kiln_mpi.h"

static int rank, size, failures;
static kiln_device *dev;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL: rank %d: line %d: ", rank, __LINE__);                                    \
            printf(__VA_ARGS__);                                                                   \
            printf(" (%s)\n", kiln_last_error());                                                  \
        }                                                                                          \
    } while (0)

/* The value of element i of tensor k on rank r: integral and small, so that sums are exact in
 * every dtype (u8 included: at most 3 ranks x 60). */
static double value(int k, int64_t i, int r)
{
    return (double)((i * 7 + k * 3 + r * 11) % 60);
}

static kiln_tensor *make(kiln_dtype dt, int64_t n, int k, int r)
{
    size_t es = dt == KILN_F64 || dt == KILN_I64    ? 8
                : dt == KILN_U8                     ? 1
                : dt == KILN_F16 || dt == KILN_BF16 ? 2
                                                    : 4;
    unsigned char *buf = malloc(es * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        double v = value(k, i, r);
        switch (dt) {
        case KILN_F32:
            ((float *)buf)[i] = (float)v + 0.25f;
            break;
        case KILN_F64:
            ((double *)buf)[i] = v + 0.125;
            break;
        case KILN_I32:
            ((int32_t *)buf)[i] = (int32_t)v - 20;
            break;
        case KILN_I64:
            ((int64_t *)buf)[i] = (int64_t)v * 1000000000000ll;
            break;
        case KILN_U8:
            ((uint8_t *)buf)[i] = (uint8_t)v;
            break;
        case KILN_F16:
            ((uint16_t *)buf)[i] = (uint16_t)(0x3c00 + (int)v); /* 1.0 and up */
            break;
        case KILN_BF16:
            ((uint16_t *)buf)[i] = (uint16_t)(0x3f80 + (int)v); /* 1.0 and up */
            break;
        }
    }
    kiln_tensor *t = NULL;
    kiln_status s = kiln_tensor_from_host(dev, dt, 1, &n, buf, &t);
    EXPECT(s == KILN_OK, "from_host");
    free(buf);
    return t;
}

/* Compare tensor t (dtype dt, n elements, index k) with the SUM/MEAN over ranks, or with rank
 * `from`'s values when from >= 0. */
static void verify(kiln_tensor *t, kiln_dtype dt, int64_t n, int k, bool mean, int from)
{
    size_t nb = kiln_tensor_nbytes(t);
    unsigned char *got = malloc(nb + 1);
    EXPECT(kiln_tensor_read(t, got, nb) == KILN_OK, "read");
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 3; i++) {
        double want = 0;
        for (int r = 0; r < size; r++) {
            if (from >= 0 && r != from)
                continue;
            double v = value(k, i, r);
            want += dt == KILN_F32   ? v + 0.25
                    : dt == KILN_F64 ? v + 0.125
                    : dt == KILN_I32 ? v - 20
                    : dt == KILN_I64 ? v * 1e12
                                     : v;
        }
        if (mean)
            want /= size;
        double g = dt == KILN_F32   ? ((float *)got)[i]
                   : dt == KILN_F64 ? ((double *)got)[i]
                   : dt == KILN_I32 ? ((int32_t *)got)[i]
                   : dt == KILN_I64 ? (double)((int64_t *)got)[i]
                   : dt == KILN_U8  ? ((uint8_t *)got)[i]
                   : dt == KILN_F16 ? (double)(((uint16_t *)got)[i] - 0x3c00)
                                    : (double)(((uint16_t *)got)[i] - 0x3f80);
        if (dt == KILN_F16 || dt == KILN_BF16)
            want = value(k, i, from);
        double tol = dt == KILN_F32 ? 1e-6 * fabs(want) : 0;
        if (fabs(g - want) > tol) {
            bad++;
            EXPECT(false, "tensor %d (dtype %d, n %lld) [%lld]: %.17g, expected %.17g", k, (int)dt,
                   (long long)n, (long long)i, g, want);
        }
    }
    free(got);
}

static void test_values(void)
{
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64, KILN_U8};
    /* Sizes: empty, tiny, odd, around the 1 MiB direct threshold (f32), 3 MiB. */
    const int64_t ns_full[] = {0, 1, 1001, 65536, 262144, 786432},
                  ns_small[] = {0, 1, 3, 100, 1001, 5000};
    /* KILN_TEST_MPI_SMALL: small sizes for slow devices (Oclgrind). */
    const int64_t *ns = getenv("KILN_TEST_MPI_SMALL") ? ns_small : ns_full;
    enum { ND = 5, NS = 6, NT = ND * NS };
    for (int mean = 0; mean < 2; mean++) {
        kiln_tensor *ts[NT];
        kiln_dtype tdt[NT];
        int nt = 0;
        for (int s = 0; s < NS; s++)
            for (int d = 0; d < ND; d++) {
                if (mean && dts[d] != KILN_F32 && dts[d] != KILN_F64)
                    continue;
                tdt[nt] = dts[d];
                ts[nt] = make(dts[d], ns[s], nt, rank);
                nt++;
            }
        kiln_status st =
            kiln_mpi_allreduce(MPI_COMM_WORLD, ts, nt, mean ? KILN_MPI_MEAN : KILN_MPI_SUM);
        EXPECT(st == KILN_OK, "allreduce %s: %s", mean ? "MEAN" : "SUM", kiln_status_string(st));
        for (int i = 0; i < nt; i++) {
            verify(ts[i], tdt[i], kiln_tensor_numel(ts[i]), i, mean, -1);
            kiln_tensor_release(ts[i]);
        }
    }
    /* Broadcast from the last rank, F16 and BF16 included. */
    const kiln_dtype bdts[] = {KILN_F32, KILN_F64, KILN_I32, KILN_I64,
                               KILN_U8,  KILN_F16, KILN_BF16};
    enum { NBD = sizeof bdts / sizeof bdts[0] };
    kiln_tensor *bs[NBD * 3];
    int nb = 0;
    for (int s = 1; s < 6; s += 2)
        for (int d = 0; d < NBD; d++) {
            bs[nb] = make(bdts[d], ns[s], nb, rank);
            nb++;
        }
    int root = size - 1;
    kiln_status st = kiln_mpi_broadcast(MPI_COMM_WORLD, bs, nb, root);
    EXPECT(st == KILN_OK, "broadcast: %s", kiln_status_string(st));
    for (int i = 0; i < nb; i++) {
        verify(bs[i], bdts[i % NBD], kiln_tensor_numel(bs[i]), i, false, root);
        kiln_tensor_release(bs[i]);
    }

    /* Parameters: broadcast_params from rank 0, then average_grads of grads set by backward of
     * sum(w * c_rank): d/dw = c_rank, whose mean over ranks is known. */
    kiln_params *p = NULL;
    EXPECT(kiln_params_create(&p) == KILN_OK, "params_create");
    int64_t shapes[3] = {3, 5000, getenv("KILN_TEST_MPI_SMALL") ? 700 : 300000};
    for (int i = 0; i < 3; i++) {
        kiln_tensor *w = NULL;
        char name[8];
        snprintf(name, sizeof name, "w%d", i);
        EXPECT(kiln_full(dev, KILN_F32, 1, &shapes[i], 1.0 + rank, &w) == KILN_OK, "full");
        EXPECT(kiln_tensor_set_requires_grad(w, true) == KILN_OK, "requires_grad");
        EXPECT(kiln_params_add(p, name, w) == KILN_OK, "params_add");
        kiln_tensor_release(w);
    }
    EXPECT(kiln_mpi_broadcast_params(MPI_COMM_WORLD, p, 0) == KILN_OK, "broadcast_params");
    for (int i = 0; i < 3; i++) {
        kiln_tensor *w = kiln_params_tensor(p, i), *wc = NULL, *loss = NULL;
        void *ptr;
        EXPECT(kiln_tensor_map(w, KILN_MAP_READ, &ptr) == KILN_OK, "map");
        EXPECT(((float *)ptr)[shapes[i] - 1] == 1.0f, "broadcast_params: %g, expected 1",
               (double)((float *)ptr)[shapes[i] - 1]);
        EXPECT(kiln_tensor_unmap(w) == KILN_OK, "unmap");
        EXPECT(kiln_binary_scalar(KILN_BINARY_MUL, w, 2.0 + rank * 3.0 + i, &wc) == KILN_OK,
               "mul_scalar");
        EXPECT(kiln_reduce(KILN_REDUCE_SUM, wc, 0, false, &loss) == KILN_OK, "sum");
        EXPECT(kiln_backward(loss, NULL, 0) == KILN_OK, "backward");
        kiln_tensor_release(wc);
        kiln_tensor_release(loss);
    }
    EXPECT(kiln_mpi_average_grads(MPI_COMM_WORLD, p) == KILN_OK, "average_grads");
    for (int i = 0; i < 3; i++) {
        kiln_tensor *g = kiln_tensor_grad(kiln_params_tensor(p, i));
        float *v = malloc(sizeof(float) * (size_t)shapes[i]);
        EXPECT(kiln_tensor_read(g, v, sizeof(float) * (size_t)shapes[i]) == KILN_OK, "read");
        double want = 0;
        for (int r = 0; r < size; r++)
            want += (2.0 + r * 3.0 + i) / size;
        EXPECT(fabs(v[0] - want) < 1e-6 && fabs(v[shapes[i] - 1] - want) < 1e-6,
               "average_grads %d: %g, expected %g", i, (double)v[0], want);
        free(v);
    }
    kiln_params_free(p);
}

static void test_plans(void)
{
    /* f32 above the 1 MiB direct threshold, small ones between, f64 above it, i32 small. */
    const kiln_dtype dts[] = {KILN_F32, KILN_F32, KILN_I32, KILN_F32, KILN_F64, KILN_I32};
    const int64_t ns[] = {300000, 1000, 5000, 17, 140000, 3};
    enum { NT = 6 };
    kiln_tensor *ts[NT];
    for (int i = 0; i < NT; i++)
        ts[i] = make(dts[i], ns[i], i, rank);
    kiln_status st = kiln_mpi_allreduce(MPI_COMM_WORLD, ts, NT, KILN_MPI_SUM);
    EXPECT(st == KILN_OK, "allreduce: %s", kiln_status_string(st));
    for (int i = 0; i < NT; i++) {
        verify(ts[i], dts[i], ns[i], i, false, -1);
        kiln_tensor_release(ts[i]);
    }
    for (int i = 0; i < NT; i++)
        ts[i] = make(dts[i], ns[i], i, rank);
    st = kiln_mpi_broadcast(MPI_COMM_WORLD, ts, NT, size - 1);
    EXPECT(st == KILN_OK, "broadcast: %s", kiln_status_string(st));
    for (int i = 0; i < NT; i++) {
        verify(ts[i], dts[i], ns[i], i, false, size - 1);
        kiln_tensor_release(ts[i]);
    }
}

static void test_errors(void)
{
    kiln_tensor *t = make(KILN_F32, 4, 0, rank), *h = make(KILN_F16, 4, 0, rank);
    kiln_tensor *two[2] = {t, t}, *nul[1] = {NULL};
    kiln_status s = kiln_mpi_allreduce(MPI_COMM_NULL, &t, 1, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "MPI_COMM_NULL"),
           "COMM_NULL: %s", kiln_status_string(s));
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, nul, 1, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "NULL"), "NULL tensor");
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, &t, -1, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_INVALID_ARGUMENT, "n < 0");
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, two, 2, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "same tensor"), "twice");
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, &t, 1, (kiln_mpi_op)7);
    EXPECT(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "unknown op"), "op");
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, &h, 1, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "is f16"), "f16");
    kiln_tensor *b = make(KILN_BF16, 4, 0, rank);
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, &b, 1, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "is bf16"), "bf16");
    kiln_tensor_release(b);
    s = kiln_mpi_broadcast(MPI_COMM_WORLD, &t, 1, size);
    EXPECT(s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "root"), "root");
    /* Only rank 0 passes a bad argument: the others learn of it and fail too, no hang. */
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, rank == 0 ? nul : &t, 1, KILN_MPI_SUM);
    EXPECT(rank == 0 ? s == KILN_ERR_INVALID_ARGUMENT
                     : s == KILN_ERR_INVALID_ARGUMENT && strstr(kiln_last_error(), "another rank"),
           "one rank's bad argument: %s", kiln_status_string(s));
    /* A parameter without a gradient on one rank: KILN_ERR_STATE everywhere. */
    kiln_params *p = NULL;
    EXPECT(kiln_params_create(&p) == KILN_OK && kiln_params_add(p, "w", t) == KILN_OK, "params");
    s = kiln_mpi_average_grads(MPI_COMM_WORLD, p);
    EXPECT(s == KILN_ERR_STATE && (rank != 0 || strstr(kiln_last_error(), "'w'")), "no grad: %s",
           kiln_status_string(s));
    kiln_params_free(p);
    /* The tensors are still usable: a good call works afterwards. */
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, &t, 1, KILN_MPI_SUM);
    EXPECT(s == KILN_OK, "good call after errors: %s", kiln_status_string(s));
    verify(t, KILN_F32, 4, 0, false, -1);
    kiln_tensor_release(t);
    kiln_tensor_release(h);
}

static void test_mismatch(void)
{
    kiln_tensor *a = make(KILN_F32, 10, 0, rank), *b = make(KILN_F32, rank == 0 ? 11 : 10, 1, 0);
    kiln_tensor *ts[2] = {a, b};
    kiln_status s = kiln_mpi_allreduce(MPI_COMM_WORLD, ts, 2, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_SHAPE_MISMATCH && strstr(kiln_last_error(), "different tensor lists"),
           "size mismatch: %s", kiln_status_string(s));
    s = kiln_mpi_allreduce(MPI_COMM_WORLD, ts, rank == 0 ? 1 : 2, KILN_MPI_SUM);
    EXPECT(s == KILN_ERR_SHAPE_MISMATCH, "count mismatch: %s", kiln_status_string(s));
    verify(a, KILN_F32, 10, 0, false, rank); /* untouched */
    kiln_tensor_release(a);
    kiln_tensor_release(b);
}

static void test_die(void)
{
    kiln_tensor *t = make(KILN_F32, 1 << 20, 0, rank);
    EXPECT(kiln_mpi_allreduce(MPI_COMM_WORLD, &t, 1, KILN_MPI_SUM) == KILN_OK, "first");
    if (rank == size - 1) {
        printf("rank %d: exiting without MPI_Finalize\n", rank);
        fflush(stdout);
        _exit(3);
    }
    kiln_status s = kiln_mpi_allreduce(MPI_COMM_WORLD, &t, 1, KILN_MPI_SUM);
    /* Reached only where the MPI library reports the lost peer (Open MPI's mpirun usually ends
     * the job first). */
    printf("rank %d: all-reduce with a dead peer: %s: %s\n", rank, kiln_status_string(s),
           kiln_last_error());
    kiln_tensor_release(t);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *spec = getenv("KILN_TEST_MPI_DEVICE");
    if (kiln_device_get(spec && *spec ? spec : "cpu", &dev) != KILN_OK) {
        printf("FAIL: rank %d: no device: %s\n", rank, kiln_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "values") == 0)
        test_values();
    else if (strcmp(mode, "errors") == 0)
        test_errors();
    else if (strcmp(mode, "mismatch") == 0)
        test_mismatch();
    else if (strcmp(mode, "die") == 0)
        test_die();
    else if (strcmp(mode, "plans") == 0)
        test_plans();
    else {
        printf("usage: mpi-helper values|errors|mismatch|die|plans\n");
        failures++;
    }
    if (failures == 0)
        printf("rank %d: ok\n", rank);
    fflush(stdout);
    MPI_Finalize();
    return failures ? 1 : 0;
}
