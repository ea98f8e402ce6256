/* harness.c - main() shared by every test executable; KILN_TEST_SUITE names the suite. */
#include <check.h>
#include <stdlib.h>

Suite *KILN_TEST_SUITE(void);

int main(void)
{
    SRunner *sr = srunner_create(KILN_TEST_SUITE());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
