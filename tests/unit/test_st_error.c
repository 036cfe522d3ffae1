/* st_error: the one error convention of core/: every code has a stable name
 * and an errno, st_error_fail returns that errno and fills the message,
 * st_error_errno turns a failed system call into IO or NO_MEMORY with the
 * reason appended, and a NULL err is allowed everywhere. */
#include <errno.h>
#include <string.h>

#include "st_error.h"
#include "test.h"

TEST(every_code_has_a_distinct_name_and_a_negative_errno)
{
    CHECK_STR(st_status_name(ST_OK), "ok");
    CHECK(st_status_errno(ST_OK) == 0);
    for (int a = 1; a < ST_STATUS_COUNT; a++) {
        CHECK(strcmp(st_status_name((enum st_status)a), "unknown_error") != 0);
        CHECK(st_status_errno((enum st_status)a) < 0);
        for (int b = a + 1; b < ST_STATUS_COUNT; b++)
            CHECK(strcmp(st_status_name((enum st_status)a), st_status_name((enum st_status)b)) != 0);
    }
    CHECK_STR(st_status_name(ST_STATUS_COUNT), "unknown_error");
    CHECK_STR(st_status_name((enum st_status)-1), "unknown_error");
}

TEST(the_errno_says_what_kind_of_failure)
{
    CHECK(st_status_errno(ST_ERR_IO) == -EIO);
    CHECK(st_status_errno(ST_ERR_NO_MEMORY) == -ENOMEM);
    CHECK(st_status_errno(ST_ERR_NOT_FOUND) == -ENOENT);
    CHECK(st_status_errno(ST_ERR_NO_DEVICE) == -ENODEV);
    CHECK(st_status_errno(ST_ERR_DEVICE_MEMORY) == -ENOSPC);
    CHECK(st_status_errno(ST_ERR_LIMIT) == -EAGAIN);
    /* a verdict on the input */
    CHECK(st_status_errno(ST_ERR_DTYPE) == -EINVAL);
    CHECK(st_status_errno(ST_ERR_INVALID_ARGUMENT) == -EINVAL);
}

TEST(fail_fills_the_message_and_returns_the_errno)
{
    struct st_error e;
    int rc = st_error_fail(&e, ST_ERR_NOT_FOUND, "no model %s", "m");
    CHECK(rc == -ENOENT);
    CHECK(e.code == ST_ERR_NOT_FOUND);
    CHECK_STR(e.message, "no model m");
    CHECK(st_error_fail(NULL, ST_ERR_DTYPE, "x") == -EINVAL);
}

TEST(a_long_message_is_cut_not_overrun)
{
    struct st_error e;
    char big[2000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    st_error_fail(&e, ST_ERR_JSON, "%s", big);
    CHECK_EQ_U64(strlen(e.message), sizeof(e.message) - 1);
    st_error_errno(&e, EACCES, "%s", big);
    CHECK_EQ_U64(strlen(e.message), sizeof(e.message) - 1);
}

TEST(errno_appends_the_reason)
{
    struct st_error e;
    CHECK(st_error_errno(&e, ENOENT, "open %s", "f") == -ENOENT);
    CHECK(e.code == ST_ERR_IO);
    CHECK_STR(e.message, "open f: No such file or directory");
    CHECK(st_error_errno(&e, ENOMEM, "read") == -ENOMEM);
    CHECK(e.code == ST_ERR_NO_MEMORY);
    /* a caller that lost errno still gets a failure */
    CHECK(st_error_errno(&e, 0, "x") == -EIO);
    CHECK(st_error_errno(NULL, EPERM, "x") == -EPERM);
}

int main(void)
{
    RUN(every_code_has_a_distinct_name_and_a_negative_errno);
    RUN(the_errno_says_what_kind_of_failure);
    RUN(fail_fills_the_message_and_returns_the_errno);
    RUN(a_long_message_is_cut_not_overrun);
    RUN(errno_appends_the_reason);
    return TEST_SUMMARY();
}
