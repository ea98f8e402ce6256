/* rnn-helper.c - for tests/test-torch-rnn.py: kiln's recurrent layers against PyTorch's, through
 * checkpoints.
 *   rnn-helper SPEC KIND INPUT HIDDEN LAYERS BIDIR BATCH_FIRST run IN OUT
 *     KIND lstm, gru, rnn_tanh or rnn_relu; a layer of other weights (seed 77) loads IN's
 *     state_dict entries (PyTorch's names), runs IN's "x" with its optional "lengths" (i64),
 *     "h0" and "c0", and back-propagates loss = sum(y gy) + sum(h_n ghn) (+ sum(c_n gcn)) with
 *     IN's "gy", "ghn", "gcn". Writes "y", "h_n", "c_n", "grad.x", "grad.h0", "grad.c0" and
 *     "grad.<parameter>" to OUT.
 *   rnn-helper SPEC KIND INPUT HIDDEN LAYERS BIDIR BATCH_FIRST save OUT
 *     a layer drawn with seed 5: its state_dict, "x" (seed 9, 5 steps of a batch of 3) and
 *     "y", its output, to OUT.
 * Exit 0, or 1 with kiln's message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

static int fail(const char *what, kiln_status s)
{
    fprintf(stderr, "rnn-helper: %s: %s: %s\n", what, kiln_status_string(s), kiln_last_error());
    return 1;
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        kiln_status s_ = (call);                                                                   \
        if (s_ != KILN_OK)                                                                         \
            return fail(#call, s_);                                                                \
    } while (0)

/* sum(t g) added to *acc (a new tensor), or acc unchanged when g is NULL. */
static kiln_status add_dot(kiln_tensor **acc, const kiln_tensor *t, const kiln_tensor *g)
{
    if (!g)
        return KILN_OK;
    kiln_tensor *p = NULL, *s = NULL, *sum = NULL;
    kiln_status st = kiln_mul(t, g, &p);
    if (st == KILN_OK)
        st = kiln_reduce(KILN_REDUCE_SUM, p, KILN_ALL_AXES, false, &s);
    if (st == KILN_OK && *acc)
        st = kiln_add(*acc, s, &sum);
    kiln_tensor_release(p);
    if (st == KILN_OK && *acc) {
        kiln_tensor_release(*acc);
        kiln_tensor_release(s);
        *acc = sum;
    } else if (st == KILN_OK) {
        *acc = s;
    } else {
        kiln_tensor_release(s);
    }
    return st;
}

int main(int argc, char **argv)
{
    bool run = argc == 11 && strcmp(argv[8], "run") == 0;
    if (!run && !(argc == 10 && strcmp(argv[8], "save") == 0)) {
        fprintf(stderr, "usage: rnn-helper SPEC KIND INPUT HIDDEN LAYERS BIDIR BATCH_FIRST "
                        "run IN OUT | ... save OUT\n");
        return 2;
    }
    const char *kind = argv[2];
    int64_t input = atoll(argv[3]), hidden = atoll(argv[4]);
    kiln_rnn_options o = {.num_layers = atoi(argv[5]),
                          .bidirectional = atoi(argv[6]) != 0,
                          .batch_first = atoi(argv[7]) != 0,
                          .relu = strcmp(kind, "rnn_relu") == 0};
    bool lstm = strcmp(kind, "lstm") == 0;
    kiln_device *dev;
    TRY(kiln_device_get(argv[1], &dev));
    kiln_module *m = NULL;
    uint64_t seed = run ? 77 : 5;
    if (lstm)
        TRY(kiln_lstm_create(dev, KILN_F32, input, hidden, &o, seed, &m));
    else if (strcmp(kind, "gru") == 0)
        TRY(kiln_gru_create(dev, KILN_F32, input, hidden, &o, seed, &m));
    else
        TRY(kiln_rnn_create(dev, KILN_F32, input, hidden, &o, seed, &m));
    kiln_params *st = NULL;
    TRY(kiln_params_create(&st));
    TRY(kiln_module_state(m, "", st));
    if (!run) {
        const int64_t xs[3] = {o.batch_first ? 3 : 5, o.batch_first ? 5 : 3, input};
        kiln_tensor *x = NULL, *y = NULL;
        TRY(kiln_rand_normal(dev, KILN_F32, 3, xs, 9, 0, 1, &x));
        TRY(kiln_module_forward(m, x, &y));
        TRY(kiln_params_add(st, "x", x));
        TRY(kiln_params_add(st, "y", y));
        TRY(kiln_params_save(st, argv[9]));
        kiln_tensor_release(x);
        kiln_tensor_release(y);
        kiln_params_free(st);
        kiln_module_free(m);
        return 0;
    }
    TRY(kiln_params_load_flags(st, argv[9], KILN_LOAD_NON_STRICT));
    kiln_checkpoint *ck;
    TRY(kiln_load(argv[9], dev, &ck));
    kiln_tensor *x = kiln_checkpoint_find(ck, "x"), *h0 = kiln_checkpoint_find(ck, "h0");
    kiln_tensor *c0 = kiln_checkpoint_find(ck, "c0"), *len = kiln_checkpoint_find(ck, "lengths");
    kiln_tensor *gy = kiln_checkpoint_find(ck, "gy"), *ghn = kiln_checkpoint_find(ck, "ghn");
    kiln_tensor *gcn = kiln_checkpoint_find(ck, "gcn");
    if (!x || !gy || !ghn) {
        fprintf(stderr, "rnn-helper: %s lacks x, gy or ghn\n", argv[9]);
        return 1;
    }
    int64_t lengths[64], nlen = len ? kiln_tensor_numel(len) : 0;
    if (nlen > 64)
        return fail("lengths: more than 64 rows", KILN_ERR_INVALID_ARGUMENT);
    if (len)
        TRY(kiln_tensor_read(len, lengths, (size_t)nlen * sizeof *lengths));
    TRY(kiln_tensor_set_requires_grad(x, true));
    if (h0)
        TRY(kiln_tensor_set_requires_grad(h0, true));
    if (c0)
        TRY(kiln_tensor_set_requires_grad(c0, true));
    kiln_tensor *y = NULL, *hn = NULL, *cn = NULL, *loss = NULL;
    TRY(kiln_rnn_forward(m, x, len ? lengths : NULL, h0, c0, &y, &hn, lstm ? &cn : NULL));
    TRY(add_dot(&loss, y, gy));
    TRY(add_dot(&loss, hn, ghn));
    if (cn)
        TRY(add_dot(&loss, cn, gcn));
    TRY(kiln_backward(loss, NULL, 0));
    kiln_params *out = NULL;
    TRY(kiln_params_create(&out));
    TRY(kiln_params_add(out, "y", y));
    TRY(kiln_params_add(out, "h_n", hn));
    if (cn)
        TRY(kiln_params_add(out, "c_n", cn));
    TRY(kiln_params_add(out, "grad.x", kiln_tensor_grad(x)));
    if (h0)
        TRY(kiln_params_add(out, "grad.h0", kiln_tensor_grad(h0)));
    if (c0)
        TRY(kiln_params_add(out, "grad.c0", kiln_tensor_grad(c0)));
    kiln_params *params = NULL;
    TRY(kiln_params_create(&params));
    TRY(kiln_module_params(m, "", params));
    for (int i = 0; i < kiln_params_count(params); i++) {
        char name[128];
        snprintf(name, sizeof name, "grad.%s", kiln_params_name(params, i));
        TRY(kiln_params_add(out, name, kiln_tensor_grad(kiln_params_tensor(params, i))));
    }
    TRY(kiln_params_save(out, argv[10]));
    kiln_params_free(params);
    kiln_params_free(out);
    kiln_tensor_release(y);
    kiln_tensor_release(hn);
    kiln_tensor_release(cn);
    kiln_tensor_release(loss);
    kiln_checkpoint_free(ck);
    kiln_params_free(st);
    kiln_module_free(m);
    return 0;
}
