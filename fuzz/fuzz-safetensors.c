/* fuzz-safetensors.c - the safetensors header parser of kiln_load (kiln__st_parse_header).
 *
 * Input: 8 bytes of data length (little-endian, taken modulo 2^40), then the JSON header.
 * Properties: no crash or sanitizer report; a failure leaves *entries NULL and a printable
 * message naming the file (valid UTF-8 without C0 or C1 controls: U+009B is a terminal's CSI);
 * a success gives entries whose names are non-empty, unique and not "__metadata__", whose
 * dtypes are kiln's, whose shapes have 0 to KILN_MAX_DIMS non-negative sizes, each holding
 * exactly end - begin bytes and one kiln can create (kiln__check_shape: no product of the nonzero
 * sizes over INT64_MAX, a zero-size dim in any position), and whose ranges tile [0, data length)
 * in order. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/checkpoint.h"
#include "../lib/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Whether m is valid UTF-8 (loosely: lead and continuation bytes) without C0 controls but '\n',
 * DEL or C1 controls (U+0080 to U+009F, 0xc2 0x80 to 0xc2 0x9f). */
static bool printable(const unsigned char *m)
{
    for (size_t i = 0; m[i];) {
        size_t len = m[i] < 0x80 ? 1 : m[i] >= 0xf0 ? 4 : m[i] >= 0xe0 ? 3 : m[i] >= 0xc2 ? 2 : 0;
        if (len == 0 || (m[i] < 0x20 && m[i] != '\n') || m[i] == 0x7f ||
            (m[i] == 0xc2 && m[i + 1] <= 0x9f))
            return false;
        for (size_t k = 1; k < len; k++)
            if ((m[i + k] & 0xc0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    uint64_t data_len = 0;
    for (int i = 0; i < 8; i++)
        data_len |= (uint64_t)data[i] << (8 * i);
    data_len &= ((uint64_t)1 << 40) - 1;
    size_t len = size - 8;
    char *json = malloc(len ? len : 1); /* exactly the header: ASan sees any over-read */
    if (!json)
        return 0;
    memcpy(json, data + 8, len);
    kiln__st_entry *es = (kiln__st_entry *)1;
    int n = -1;
    kiln_status s =
        kiln__st_parse_header("kiln_load", json, len, data_len, "fuzz.safetensors", &es, &n);
    if (s != KILN_OK) {
        const char *m = kiln_last_error();
        if (es != NULL || n != 0 || !strstr(m, "fuzz.safetensors") || strlen(m) > 4096)
            abort();
        if (!printable((const unsigned char *)m))
            abort();
    } else {
        uint64_t at = 0;
        for (int i = 0; i < n; i++) {
            const kiln__st_entry *e = &es[i];
            if (!e->name || !*e->name || strcmp(e->name, "__metadata__") == 0 || e->begin != at ||
                e->end < e->begin || e->ndim < 0 || e->ndim > KILN_MAX_DIMS ||
                kiln_dtype_size(e->dtype) == 0)
                abort();
            uint64_t numel = 1;
            for (int d = 0; d < e->ndim; d++) {
                if (e->shape[d] < 0)
                    abort();
                numel *= (uint64_t)e->shape[d];
            }
            if (numel * kiln_dtype_size(e->dtype) != e->end - e->begin)
                abort();
            /* a shape kiln can create, whatever the order of its dims */
            int64_t count;
            size_t nbytes;
            if (kiln__check_shape(e->ndim, e->shape, e->dtype, "fuzz", &count, &nbytes) != KILN_OK)
                abort();
            for (int j = 0; j < i; j++)
                if (strcmp(es[j].name, e->name) == 0)
                    abort();
            at = e->end;
        }
        if (at != data_len)
            abort();
        kiln__st_entries_free(es, n);
    }
    free(json);
    return 0;
}
