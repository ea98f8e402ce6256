/* clcall.c - the OpenCL entry-point table, error names, and cl_int -> kiln_status mapping. */
#include "clcall.h"

#include <CL/cl_ext.h>

#include "status.h"

/* clCreateCommandQueue is deprecated in OpenCL 2.0 headers; kiln targets 1.2 devices too. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static const struct kiln__cl_api real_api = {
#define KILN__CL_INIT(ret, name, args) .name = cl##name,
    KILN__CL_FUNCS(KILN__CL_INIT)
#undef KILN__CL_INIT
};
#pragma GCC diagnostic pop

struct kiln__cl_api kiln__cl = {
#define KILN__CL_INIT2(ret, name, args) .name = cl##name,
    KILN__CL_FUNCS(KILN__CL_INIT2)
#undef KILN__CL_INIT2
};

void kiln__cl_reset(void)
{
    kiln__cl = real_api;
}

#define KILN__CL_ERRORS(X)                                                                         \
    X(CL_SUCCESS, 0)                                                                               \
    X(CL_DEVICE_NOT_FOUND, -1)                                                                     \
    X(CL_DEVICE_NOT_AVAILABLE, -2)                                                                 \
    X(CL_COMPILER_NOT_AVAILABLE, -3)                                                               \
    X(CL_MEM_OBJECT_ALLOCATION_FAILURE, -4)                                                        \
    X(CL_OUT_OF_RESOURCES, -5)                                                                     \
    X(CL_OUT_OF_HOST_MEMORY, -6)                                                                   \
    X(CL_PROFILING_INFO_NOT_AVAILABLE, -7)                                                         \
    X(CL_MEM_COPY_OVERLAP, -8)                                                                     \
    X(CL_IMAGE_FORMAT_MISMATCH, -9)                                                                \
    X(CL_IMAGE_FORMAT_NOT_SUPPORTED, -10)                                                          \
    X(CL_BUILD_PROGRAM_FAILURE, -11)                                                               \
    X(CL_MAP_FAILURE, -12)                                                                         \
    X(CL_MISALIGNED_SUB_BUFFER_OFFSET, -13)                                                        \
    X(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, -14)                                           \
    X(CL_COMPILE_PROGRAM_FAILURE, -15)                                                             \
    X(CL_LINKER_NOT_AVAILABLE, -16)                                                                \
    X(CL_LINK_PROGRAM_FAILURE, -17)                                                                \
    X(CL_DEVICE_PARTITION_FAILED, -18)                                                             \
    X(CL_KERNEL_ARG_INFO_NOT_AVAILABLE, -19)                                                       \
    X(CL_INVALID_VALUE, -30)                                                                       \
    X(CL_INVALID_DEVICE_TYPE, -31)                                                                 \
    X(CL_INVALID_PLATFORM, -32)                                                                    \
    X(CL_INVALID_DEVICE, -33)                                                                      \
    X(CL_INVALID_CONTEXT, -34)                                                                     \
    X(CL_INVALID_QUEUE_PROPERTIES, -35)                                                            \
    X(CL_INVALID_COMMAND_QUEUE, -36)                                                               \
    X(CL_INVALID_HOST_PTR, -37)                                                                    \
    X(CL_INVALID_MEM_OBJECT, -38)                                                                  \
    X(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, -39)                                                     \
    X(CL_INVALID_IMAGE_SIZE, -40)                                                                  \
    X(CL_INVALID_SAMPLER, -41)                                                                     \
    X(CL_INVALID_BINARY, -42)                                                                      \
    X(CL_INVALID_BUILD_OPTIONS, -43)                                                               \
    X(CL_INVALID_PROGRAM, -44)                                                                     \
    X(CL_INVALID_PROGRAM_EXECUTABLE, -45)                                                          \
    X(CL_INVALID_KERNEL_NAME, -46)                                                                 \
    X(CL_INVALID_KERNEL_DEFINITION, -47)                                                           \
    X(CL_INVALID_KERNEL, -48)                                                                      \
    X(CL_INVALID_ARG_INDEX, -49)                                                                   \
    X(CL_INVALID_ARG_VALUE, -50)                                                                   \
    X(CL_INVALID_ARG_SIZE, -51)                                                                    \
    X(CL_INVALID_KERNEL_ARGS, -52)                                                                 \
    X(CL_INVALID_WORK_DIMENSION, -53)                                                              \
    X(CL_INVALID_WORK_GROUP_SIZE, -54)                                                             \
    X(CL_INVALID_WORK_ITEM_SIZE, -55)                                                              \
    X(CL_INVALID_GLOBAL_OFFSET, -56)                                                               \
    X(CL_INVALID_EVENT_WAIT_LIST, -57)                                                             \
    X(CL_INVALID_EVENT, -58)                                                                       \
    X(CL_INVALID_OPERATION, -59)                                                                   \
    X(CL_INVALID_GL_OBJECT, -60)                                                                   \
    X(CL_INVALID_BUFFER_SIZE, -61)                                                                 \
    X(CL_INVALID_MIP_LEVEL, -62)                                                                   \
    X(CL_INVALID_GLOBAL_WORK_SIZE, -63)                                                            \
    X(CL_INVALID_PROPERTY, -64)                                                                    \
    X(CL_INVALID_IMAGE_DESCRIPTOR, -65)                                                            \
    X(CL_INVALID_COMPILER_OPTIONS, -66)                                                            \
    X(CL_INVALID_LINKER_OPTIONS, -67)                                                              \
    X(CL_INVALID_DEVICE_PARTITION_COUNT, -68)                                                      \
    X(CL_PLATFORM_NOT_FOUND_KHR, -1001)

const char *kiln__cl_error_name(cl_int err)
{
    switch (err) {
#define KILN__CL_ERRNAME(name, num)                                                                \
    case num:                                                                                      \
        return #name;
        KILN__CL_ERRORS(KILN__CL_ERRNAME)
#undef KILN__CL_ERRNAME
    }
    return "CL_UNKNOWN_ERROR";
}

kiln_status kiln__cl_status(cl_int err)
{
    switch (err) {
    case CL_SUCCESS:
        return KILN_OK;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_OUT_OF_HOST_MEMORY:
        return KILN_ERR_OUT_OF_MEMORY;
    case CL_BUILD_PROGRAM_FAILURE:
    case CL_COMPILE_PROGRAM_FAILURE:
    case CL_LINK_PROGRAM_FAILURE:
    case CL_COMPILER_NOT_AVAILABLE:
    case CL_LINKER_NOT_AVAILABLE:
        return KILN_ERR_BUILD_FAILED;
    case CL_DEVICE_NOT_FOUND:
    case CL_DEVICE_NOT_AVAILABLE:
        return KILN_ERR_NO_DEVICE;
    case CL_PLATFORM_NOT_FOUND_KHR:
        return KILN_ERR_NO_PLATFORM;
    case CL_INVALID_KERNEL_NAME:
        return KILN_ERR_NOT_FOUND;
    default:
        return KILN_ERR_OPENCL;
    }
}

kiln_status(kiln__cl_fail)(cl_int err, const char *op, const char *clfn, const char *where)
{
    return kiln__error(kiln__cl_status(err), "%s: %s failed with %s (%d)%s%s", op, clfn,
                       kiln__cl_error_name(err), (int)err, where ? " on " : "", where ? where : "");
}
