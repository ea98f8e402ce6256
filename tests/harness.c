/* harness.c - main() shared by every test executable; KILN_TEST_SUITE names the suite.
 * Under Oclgrind (OCLGRIND_LOG set), any diagnostic it logged fails the run. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

Suite *KILN_TEST_SUITE(void);

/* Oclgrind reports out-of-bounds accesses, races and API misuse to OCLGRIND_LOG. */
static int oclgrind_log_failures(void)
{
    const char *path = getenv("OCLGRIND_LOG");
    if (!path || !*path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int failed = 0, c;
    while ((c = fgetc(f)) != EOF) {
        if (!failed)
            fprintf(stderr, "Oclgrind reported problems (%s):\n", path);
        failed = 1;
        fputc(c, stderr);
    }
    fclose(f);
    return failed;
}

int main(void)
{
    const char *log = getenv("OCLGRIND_LOG");
    if (log && *log)
        remove(log);
    SRunner *sr = srunner_create(KILN_TEST_SUITE());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    failed += oclgrind_log_failures();
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
