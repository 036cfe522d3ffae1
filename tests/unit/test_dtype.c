/* Tests for core/format/dtype.c: the table agrees with the safetensors crate and NumPy. */
#include <string.h>

#include "dtype.h"
#include "test.h"
#include "util.h"

TEST(bits)
{
    static const struct {
        enum dtype dt;
        unsigned bits;
    } want[] = {
        {DT_BOOL, 8},        {DT_U8, 8},          {DT_I8, 8},           {DT_U16, 16},
        {DT_I16, 16},        {DT_F16, 16},        {DT_BF16, 16},        {DT_U32, 32},
        {DT_I32, 32},        {DT_F32, 32},        {DT_U64, 64},         {DT_I64, 64},
        {DT_F64, 64},        {DT_C64, 64},        {DT_F8_E4M3, 8},      {DT_F8_E5M2, 8},
        {DT_F8_E4M3FNUZ, 8}, {DT_F8_E5M2FNUZ, 8}, {DT_F8_E8M0, 8},      {DT_F6_E2M3, 6},
        {DT_F6_E3M2, 6},     {DT_F4, 4},
    };
    CHECK_EQ_U64(ARRAY_LEN(want), DT_COUNT);
    for (size_t i = 0; i < ARRAY_LEN(want); i++) {
        const struct dtype_info *di = dtype_info(want[i].dt);
        CHECK(di != NULL);
        if (di)
            CHECK_EQ_U64(di->bits, want[i].bits);
    }
}

TEST(names_round_trip)
{
    for (int d = 0; d < DT_COUNT; d++) {
        const struct dtype_info *di = dtype_info((enum dtype)d);
        CHECK(di != NULL && di->name != NULL);
        if (!di || !di->name)
            continue;
        CHECK(dtype_from_name(di->name, strlen(di->name)) == (enum dtype)d);
        /* Names are unique. */
        for (int k = 0; k < d; k++)
            CHECK(strcmp(dtype_info((enum dtype)k)->name, di->name) != 0);
    }
    CHECK_STR(dtype_info(DT_BF16)->name, "BF16");
    CHECK_STR(dtype_info(DT_F8_E4M3FNUZ)->name, "F8_E4M3FNUZ");
    CHECK(dtype_info(DT_COUNT) == NULL);
    CHECK(dtype_info(DT_INVALID) == NULL);
}

TEST(unknown_names)
{
    CHECK(dtype_from_name("", 0) == DT_INVALID);
    CHECK(dtype_from_name("f32", 3) == DT_INVALID);
    CHECK(dtype_from_name("Bf16", 4) == DT_INVALID);
    CHECK(dtype_from_name("bool", 4) == DT_INVALID);
    CHECK(dtype_from_name("F32 ", 4) == DT_INVALID);
    CHECK(dtype_from_name("F8", 2) == DT_INVALID);
    CHECK(dtype_from_name("C128", 4) == DT_INVALID);
    CHECK(dtype_from_name("F8_E4M3FN", 9) == DT_INVALID);
    /* The length counts: a prefix of a longer name, or a name with a NUL after it. */
    CHECK(dtype_from_name("F32", 2) == DT_INVALID);
    CHECK(dtype_from_name("F8_E4M3FNUZ", 7) == DT_F8_E4M3);
    CHECK(dtype_from_name("F16\0", 4) == DT_INVALID);
    CHECK(dtype_from_name("F16xyz", 3) == DT_F16);
}

TEST(npy_descr)
{
    static const struct {
        enum dtype dt;
        const char *descr;
    } native[] = {
        {DT_BOOL, "|b1"}, {DT_U8, "|u1"},  {DT_I8, "|i1"},  {DT_U16, "<u2"},
        {DT_I16, "<i2"},  {DT_F16, "<f2"}, {DT_U32, "<u4"}, {DT_I32, "<i4"},
        {DT_F32, "<f4"},  {DT_U64, "<u8"}, {DT_I64, "<i8"}, {DT_F64, "<f8"},
        {DT_C64, "<c8"},
    };
    for (size_t i = 0; i < ARRAY_LEN(native); i++)
        CHECK_STR(dtype_info(native[i].dt)->npy_descr, native[i].descr);
    /* NumPy has none of these natively. */
    enum dtype none[] = {DT_BF16,        DT_F8_E4M3,  DT_F8_E5M2,  DT_F8_E4M3FNUZ, DT_F8_E5M2FNUZ,
                         DT_F8_E8M0,     DT_F6_E2M3,  DT_F6_E3M2,  DT_F4};
    for (size_t i = 0; i < ARRAY_LEN(none); i++)
        CHECK(dtype_info(none[i])->npy_descr == NULL);
    CHECK_EQ_U64(ARRAY_LEN(native) + ARRAY_LEN(none), DT_COUNT);
    /* The item size in a descriptor matches the bit width. */
    for (size_t i = 0; i < ARRAY_LEN(native); i++) {
        const struct dtype_info *di = dtype_info(native[i].dt);
        CHECK_EQ_U64((unsigned)(di->npy_descr[2] - '0') * 8, di->bits);
    }
}

int main(void)
{
    RUN(bits);
    RUN(names_round_trip);
    RUN(unknown_names);
    RUN(npy_descr);
    return TEST_SUMMARY();
}
