/* fdio.c - whole reads and writes of a file descriptor (moved out of diskcache.c, which
 * includes.c used for it while diskcache.c used includes.c: an include cycle). */
#include "fdio.h"

#include <errno.h>
#include <unistd.h>

bool kiln__fd_transfer(int fd, void *buf, size_t n, bool writing)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = writing ? write(fd, p, n) : read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            errno = 0;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}
