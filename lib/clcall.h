/* clcall.h - every OpenCL entry point kiln uses, called through one table. Tests replace
 * entries to make any call fail on purpose; kiln__cl_reset() restores the real ones. */
#ifndef KILN_CLCALL_H
#define KILN_CLCALL_H

#include "kiln_cl.h"

#define KILN__CL_FUNCS(X)                                                                          \
    X(cl_int, GetPlatformIDs, (cl_uint, cl_platform_id *, cl_uint *))                              \
    X(cl_int, GetPlatformInfo, (cl_platform_id, cl_platform_info, size_t, void *, size_t *))       \
    X(cl_int, GetDeviceIDs, (cl_platform_id, cl_device_type, cl_uint, cl_device_id *, cl_uint *))  \
    X(cl_int, GetDeviceInfo, (cl_device_id, cl_device_info, size_t, void *, size_t *))             \
    X(cl_context, CreateContext,                                                                   \
      (const cl_context_properties *, cl_uint, const cl_device_id *,                               \
       void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))         \
    X(cl_int, ReleaseContext, (cl_context))                                                        \
    X(cl_command_queue, CreateCommandQueue,                                                        \
      (cl_context, cl_device_id, cl_command_queue_properties, cl_int *))                           \
    X(cl_int, ReleaseCommandQueue, (cl_command_queue))                                             \
    X(cl_int, GetCommandQueueInfo,                                                                 \
      (cl_command_queue, cl_command_queue_info, size_t, void *, size_t *))                         \
    X(cl_mem, CreateBuffer, (cl_context, cl_mem_flags, size_t, void *, cl_int *))                  \
    X(cl_int, RetainMemObject, (cl_mem))                                                           \
    X(cl_int, ReleaseMemObject, (cl_mem))                                                          \
    X(cl_int, GetMemObjectInfo, (cl_mem, cl_mem_info, size_t, void *, size_t *))                   \
    X(cl_int, SetMemObjectDestructorCallback,                                                      \
      (cl_mem, void(CL_CALLBACK *)(cl_mem, void *), void *))                                       \
    X(cl_int, EnqueueReadBuffer,                                                                   \
      (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,       \
       cl_event *))                                                                                \
    X(cl_int, EnqueueWriteBuffer,                                                                  \
      (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *, \
       cl_event *))                                                                                \
    X(cl_int, EnqueueCopyBuffer,                                                                   \
      (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event *,        \
       cl_event *))                                                                                \
    X(cl_int, EnqueueFillBuffer,                                                                   \
      (cl_command_queue, cl_mem, const void *, size_t, size_t, size_t, cl_uint, const cl_event *,  \
       cl_event *))                                                                                \
    X(void *, EnqueueMapBuffer,                                                                    \
      (cl_command_queue, cl_mem, cl_bool, cl_map_flags, size_t, size_t, cl_uint, const cl_event *, \
       cl_event *, cl_int *))                                                                      \
    X(cl_int, EnqueueUnmapMemObject,                                                               \
      (cl_command_queue, cl_mem, void *, cl_uint, const cl_event *, cl_event *))                   \
    X(cl_int, EnqueueMarkerWithWaitList,                                                           \
      (cl_command_queue, cl_uint, const cl_event *, cl_event *))                                   \
    X(cl_int, EnqueueBarrierWithWaitList,                                                          \
      (cl_command_queue, cl_uint, const cl_event *, cl_event *))                                   \
    X(cl_int, Finish, (cl_command_queue))                                                          \
    X(cl_int, Flush, (cl_command_queue))                                                           \
    X(cl_int, WaitForEvents, (cl_uint, const cl_event *))                                          \
    X(cl_int, RetainEvent, (cl_event))                                                             \
    X(cl_int, ReleaseEvent, (cl_event))                                                            \
    X(cl_int, GetEventInfo, (cl_event, cl_event_info, size_t, void *, size_t *))                   \
    X(cl_int, GetEventProfilingInfo, (cl_event, cl_profiling_info, size_t, void *, size_t *))      \
    X(cl_int, SetEventCallback,                                                                    \
      (cl_event, cl_int, void(CL_CALLBACK *)(cl_event, cl_int, void *), void *))                   \
    X(cl_event, CreateUserEvent, (cl_context, cl_int *))                                           \
    X(cl_int, SetUserEventStatus, (cl_event, cl_int))                                              \
    X(cl_program, CreateProgramWithSource,                                                         \
      (cl_context, cl_uint, const char **, const size_t *, cl_int *))                              \
    X(cl_program, CreateProgramWithBinary,                                                         \
      (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **,          \
       cl_int *, cl_int *))                                                                        \
    X(cl_int, BuildProgram,                                                                        \
      (cl_program, cl_uint, const cl_device_id *, const char *,                                    \
       void(CL_CALLBACK *)(cl_program, void *), void *))                                           \
    X(cl_int, GetProgramInfo, (cl_program, cl_program_info, size_t, void *, size_t *))             \
    X(cl_int, GetProgramBuildInfo,                                                                 \
      (cl_program, cl_device_id, cl_program_build_info, size_t, void *, size_t *))                 \
    X(cl_int, ReleaseProgram, (cl_program))                                                        \
    X(cl_kernel, CreateKernel, (cl_program, const char *, cl_int *))                               \
    X(cl_int, GetKernelInfo, (cl_kernel, cl_kernel_info, size_t, void *, size_t *))                \
    X(cl_int, GetKernelWorkGroupInfo,                                                              \
      (cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void *, size_t *))              \
    X(cl_int, GetKernelArgInfo,                                                                    \
      (cl_kernel, cl_uint, cl_kernel_arg_info, size_t, void *, size_t *))                          \
    X(cl_int, SetKernelArg, (cl_kernel, cl_uint, size_t, const void *))                            \
    X(cl_int, ReleaseKernel, (cl_kernel))                                                          \
    X(cl_int, EnqueueNDRangeKernel,                                                                \
      (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,       \
       cl_uint, const cl_event *, cl_event *))                                                     \
    X(cl_int, EnqueueNativeKernel,                                                                 \
      (cl_command_queue, void(CL_CALLBACK *)(void *), void *, size_t, cl_uint, const cl_mem *,     \
       const void **, cl_uint, const cl_event *, cl_event *))

struct kiln__cl_api {
#define KILN__CL_MEMBER(ret, name, args) ret(CL_API_CALL *name) args;
    KILN__CL_FUNCS(KILN__CL_MEMBER)
#undef KILN__CL_MEMBER
};

/* The table every kiln module calls OpenCL through: kiln__cl.CreateBuffer(...). */
extern struct kiln__cl_api kiln__cl;

/* Restore the real OpenCL entry points (after a test replaced some). */
void kiln__cl_reset(void);

/* The name of an OpenCL error code ("CL_OUT_OF_RESOURCES"); "CL_UNKNOWN_ERROR" if unknown. */
const char *kiln__cl_error_name(cl_int err);

/* The kiln status for an OpenCL error code. CL_OUT_OF_RESOURCES and
 * CL_MEM_OBJECT_ALLOCATION_FAILURE map to out of memory, which is what they mean where a call
 * allocates; on a queue they mean a kernel fault, which queue.c's kiln__queue_fail reports
 * (KILN_ERR_DEVICE_LOST) instead. */
kiln_status kiln__cl_status(cl_int err);

/* Report a failed OpenCL call: sets the message "<op>: <clfn> failed with <NAME> (<code>)
 * on <where>" and returns the mapped status. `where` names the device ("cpu:0 (pthread-...)");
 * NULL leaves it out. */
kiln_status kiln__cl_fail(cl_int err, const char *op, const char *clfn, const char *where);

#ifdef __clang_analyzer__
/* For the static analyzer (see status.h): only CL_SUCCESS maps to KILN_OK. */
#define kiln__cl_fail(err, ...)                                                                    \
    ((void)kiln__cl_fail((err), __VA_ARGS__), (err) == CL_SUCCESS ? KILN_OK : KILN_ERR_OPENCL)
#endif

#endif
