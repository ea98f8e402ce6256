/* kiln_cl.h - OpenCL interoperability: the raw OpenCL handles behind kiln's devices and tensors,
 * for programs that already use OpenCL. Include it after (or instead of) kiln.h; it needs the
 * OpenCL headers (opencl-headers on Debian), which kiln.h itself does not. */
#ifndef KILN_CL_H
#define KILN_CL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "kiln.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raw OpenCL handles for programs that already use OpenCL; NULL for a NULL device or when the
 * device's context could not be created (kiln_last_error says why). Owned by kiln: do not
 * release them; retain them if you keep them. Devices of one platform share one context.
 * kiln_device_cl_queue is the queue the calling thread's work on dev goes to now: its current
 * kiln_queue, else the default queue (the profiler's timed queue while it times the device). */
KILN_API cl_context kiln_device_cl_context(kiln_device *dev);
KILN_API cl_command_queue kiln_device_cl_queue(kiln_device *dev);
KILN_API cl_device_id kiln_device_cl_device_id(kiln_device *dev);

/* The tensor's OpenCL buffer (NULL for an empty tensor). The buffer may be larger than the
 * tensor, and the tensor starts kiln_tensor_cl_offset() bytes into it. Owned by the tensor. */
KILN_API cl_mem kiln_tensor_cl_mem(const kiln_tensor *t);
KILN_API size_t kiln_tensor_cl_offset(const kiln_tensor *t);

/* Wrap an existing cl_mem created in dev's context as a tensor. kiln retains the
 * buffer and releases its reference when the tensor dies; the caller keeps its own reference
 * and releases it as usual. The buffer must hold at least numel * dtype_size bytes. Such a
 * tensor's memory is not counted in the device's memory stats. */
KILN_API kiln_status kiln_tensor_from_cl_mem(kiln_device *dev, cl_mem mem, kiln_dtype dtype,
                                             int ndim, const int64_t *shape, kiln_tensor **out);

#ifdef __cplusplus
}
#endif

#endif /* KILN_CL_H */
