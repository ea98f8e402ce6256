/* fuzz-spec.c - kiln__spec_resolve (device specs, KILN_DEVICE) against the reference in ref.c.
 *
 * Input: the fake device line (fakedevs.h), then the spec, then optionally '\n' and the value
 * of KILN_DEVICE. Properties: the status and the device match the reference grammar and
 * resolution; a failure leaves *out alone and sets a printable message; a resolved device's
 * canonical spec (kiln__spec_format) resolves to the same device, and a canonical input formats
 * back to itself; kiln__spec_list stays inside its buffer. */
#include <stdlib.h>
#include <string.h>

#include "fakedevs.h"
#include "ref.h"

#define MSG_MAX 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *status_name(kiln_status s)
{
    return kiln_status_string(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln__devdesc d[FUZZ_MAX_DEVS];
    const uint8_t *rest;
    size_t rest_len;
    int n = fuzz_fake_devices(data, size, d, &rest, &rest_len);
    const uint8_t *nl = memchr(rest, '\n', rest_len);
    char *spec = fuzz_strndup(rest, nl ? (size_t)(nl - rest) : rest_len);
    char *env = nl ? fuzz_strndup(nl + 1, rest_len - (size_t)(nl - rest) - 1) : NULL;

    /* What "auto" stands for when KILN_DEVICE is set to something else. */
    bool via_env = strcmp(spec, "auto") == 0 && env && env[0] && strcmp(env, "auto") != 0;
    const char *effective = via_env ? env : spec;
    ref_spec r = ref_parse(effective);
    int want = r.kind == REF_INVALID ? -1 : ref_find(&r, d, n);
    kiln_status want_s = r.kind == REF_INVALID ? KILN_ERR_INVALID_ARGUMENT
                         : want < 0            ? KILN_ERR_NO_DEVICE
                                               : KILN_OK;

    int out = -7;
    kiln_status s = kiln__spec_resolve(spec, d, n, env, &out);
    FUZZ_ASSERT(s == want_s, "'%s' (KILN_DEVICE %s): %s, reference says %s; %s", effective,
                env ? env : "unset", status_name(s), status_name(want_s), kiln_last_error());
    if (s == KILN_OK) {
        FUZZ_ASSERT(out == want, "'%s': device %d, reference says %d", effective, out, want);
        FUZZ_ASSERT(d[out].visible && d[out].usable, "'%s': device %d hidden", effective, out);
        char canon[48];
        kiln__spec_format(&d[out], canon, sizeof canon);
        int again = -7;
        kiln_status s2 = kiln__spec_resolve(canon, d, n, NULL, &again);
        FUZZ_ASSERT(s2 == KILN_OK && again == out, "'%s' -> %d formats as '%s' -> %s %d", effective,
                    out, canon, status_name(s2), again);
        if (ref_canonical(effective))
            FUZZ_ASSERT(strcmp(canon, effective) == 0, "'%s' formats as '%s'", effective, canon);
    } else {
        FUZZ_ASSERT(out == -7, "'%s': failure wrote *out = %d", effective, out);
        FUZZ_ASSERT(fuzz_message_ok(kiln_last_error(), MSG_MAX), "'%s': message '%s'", effective,
                    kiln_last_error());
        if (via_env)
            FUZZ_ASSERT(strncmp(kiln_last_error(), "KILN_DEVICE='", 13) == 0,
                        "KILN_DEVICE not named: '%s'", kiln_last_error());
    }

    /* The listing of visible devices fits any buffer it is given. */
    char list[64];
    size_t lsize = 1 + size % sizeof list;
    memset(list, 'x', sizeof list);
    kiln__spec_list(d, n, list, lsize);
    FUZZ_ASSERT(memchr(list, '\0', lsize) != NULL, "kiln__spec_list left no NUL in %zu", lsize);
    for (size_t i = lsize; i < sizeof list; i++)
        FUZZ_ASSERT(list[i] == 'x', "kiln__spec_list wrote past %zu bytes", lsize);

    free(spec);
    free(env);
    return 0;
}
