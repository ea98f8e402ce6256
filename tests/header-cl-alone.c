/* header-cl-alone.c - kiln_cl.h on its own (it includes kiln.h and <CL/cl.h> itself); built by
 * tests/check-headers.py as pedantic C11 and as C++ with the OpenCL headers available. */
#include "kiln_cl.h"

cl_mem kiln_header_cl_alone(const kiln_tensor *t);

cl_mem kiln_header_cl_alone(const kiln_tensor *t)
{
    return kiln_tensor_cl_mem(t);
}
