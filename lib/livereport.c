/* livereport.c - the objects a program still holds: kiln_live_objects_get, and at exit one
 * warning line when anything is left (a leak report, as sanitizers give for memory). Tensors are
 * counted by tensor.c, per device and in all; the other kinds by live.c. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "live.h"
#include "registry.h"
#include "status.h"
#include "tensor.h"

kiln_status kiln_live_objects_get(kiln_live_objects *out)
{
    if (!out)
        return kiln__error(KILN_ERR_INVALID_ARGUMENT, "kiln_live_objects_get: out is NULL");
    memset(out, 0, sizeof *out);
    int64_t tensors = kiln__tensor_live();
    out->tensors = tensors > 0 ? (uint64_t)tensors : 0;
    /* A tensor needs a device: with none alive the devices need not be asked (nor enumerated). */
    for (int i = 0; out->tensors && kiln_device_at(i); i++) {
        int_fast64_t b = atomic_load(&kiln_device_at(i)->live_bytes);
        out->tensor_bytes += b > 0 ? (uint64_t)b : 0;
    }
    out->modules = kiln__live_count(KILN__LIVE_MODULE);
    out->optimizers = kiln__live_count(KILN__LIVE_OPTIMIZER);
    out->programs = kiln__live_count(KILN__LIVE_PROGRAM);
    out->scopes = kiln__live_count(KILN__LIVE_SCOPE);
    return KILN_OK;
}

/* "4.0 KiB": bytes in the largest binary unit that keeps the figure >= 1. */
static void size_str(char *buf, size_t size, uint64_t bytes)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, size, "%llu bytes", (unsigned long long)bytes);
    else
        snprintf(buf, size, "%.1f %s", v, units[u]);
}

/* Append ", N thing(s)" (the first without the comma) when n > 0. */
static void add_count(char *buf, size_t size, uint64_t n, const char *thing)
{
    size_t len = strlen(buf);
    if (n && len < size)
        snprintf(buf + len, size - len, "%s%llu %s%s", len ? ", " : "", (unsigned long long)n,
                 thing, n == 1 ? "" : "s");
}

/* The report: after every atexit handler (a library destructor runs after them, and in a static
 * executable .fini_array does too), so objects a program releases in its own atexit handlers
 * are not reported. Reads counters only: no lock, no driver call. */
__attribute__((destructor)) static void report_at_exit(void)
{
    if (!kiln__log_enabled(KILN_LOG_WARN))
        return;
    kiln_live_objects o;
    kiln_live_objects_get(&o);
    if (!o.tensors && !o.modules && !o.optimizers && !o.programs && !o.scopes)
        return;
    char line[1024] = "";
    add_count(line, sizeof line, o.tensors, "tensor");
    if (o.tensors) {
        size_t len = strlen(line);
        snprintf(line + len, sizeof line - len, " (");
        bool first = true;
        for (int i = 0; kiln_device_at(i); i++) {
            kiln_device *dev = kiln_device_at(i);
            int_fast64_t n = atomic_load(&dev->live_tensors), b = atomic_load(&dev->live_bytes);
            if (n <= 0)
                continue;
            char sz[32];
            size_str(sz, sizeof sz, b > 0 ? (uint64_t)b : 0);
            len = strlen(line);
            snprintf(line + len, sizeof line - len, "%s%s: %lld, %s", first ? "" : "; ",
                     dev->info.spec, (long long)n, sz);
            first = false;
        }
        len = strlen(line);
        snprintf(line + len, sizeof line - len, ")");
    }
    add_count(line, sizeof line, o.modules, "module");
    add_count(line, sizeof line, o.optimizers, "optimizer");
    add_count(line, sizeof line, o.programs, "program");
    add_count(line, sizeof line, o.scopes, "open scope");
    kiln__log(KILN_LOG_WARN,
              "at exit, still alive: %s; release them (kiln_tensor_release, kiln_module_free, "
              "kiln_optimizer_free, kiln_program_release, kiln_scope_end), or set KILN_LOG=error "
              "to hide this line (KILN_LOG=debug lists the tensors and what made them)",
              line);
    kiln__tensor_log_sites(5);
}
