// header-alone.cpp - kiln.h on its own, as C++ (see header-alone.c): the declarations have C
// linkage and the enums and X-macro tables are valid C++.
#include "kiln.h"

int kiln_header_alone_cpp();

int kiln_header_alone_cpp()
{
    const char *(*version)(void) = kiln_version;
    kiln_device *dev = nullptr;
    kiln_tensor *t = nullptr;
    kiln_status s = KILN_OK;
    return static_cast<int>(s) + (version == nullptr) + (dev != nullptr) + (t != nullptr);
}
