/* fuzz-visible.c - kiln__spec_apply_visible (KILN_VISIBLE_DEVICES) against a reference.
 *
 * Input: the fake device line (fakedevs.h), then the list. Properties: the status matches the
 * reference (entries split at commas, spaces trimmed, each a valid non-auto spec naming a
 * device of the full numbering; "" hides everything); a failure changes no device and names the
 * variable in a printable message; on success exactly the listed devices stay visible,
 * renumbered per type in list order and ranked GPUs, accelerators, CPUs; applying the listing
 * of the result (kiln__spec_list) to the result changes nothing. */
#include <stdlib.h>
#include <string.h>

#include "fakedevs.h"
#include "ref.h"

#define MSG_MAX 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The reference: KILN_OK with order[0..*count) the listed devices (first mention), or the
 * failure status. */
static kiln_status ref_apply(const char *list, const kiln__devdesc *d, int n, int *order,
                             int *count)
{
    *count = 0;
    if (*list == '\0')
        return KILN_OK;
    for (const char *p = list;;) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        while (p < end && *p == ' ')
            p++;
        while (end > p && end[-1] == ' ')
            end--;
        char item[80];
        if (end - p == 0 || end - p > 64)
            return KILN_ERR_INVALID_ARGUMENT;
        memcpy(item, p, (size_t)(end - p));
        item[end - p] = '\0';
        ref_spec r = ref_parse(item);
        if (r.kind == REF_INVALID || r.kind == REF_AUTO)
            return KILN_ERR_INVALID_ARGUMENT;
        int i = ref_find(&r, d, n);
        if (i < 0)
            return KILN_ERR_NO_DEVICE;
        bool seen = false;
        for (int k = 0; k < *count; k++)
            seen = seen || order[k] == i;
        if (!seen)
            order[(*count)++] = i;
        if (!comma)
            return KILN_OK;
        p = comma + 1;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kiln__devdesc d[FUZZ_MAX_DEVS], before[FUZZ_MAX_DEVS];
    const uint8_t *rest;
    size_t rest_len;
    int n = fuzz_fake_devices(data, size, d, &rest, &rest_len);
    char *list = fuzz_strndup(rest, rest_len);
    memcpy(before, d, sizeof d);

    int order[FUZZ_MAX_DEVS], count;
    kiln_status want = ref_apply(list, d, n, order, &count);
    kiln_status s = kiln__spec_apply_visible(list, d, n);
    FUZZ_ASSERT(s == want, "'%s': %s, reference says %s; %s", list, kiln_status_string(s),
                kiln_status_string(want), kiln_last_error());
    if (s != KILN_OK) {
        FUZZ_ASSERT(memcmp(d, before, sizeof d) == 0, "'%s': failure changed the devices", list);
        const char *msg = kiln_last_error();
        FUZZ_ASSERT(fuzz_message_ok(msg, MSG_MAX), "'%s': message '%s'", list, msg);
        FUZZ_ASSERT(strncmp(msg, "KILN_VISIBLE_DEVICES='", 22) == 0, "message '%s'", msg);
        free(list);
        return 0;
    }

    /* Expected numbering: per type in list order; rank by type (GPU, accelerator, CPU). */
    static const kiln_device_type types[] = {KILN_DEVICE_GPU, KILN_DEVICE_ACCELERATOR,
                                             KILN_DEVICE_CPU};
    int want_tindex[FUZZ_MAX_DEVS], want_rank[FUZZ_MAX_DEVS], rank = 0;
    for (int i = 0; i < n; i++)
        want_tindex[i] = want_rank[i] = -1;
    for (int t = 0; t < 3; t++) {
        int tindex = 0;
        for (int k = 0; k < count; k++) {
            if (d[order[k]].type != types[t])
                continue;
            want_tindex[order[k]] = tindex++;
            want_rank[order[k]] = rank++;
        }
    }
    for (int i = 0; i < n; i++) {
        FUZZ_ASSERT(d[i].visible == (want_rank[i] >= 0) && d[i].type_index == want_tindex[i] &&
                        d[i].rank == want_rank[i],
                    "'%s': device %d visible %d index %d rank %d, reference %d %d", list, i,
                    d[i].visible, d[i].type_index, d[i].rank, want_tindex[i], want_rank[i]);
        FUZZ_ASSERT(memcmp(&d[i], &before[i], offsetof(kiln__devdesc, visible)) == 0,
                    "'%s': device %d's description changed", list, i);
    }

    /* The listing of the result, applied to the result, keeps it as it is. */
    char again[512];
    kiln__devdesc after[FUZZ_MAX_DEVS];
    kiln__spec_list(d, n, again, sizeof again);
    if (strcmp(again, "none") == 0)
        again[0] = '\0';
    memcpy(after, d, sizeof d);
    s = kiln__spec_apply_visible(again, after, n);
    FUZZ_ASSERT(s == KILN_OK && memcmp(after, d, sizeof d) == 0,
                "'%s' -> '%s' does not apply to itself: %s %s", list, again, kiln_status_string(s),
                kiln_last_error());
    free(list);
    return 0;
}
