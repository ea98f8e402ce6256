/* fake-nvidia-opencl.c - a stand-in for NVIDIA's libnvidia-opencl.so.1 in the registry tests:
 * kiln only asks whether the driver's OpenCL library loads (KILN_TEST_NVIDIA_OPENCL_LIB names
 * this file), never calls into it. */
int kiln_fake_nvidia_opencl(void);

int kiln_fake_nvidia_opencl(void)
{
    return 1;
}
