/* test-zerodim.c - 0-d tensors (shape [], one element): creation, reshape to and from [],
 * broadcasting with every rank, unary, binary and reduce ops, item, text, checkpoints and
 * gradients, each against values worked out here. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln.h"
#include "testutil.h"

static kiln_device *dev;

static void setup(void)
{
    setup_devices();
    dev = test_device();
}

static void teardown(void)
{
    teardown_devices();
}

static kiln_tensor *scalar_f32(float v)
{
    kiln_tensor *t = NULL;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 0, NULL, &v, &t));
    return t;
}

static double item(const kiln_tensor *t)
{
    double v;
    ASSERT_OK(kiln_tensor_item(t, &v));
    return v;
}

START_TEST(test_create)
{
    kiln_tensor *t = scalar_f32(3.5f), *z = NULL, *f = NULL, *e = NULL, *i = NULL;
    ck_assert_int_eq(kiln_tensor_ndim(t), 0);
    ck_assert_int_eq(kiln_tensor_numel(t), 1);
    ck_assert_uint_eq(kiln_tensor_nbytes(t), 4);
    ck_assert_double_eq(item(t), 3.5);
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_I64, 0, NULL, &z));
    ck_assert_double_eq(item(z), 0);
    int64_t ignored = 7; /* the shape of a 0-d tensor is not read */
    ASSERT_OK(kiln_full(dev, has_fp64(dev) ? KILN_F64 : KILN_F32, 0, &ignored, -2.25, &f));
    ck_assert_int_eq(kiln_tensor_ndim(f), 0);
    ck_assert_double_eq(item(f), -2.25);
    ASSERT_OK(kiln_tensor_empty(dev, KILN_U8, 0, NULL, &e));
    ck_assert_int_eq(kiln_tensor_numel(e), 1);
    int32_t iv = -42;
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_I32, 0, NULL, &iv, &i));
    int64_t got;
    ASSERT_OK(kiln_tensor_item_i64(i, &got));
    ck_assert_int_eq(got, -42);
    /* Random numbers: the 0-d tensor holds what a [1] one of the same seed does. */
    kiln_tensor *r0 = NULL, *r1 = NULL;
    ASSERT_OK(kiln_rand_normal(dev, KILN_F32, 0, NULL, 42, 0, 1, &r0));
    ASSERT_OK(kiln_rand_normal(dev, KILN_F32, 1, (int64_t[]){1}, 42, 0, 1, &r1));
    ck_assert_int_eq(kiln_tensor_ndim(r0), 0);
    ck_assert_double_eq(item(r0), item(r1));
    kiln_tensor_release(r0);
    kiln_tensor_release(r1);
    kiln_tensor *bad = NULL;
    ASSERT_FAILS(kiln_tensor_empty(dev, KILN_F32, -1, NULL, &bad), KILN_ERR_INVALID_ARGUMENT,
                 "0 to 8 dimensions");
    ASSERT_FAILS(kiln_tensor_empty(dev, KILN_F32, 1, NULL, &bad), KILN_ERR_INVALID_ARGUMENT,
                 "shape is NULL");
    kiln_tensor *ts[] = {t, z, f, e, i};
    for (size_t k = 0; k < 5; k++)
        kiln_tensor_release(ts[k]);
}
END_TEST

START_TEST(test_reshape)
{
    kiln_tensor *t = scalar_f32(2.0f), *a = NULL, *b = NULL, *c = NULL, *v = NULL, *bad = NULL;
    ASSERT_OK(kiln_tensor_reshape(t, 2, (int64_t[]){1, 1}, &a));
    ck_assert_int_eq(kiln_tensor_ndim(a), 2);
    ASSERT_OK(kiln_tensor_reshape(a, 0, NULL, &b));
    ck_assert_int_eq(kiln_tensor_ndim(b), 0);
    ck_assert_double_eq(item(b), 2.0);
    ASSERT_OK(kiln_tensor_reshape(t, 1, (int64_t[]){-1}, &c));
    ck_assert_int_eq(kiln_tensor_shape(c)[0], 1);
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, (int64_t[]){2}, (float[]){1, 2}, &v));
    ASSERT_FAILS(kiln_tensor_reshape(v, 0, NULL, &bad), KILN_ERR_SHAPE_MISMATCH, "[]");
    kiln_tensor *ts[] = {t, a, b, c, v};
    for (size_t k = 0; k < 5; k++)
        kiln_tensor_release(ts[k]);
}
END_TEST

START_TEST(test_ops)
{
    kiln_tensor *s = scalar_f32(1.5f), *m = NULL, *r = NULL;
    float mv[6] = {1, -2, 3, -4, 5, -6};
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 2, (int64_t[]){2, 3}, mv, &m));
    /* [] with [2, 3], both ways round */
    ASSERT_OK(kiln_mul(s, m, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 2);
    double *got = download(r);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(got[i], 1.5 * mv[i]);
    free(got);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_sub(m, s, &r));
    got = download(r);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(got[i], mv[i] - 1.5);
    free(got);
    kiln_tensor_release(r);
    /* [] with [] is [] */
    ASSERT_OK(kiln_add(s, s, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    ck_assert_double_eq(item(r), 3.0);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_binary(KILN_BINARY_LT, s, m, &r)); /* comparison: u8 [2, 3] */
    got = download(r);
    for (int i = 0; i < 6; i++)
        ck_assert_double_eq(got[i], 1.5 < mv[i]);
    free(got);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_binary_scalar(KILN_BINARY_MUL, s, 4.0, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    ck_assert_double_eq(item(r), 6.0);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_unary(KILN_UNARY_NEG, s, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    ck_assert_double_eq(item(r), -1.5);
    kiln_tensor_release(r);
    /* The _out forms with a [] out. */
    kiln_tensor *o = NULL;
    ASSERT_OK(kiln_tensor_empty(dev, KILN_F32, 0, NULL, &o));
    ASSERT_OK(kiln_add_out(s, s, o));
    ck_assert_double_eq(item(o), 3.0);
    ASSERT_FAILS(kiln_add_out(s, m, o), KILN_ERR_SHAPE_MISMATCH, "[]");
    /* Reductions of a 0-d tensor give a 0-d tensor; those of others keep their shapes. */
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, s, KILN_ALL_AXES, false, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    ck_assert_double_eq(item(r), 1.5);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_reduce(KILN_REDUCE_MAX, s, -1, true, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    ck_assert_double_eq(item(r), 1.5);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_reduce_out(KILN_REDUCE_MEAN, s, 0, false, o));
    ck_assert_double_eq(item(o), 1.5);
    ASSERT_FAILS(kiln_reduce(KILN_REDUCE_SUM, s, 1, false, &r), KILN_ERR_INVALID_ARGUMENT,
                 "out of range");
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, m, KILN_ALL_AXES, false, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 1); /* unchanged: [1] */
    ck_assert_double_eq(item(r), -3.0);
    kiln_tensor_release(r);
    /* Ops that need axes or ranks refuse a 0-d tensor with a message. */
    ASSERT_FAILS(kiln_matmul(s, m, &r), KILN_ERR_SHAPE_MISMATCH, "");
    ck_assert_ptr_null(r);
    ASSERT_FAILS(kiln_softmax(s, 0, &r), KILN_ERR_INVALID_ARGUMENT, "out of range");
    ASSERT_FAILS(kiln_slice(s, 0, 0, 1, &r), KILN_ERR_INVALID_ARGUMENT, "");
    /* permute with no axes is a copy */
    ASSERT_OK(kiln_permute(s, (int[]){0}, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    ck_assert_double_eq(item(r), 1.5);
    kiln_tensor_release(r);
    ASSERT_OK(kiln_cast(s, KILN_I32, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    ck_assert_double_eq(item(r), 1);
    kiln_tensor_release(r);
    /* A copy to the same device and a clone stay 0-d. */
    ASSERT_OK(kiln_tensor_clone(s, &r));
    ck_assert_int_eq(kiln_tensor_ndim(r), 0);
    kiln_tensor_release(r);
    kiln_tensor_release(o);
    kiln_tensor_release(s);
    kiln_tensor_release(m);
}
END_TEST

START_TEST(test_text_and_checkpoint)
{
    kiln_tensor *s = scalar_f32(3.5f);
    char buf[256];
    ASSERT_OK(kiln_tensor_format(s, buf, sizeof buf, NULL));
    char want[128];
    snprintf(want, sizeof want, "tensor(3.5000, shape=[], dtype=f32, device=%s)",
             kiln_device_spec(dev));
    ck_assert_str_eq(buf, want);
    char path[] = "/tmp/kiln-zerodim-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ASSERT_OK(kiln_save(path, (kiln_named_tensor[]){{"s", s}}, 1));
    kiln_checkpoint *ck = NULL;
    ASSERT_OK(kiln_load(path, dev, &ck));
    kiln_tensor *l = kiln_checkpoint_find(ck, "s");
    ck_assert_int_eq(kiln_tensor_ndim(l), 0);
    ck_assert_double_eq(item(l), 3.5);
    /* load_into a 0-d tensor; a [1] one has another shape */
    kiln_tensor *into = NULL, *one = NULL;
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 0, NULL, &into));
    ASSERT_OK(kiln_load_into(path, (kiln_named_tensor[]){{"s", into}}, 1));
    ck_assert_double_eq(item(into), 3.5);
    ASSERT_OK(kiln_tensor_zeros(dev, KILN_F32, 1, (int64_t[]){1}, &one));
    ASSERT_FAILS(kiln_load_into(path, (kiln_named_tensor[]){{"s", one}}, 1),
                 KILN_ERR_SHAPE_MISMATCH, "[]");
    kiln_checkpoint_free(ck);
    kiln_tensor_release(into);
    kiln_tensor_release(one);
    kiln_tensor_release(s);
    unlink(path);
}
END_TEST

/* d/dx sum(x * v) = sum(v) for a 0-d x: the gradient is summed back to shape []. */
START_TEST(test_autograd)
{
    kiln_tensor *x = scalar_f32(2.0f), *v = NULL, *xv = NULL, *loss = NULL, *y = NULL;
    ASSERT_OK(kiln_tensor_set_requires_grad(x, true));
    float vv[3] = {1, 2, 4};
    ASSERT_OK(kiln_tensor_from_host(dev, KILN_F32, 1, (int64_t[]){3}, vv, &v));
    ASSERT_OK(kiln_mul(x, v, &xv));
    ASSERT_OK(kiln_reduce(KILN_REDUCE_SUM, xv, KILN_ALL_AXES, false, &loss));
    ASSERT_OK(kiln_backward(loss, NULL, 0));
    kiln_tensor *g = kiln_tensor_grad(x);
    ck_assert_int_eq(kiln_tensor_ndim(g), 0);
    ck_assert_double_eq(item(g), 7.0);
    /* A 0-d loss: backward from x * x. */
    ASSERT_OK(kiln_tensor_zero_grad(x));
    ASSERT_OK(kiln_mul(x, x, &y));
    ck_assert_int_eq(kiln_tensor_ndim(y), 0);
    ASSERT_OK(kiln_backward(y, NULL, 0));
    ck_assert_double_eq(item(kiln_tensor_grad(x)), 4.0);
    kiln_tensor *ts[] = {x, v, xv, loss, y};
    for (size_t k = 0; k < 5; k++)
        kiln_tensor_release(ts[k]);
}
END_TEST

Suite *zerodim_suite(void)
{
    Suite *s = suite_create("zerodim");
    TCase *tc = tcase_create("zerodim");
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_create);
    tcase_add_test(tc, test_reshape);
    tcase_add_test(tc, test_ops);
    tcase_add_test(tc, test_text_and_checkpoint);
    tcase_add_test(tc, test_autograd);
    suite_add_tcase(s, tc);
    return s;
}
