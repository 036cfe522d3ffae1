/* Tests for core/runtime/device_name.c: the names a preload may go to, against the
 * forms nvidia-smi -L prints and the ones that must be refused. */
#include "device_name.h"
#include "test.h"

TEST(syntax)
{
    enum device_kind k;
    int idx;
    const char *uuid;
    CHECK(device_name_parse("host", &k, &idx, &uuid) == 0 && k == DEVICE_HOST);
    CHECK(device_name_parse("cuda", &k, &idx, &uuid) == 0 && k == DEVICE_CUDA && idx == 0);
    CHECK(device_name_parse("cuda:3", &k, &idx, &uuid) == 0 && idx == 3 && !uuid);
    CHECK(device_name_parse("GPU-0a1b2c3d-aaaa-bbbb-cccc-0123456789ab", &k, &idx, &uuid) == 0 &&
          uuid && idx == -1);
    CHECK(device_name_parse("MIG-AB12-34", &k, &idx, &uuid) == 0 && k == DEVICE_CUDA && uuid);
    CHECK(device_name_parse("cuda:63", &k, &idx, &uuid) == 0 && idx == 63);
    CHECK(device_name_parse("cuda:64", &k, &idx, &uuid) < 0); /* DEVICE_NAME_MAX_DEVICES */
    CHECK(device_name_parse("GPU-0123456789012345678901234567890123456789abcdef", &k, &idx,
                            &uuid) < 0); /* longer than a UUID field holds */
    CHECK(device_name_parse(NULL, &k, &idx, &uuid) < 0);
    CHECK(device_name_parse("", &k, &idx, &uuid) < 0);
    CHECK(device_name_parse("cuda:", &k, &idx, &uuid) < 0);
    CHECK(device_name_parse("cuda:-1", &k, &idx, &uuid) < 0);
    CHECK(device_name_parse("cuda:99999", &k, &idx, &uuid) < 0);
    CHECK(device_name_parse("cuda:1x", &k, &idx, &uuid) < 0);
    CHECK(device_name_parse("GPU-zz", &k, &idx, &uuid) < 0);
    CHECK(device_name_parse("tpu", &k, &idx, &uuid) < 0);
}

int main(void)
{
    RUN(syntax);
    return TEST_SUMMARY();
}
