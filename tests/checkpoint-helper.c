/* checkpoint-helper.c - for tests/test-safetensors.py: load IN (a safetensors file written by
 * Python) with kiln onto SPEC, and save every tensor of it to OUT together with one kiln made
 * itself ("kiln.arange": f32 0..9), for Python to read back. Exit 0, or 1 with kiln's message.
 * A fourth argument, "named", makes kiln_save use a named temporary file as without O_TMPFILE
 * (tests/test-checkpoint.c kills the helper while it writes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"
#include "lib/checkpoint.h"

static int fail(const char *what, kiln_status s)
{
    fprintf(stderr, "checkpoint-helper: %s: %s: %s\n", what, kiln_status_string(s),
            kiln_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4 && !(argc == 5 && strcmp(argv[4], "named") == 0)) {
        fprintf(stderr, "usage: checkpoint-helper SPEC IN OUT [named]\n");
        return 2;
    }
    kiln__st_no_tmpfile = argc == 5;
    kiln_device *dev;
    kiln_status s = kiln_device_get(argv[1], &dev);
    if (s != KILN_OK)
        return fail("kiln_device_get", s);
    kiln_checkpoint *ck;
    if ((s = kiln_load(argv[2], dev, &ck)) != KILN_OK)
        return fail("kiln_load", s);
    int n = kiln_checkpoint_count(ck);
    kiln_named_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    kiln_tensor *r = NULL;
    if (!ts || (s = kiln_arange(dev, KILN_F32, 0, 10, 1, &r)) != KILN_OK)
        return fail("kiln_arange", s);
    for (int i = 0; i < n; i++) {
        ts[i].name = kiln_checkpoint_name(ck, i);
        ts[i].tensor = kiln_checkpoint_tensor(ck, i);
        printf("%s\n", ts[i].name);
    }
    ts[n] = (kiln_named_tensor){"kiln.arange", r};
    s = kiln_save(argv[3], ts, n + 1);
    kiln_tensor_release(r);
    kiln_checkpoint_free(ck);
    free(ts);
    return s == KILN_OK ? 0 : fail("kiln_save", s);
}
