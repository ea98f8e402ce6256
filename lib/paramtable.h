/* paramtable.h - the parameter table of a user program: each kernel's argument info as the
 * driver gave it when the program was built from source, kept in the program's disk cache entry
 * (diskcache.c). Drivers need give no argument info for programs created from binaries (NVIDIA's
 * PTX: OpenCL-CTS #1244), so a program loaded from the cache is checked with this table, as the
 * one built from source was. Pure functions: no device, no allocation; any bytes are safe. */
#ifndef KILN_PARAMTABLE_H
#define KILN_PARAMTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "argcheck.h"

/* Format (little-endian), one record per kernel of the program, in the order of its kernel
 * names list (CL_PROGRAM_KERNEL_NAMES), or no record at all (a built-in program):
 *   u8 kernel name length (1-127), the name;
 *   u8 1 when the driver gave argument info, 0 when not; u16 parameter count;
 *   with argument info, per parameter: u8 address qualifier (kiln__addr), u8 type name length,
 *   the type name, u8 parameter name length, the parameter name (empty: unknown). */
#define KILN__PARAM_TABLE_CAP ((size_t)1 << 22)

/* One parameter as the driver described it (type and name NULL: unknown). */
typedef struct kiln__param_text {
    kiln__addr addr;
    const char *type;
    const char *name;
} kiln__param_text;

/* A table's bytes (malloc'd by its owner). */
typedef struct kiln__param_table {
    uint8_t *bytes;
    size_t len;
} kiln__param_table;

/* Write the record of kernel `kernel` (nargs parameters, texts[0, nargs) when info) to dst, or
 * only measure it when dst is NULL; returns its length, 0 when it cannot be written (a name of
 * 0 or over 127 bytes, over 65535 parameters). Texts over 255 bytes are cut. */
size_t kiln__param_record_encode(uint8_t *dst, const char *kernel, bool info, unsigned nargs,
                                 const kiln__param_text *texts);

/* Verify a table against its program's kernel names ("a;b", nameslen bytes, no NUL): empty, or
 * one whole record per name in the list's order, known address qualifiers, no NUL in a text.
 * NULL, or a static text saying what is wrong. */
const char *kiln__param_table_check(const uint8_t *t, size_t len, const char *names,
                                    size_t nameslen);

/* What a table says about a kernel. */
typedef enum kiln__params_found {
    KILN__PARAMS_ABSENT,  /* no record for the kernel, or one with another parameter count */
    KILN__PARAMS_NO_INFO, /* the driver gave no argument info: checked by count only */
    KILN__PARAMS_FOUND,   /* out[0, nargs) describe the parameters (kiln__param_parse) */
} kiln__params_found;

/* Look kernel (of nargs parameters) up in a table that kiln__param_table_check accepted. */
kiln__params_found kiln__param_table_find(const uint8_t *t, size_t len, const char *kernel,
                                          unsigned nargs, kiln__param *out);

#endif
