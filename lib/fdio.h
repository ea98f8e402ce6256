/* fdio.h - whole reads and writes of a file descriptor (the disk cache, includes.c, program.c's
 * source reader). */
#ifndef KILN_FDIO_H
#define KILN_FDIO_H

#include <stdbool.h>
#include <stddef.h>

/* Read (writing false) or write all n bytes of buf from or to fd, retrying on EINTR. false on an
 * error (errno says which) or at end of file (errno 0). */
bool kiln__fd_transfer(int fd, void *buf, size_t n, bool writing);

#endif
