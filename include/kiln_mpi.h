/* kiln_mpi.h - data-parallel training over MPI: all-reduce and broadcast of kiln tensors.
 *
 * An optional part of kiln, built when Open MPI is found (Meson option -Dmpi=auto|enabled|
 * disabled): a small library of its own, libkiln-mpi (pkg-config kiln-mpi), so that libkiln
 * itself never links MPI. The program initialises MPI (MPI_Init) and finalises it; these calls
 * only use a communicator it passes.
 *
 * How tensors travel. On a device with unified host memory (CPU devices, integrated GPUs:
 * kiln_device_info's unified_memory) a tensor is mapped (kiln_tensor_map, no copy) and MPI reads
 * and writes its memory in place; small tensors are packed into one message. On a discrete
 * device each tensor is copied to host memory through kiln's pinned staging buffers (as
 * kiln_tensor_read and kiln_tensor_write do), reduced there and copied back. MPI libraries built
 * with GPU support ("CUDA-aware" MPI) do not help: OpenCL buffers are not CUDA device pointers,
 * so kiln always hands MPI host memory.
 *
 * Every rank of the communicator must make the same calls with the same tensor lists (count,
 * dtypes and element counts, in order); a list that differs between ranks is caught before any
 * data moves and every rank gets KILN_ERR_SHAPE_MISMATCH. A rank that fails before the transfer
 * (a bad argument, a failed map or copy) makes every rank fail with the same status, so that no
 * rank waits forever for it. These calls set MPI_ERRORS_RETURN on the communicator they are
 * given, and an MPI error becomes KILN_ERR_IO with MPI_Error_string's text in kiln_last_error().
 * A rank that dies (crashes, exits without MPI_Finalize) is noticed by mpirun, which ends the
 * job and names the rank; Open MPI does not let the survivors go on.
 *
 * Dtypes: F32, F64, I32, I64 and U8; broadcasts also F16 (an all-reduce of F16 is
 * KILN_ERR_UNSUPPORTED: MPI has no half type; cast to F32). All calls block until the data has
 * arrived, wait for pending work on the tensors first, and are not thread-safe with respect to
 * other calls on the same communicator (MPI's rule). */
#ifndef KILN_MPI_H
#define KILN_MPI_H

#include <mpi.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KILN_MPI_API __attribute__((visibility("default")))
#else
#define KILN_MPI_API
#endif

typedef enum kiln_mpi_op {
    KILN_MPI_SUM = 0,  /* every rank gets the element-wise sum over ranks */
    KILN_MPI_MEAN = 1, /* the sum divided by the number of ranks (floating dtypes only) */
} kiln_mpi_op;

/* All-reduce n tensors in place over comm: afterwards each tensor holds, on every rank, the sum
 * (or mean) of that tensor over the ranks. Tensors may be on different devices. n == 0 does
 * nothing. MEAN of an integer dtype is KILN_ERR_UNSUPPORTED; NULL tensors, n < 0, a tensor given
 * twice, an unknown op or MPI_COMM_NULL are KILN_ERR_INVALID_ARGUMENT. Small tensors of one
 * dtype are packed into buckets of KILN_MPI_BUCKET_BYTES (25 MiB; the environment variable of
 * that name overrides it) so that many small tensors make few messages. */
KILN_MPI_API kiln_status kiln_mpi_allreduce(MPI_Comm comm, kiln_tensor *const *ts, int n,
                                            kiln_mpi_op op);

/* Copy n tensors from rank root to the other ranks of comm (in place: every rank passes tensors
 * of the same dtypes and sizes). root outside [0, size) is KILN_ERR_INVALID_ARGUMENT. */
KILN_MPI_API kiln_status kiln_mpi_broadcast(MPI_Comm comm, kiln_tensor *const *ts, int n, int root);

/* Data-parallel training, after kiln_backward on every rank's shard of the batch: replace the
 * gradient (kiln_tensor_grad) of every tensor of p by its mean over the ranks, in few large
 * messages (buckets, as kiln_mpi_allreduce). Every rank must have a gradient for the same
 * tensors: a tensor without one on this rank is KILN_ERR_STATE (and every rank fails). With
 * equal shards, the loss a mean over the shard, the result equals the gradient of the whole
 * batch up to f32 rounding; then step each parameter (kiln_sgd_step, kiln_adam_step). */
KILN_MPI_API kiln_status kiln_mpi_average_grads(MPI_Comm comm, const kiln_params *p);

/* Broadcast the tensors of p from root (start of training: every rank starts from root's
 * initial weights, whatever its seed). */
KILN_MPI_API kiln_status kiln_mpi_broadcast_params(MPI_Comm comm, const kiln_params *p, int root);

#define KILN_MPI_BUCKET_BYTES ((size_t)25 << 20)

#ifdef __cplusplus
}
#endif

#endif /* KILN_MPI_H */
