/* includes.h - the headers a user program can #include through -I, for the disk-cache key:
 * a change to one of them must not give a stale cached binary. */
#ifndef KILN_INCLUDES_H
#define KILN_INCLUDES_H

#include <stdbool.h>
#include <stddef.h>

#define KILN__INCLUDES_MAX_FILES 256                /* files, over every -I directory */
#define KILN__INCLUDES_MAX_BYTES ((size_t)16 << 20) /* their bytes together */
#define KILN__INCLUDES_MAX_DEPTH 4                  /* subfolders below each -I directory */

/* The names and contents of every regular file under each -I directory of options ("-I dir"
 * and "-Idir"; symbolic links followed; at most KILN__INCLUDES_MAX_DEPTH levels down), sorted
 * by path, as length-prefixed text in *text (malloc'd, caller frees; "" without -I) of *len
 * bytes. false, with *why saying so, when the directories hold more than the caps (or host
 * memory runs out): the build should then not be cached. A directory that cannot be read is
 * recorded as such (the compiler cannot read it either). */
bool kiln__includes_text(const char *options, char **text, size_t *len, const char **why);

#endif
