/* torch-helper.c - for tests/test-torch.py: kiln's CNN modules against PyTorch's, through
 * checkpoints. The model is PyTorch's
 *     Sequential(Conv2d(1, 4, 3, padding=1), BatchNorm2d(4), ReLU(), MaxPool2d(2), Flatten(),
 *                Linear(16, 3))
 * on x [2, 1, 4, 4].
 *   torch-helper SPEC save OUT: the model (seed 5) after two training-mode forwards (so the
 *     batch-norm buffers moved and num_batches_tracked is 2), then in evaluation mode: writes
 *     its kiln_module_state, "x" and "y" = the model(x) to OUT.
 *   torch-helper SPEC load IN OUT: a model with other weights (seed 77), IN loaded into its
 *     state (not strict: IN also holds "x"), evaluation mode: writes "y" = the model(IN's x) and
 *     "num_batches_tracked" to OUT.
 *   torch-helper SPEC bf16 IN OUT: bf16 against PyTorch's: IN holds "x" (f32), "h" (bf16, every
 *     bit pattern), "a" [m, k], "b" [k, n], "w" [o, k] and "bias" [o] (bf16); writes "x_bf16" =
 *     cast(x), "h" as loaded, "h_f32" = cast(h), "ab" = a @ b, "lin" = linear(a, w, bias) and
 *     "sum" = a summed over axis 1, all but h_f32 in bf16.
 * Exit 0, or 1 with kiln's message. */
#include <stdio.h>
#include <string.h>

#include "kiln.h"

static int fail(const char *what, kiln_status s)
{
    fprintf(stderr, "torch-helper: %s: %s: %s\n", what, kiln_status_string(s), kiln_last_error());
    return 1;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        kiln_status s_ = (call);                                                                   \
        if (s_ != KILN_OK)                                                                         \
            return fail(#call, s_);                                                                \
    } while (0)

static kiln_status model(kiln_device *dev, uint64_t seed, kiln_module **out)
{
    const kiln_conv2d_params same = {.padding = {1, 1}};
    const kiln_pool2d_params halve = {.kernel = {2, 2}};
    kiln_module *m[6] = {0};
    kiln_status s = kiln_conv2d_create(dev, KILN_F32, 1, 4, 3, 3, &same, true, seed, &m[0]);
    if (s == KILN_OK)
        s = kiln_batch_norm2d_create(dev, KILN_F32, 4, 1e-5, 0.1, &m[1]);
    if (s == KILN_OK)
        s = kiln_activation_create(KILN_UNARY_RELU, &m[2]);
    if (s == KILN_OK)
        s = kiln_max_pool2d_create(&halve, &m[3]);
    if (s == KILN_OK)
        s = kiln_flatten_create(1, -1, &m[4]);
    if (s == KILN_OK)
        s = kiln_linear_create(dev, KILN_F32, 16, 3, true, KILN_INIT_DEFAULT, seed + 1, &m[5]);
    if (s == KILN_OK)
        return kiln_sequential_create(m, 6, out);
    for (int i = 0; i < 6; i++)
        kiln_module_free(m[i]);
    return s;
}

static kiln_tensor *named(kiln_checkpoint *ck, const char *name)
{
    for (int i = 0; i < kiln_checkpoint_count(ck); i++)
        if (strcmp(kiln_checkpoint_name(ck, i), name) == 0)
            return kiln_checkpoint_tensor(ck, i);
    fprintf(stderr, "torch-helper: the file holds no \"%s\"\n", name);
    return NULL;
}

static int bf16_ops(kiln_device *dev, const char *in, const char *out)
{
    kiln_checkpoint *ck;
    TRY(kiln_load(in, dev, &ck));
    kiln_tensor *x = named(ck, "x"), *h = named(ck, "h"), *a = named(ck, "a"), *b = named(ck, "b");
    kiln_tensor *w = named(ck, "w"), *bias = named(ck, "bias");
    if (!x || !h || !a || !b || !w || !bias)
        return 1;
    kiln_tensor *r[5] = {0};
    TRY(kiln_cast(x, KILN_BF16, &r[0]));
    TRY(kiln_cast(h, KILN_F32, &r[1]));
    TRY(kiln_matmul(a, b, &r[2]));
    TRY(kiln_linear(a, w, bias, &r[3]));
    TRY(kiln_reduce(KILN_REDUCE_SUM, a, 1, false, &r[4]));
    const char *names[5] = {"x_bf16", "h_f32", "ab", "lin", "sum"};
    kiln_params *ps;
    TRY(kiln_params_create(&ps));
    TRY(kiln_params_add(ps, "h", h));
    for (int i = 0; i < 5; i++)
        TRY(kiln_params_add(ps, names[i], r[i]));
    TRY(kiln_params_save(ps, out));
    kiln_params_free(ps);
    for (int i = 0; i < 5; i++)
        kiln_tensor_release(r[i]);
    kiln_checkpoint_free(ck);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[2], "bf16") == 0) {
        kiln_device *dev;
        TRY(kiln_device_get(argv[1], &dev));
        return bf16_ops(dev, argv[3], argv[4]);
    }
    bool save = argc == 4 && strcmp(argv[2], "save") == 0;
    if (!save && !(argc == 5 && strcmp(argv[2], "load") == 0)) {
        fprintf(stderr, "usage: torch-helper SPEC save OUT | torch-helper SPEC load IN OUT | "
                        "torch-helper SPEC bf16 IN OUT\n");
        return 2;
    }
    kiln_device *dev;
    TRY(kiln_device_get(argv[1], &dev));
    kiln_module *m = NULL;
    kiln_params *st = NULL;
    TRY(model(dev, save ? 5 : 77, &m));
    TRY(kiln_params_create(&st));
    TRY(kiln_module_state(m, "", st));
    const int64_t xs[4] = {2, 1, 4, 4};
    kiln_tensor *x = NULL, *y = NULL;
    if (save) {
        for (uint64_t k = 0; k < 2; k++) {
            TRY(kiln_rand_normal(dev, KILN_F32, 4, xs, 100 + k, 0, 1, &x));
            TRY(kiln_module_forward(m, x, &y));
            kiln_tensor_release(x);
            kiln_tensor_release(y);
        }
        TRY(kiln_rand_normal(dev, KILN_F32, 4, xs, 9, 0, 1, &x));
    } else {
        TRY(kiln_params_load_flags(st, argv[3], KILN_LOAD_NON_STRICT));
        kiln_checkpoint *ck;
        TRY(kiln_load(argv[3], dev, &ck));
        for (int i = 0; i < kiln_checkpoint_count(ck); i++)
            if (strcmp(kiln_checkpoint_name(ck, i), "x") == 0)
                x = kiln_checkpoint_tensor(ck, i);
        if (!x) {
            fprintf(stderr, "torch-helper: %s holds no \"x\"\n", argv[3]);
            return 1;
        }
        kiln_tensor_retain(x);
        kiln_checkpoint_free(ck);
    }
    kiln_module_set_training(m, false);
    TRY(kiln_module_forward(m, x, &y));
    kiln_params *out = st;
    if (save) {
        TRY(kiln_params_add(st, "x", x));
    } else {
        TRY(kiln_params_create(&out));
        TRY(kiln_params_add(out, "num_batches_tracked",
                            kiln_params_find(st, "1.num_batches_tracked")));
    }
    TRY(kiln_params_add(out, "y", y));
    TRY(kiln_params_save(out, argv[save ? 3 : 4]));
    kiln_tensor_release(x);
    kiln_tensor_release(y);
    if (out != st)
        kiln_params_free(out);
    kiln_params_free(st);
    kiln_module_free(m);
    return 0;
}
