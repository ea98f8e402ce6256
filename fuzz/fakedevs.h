/* fakedevs.h - the fake device list at the head of a fuzz input, shared by the spec targets.
 *
 * The first line of an input describes the devices, one letter each: g a GPU, n an NVIDIA GPU,
 * a an accelerator, c a CPU; upper case makes the device unusable; a digit after a letter is its
 * compute units (GPU speed order); '|' starts the next platform; other bytes are ignored. The
 * rest of the input (after the first '\n') is the text under test. Example: "nc|g2\ngpu:1". */
#ifndef KILN_FUZZ_FAKEDEVS_H
#define KILN_FUZZ_FAKEDEVS_H

#include <stddef.h>
#include <stdint.h>

#include "lib/spec.h"

#define FUZZ_MAX_DEVS 8

/* Fill d (numbered with kiln__spec_number) from the head of data; returns the device count and
 * sets *rest / *rest_len to the bytes after the first '\n' (empty when there is none). */
int fuzz_fake_devices(const uint8_t *data, size_t size, kiln__devdesc *d, const uint8_t **rest,
                      size_t *rest_len);

/* A NUL-terminated copy of n bytes (cut at the first NUL byte), or abort. */
char *fuzz_strndup(const uint8_t *data, size_t n);

/* Abort (a libFuzzer finding) with a message when cond is false. */
#define FUZZ_ASSERT(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                     \
    } while (0)

void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/* Whether a message is printable ASCII, non-empty and shorter than max bytes. */
int fuzz_message_ok(const char *msg, size_t max);

#endif
