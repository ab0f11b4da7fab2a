/* test_risk: the risk chart of a `dpprof risk` document (dpplot_risk_chart): its size, each
 * method's curve in its colour, the budget's red line at its x, and one-line refusals naming the
 * field of a document that is not a risk document or lacks a field. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"

static const char *const DOC =
    "{\"kind\":\"dpprof.risk\",\"budget_bytes\":1000,\"steps\":10000,\"sample_rate\":0.001,\"dataset_size\":50000,"
    "\"max_physical_batch_size\":8,\"whole_logical_batch\":false,\"methods\":["
    "{\"method\":\"vanilla\",\"probability\":0.5,\"per_step\":6.9e-05,"
    "\"cdf\":[{\"bytes\":200,\"p\":0},{\"bytes\":500,\"p\":0.4},{\"bytes\":900,\"p\":0.9},{\"bytes\":1000,\"p\":0."
    "99993},"
    "{\"bytes\":1400,\"p\":1}]},"
    "{\"method\":\"flash_clip\",\"probability\":0.0001,\"per_step\":1e-08,"
    "\"cdf\":[{\"bytes\":150,\"p\":0},{\"bytes\":400,\"p\":0.5},{\"bytes\":700,\"p\":0.97},{\"bytes\":1000,\"p\":1}]}]"
    "}";

static void test_chart(void) {
    const char *path = DPPLOT_TEST_OUT "/risk.png";
    char err[512];
    int rc = dpplot_risk_chart(DOC, path, 1200, 800, 1.0, err, sizeof err);
    tu_check(rc == 0, "the chart is drawn: %s", err);
    const char *methods[] = {"vanilla", "flash_clip"};
    tu_check_chart(path, 1200, 800, methods, 2, 200);
    tu_image *img = tu_image_load(path);
    if (!img) return;
    dpplot_rgb red = {0.85, 0.1, 0.1};
    size_t budget_px = tu_image_count_color(img, red, 30);
    tu_check(budget_px > 100, "the budget's red line is drawn (%zu px)", budget_px);
    /* the budget (1000 B) lies at 1000 / 1470 of the x range: in the right part, not the left third */
    size_t left = tu_image_count_color_in(img, red, 30, 0.0, 0.2, 0.4, 1.0);
    size_t right = tu_image_count_color_in(img, red, 30, 0.5, 0.2, 0.9, 1.0);
    tu_check(right > 100 && left < right / 10, "the budget line lies right of the middle (left %zu, right %zu px)",
             left, right);
    tu_image_free(img);
}

/* A method whose curve coincides with a later one's lies under it: the chart says so (issue 38.4:
 * the risk chart hid a method under another with no note); distinct curves get no note. */
static void test_coincide(void) {
    static const char *const doc =
        "{\"kind\":\"dpprof.risk\",\"budget_bytes\":1000,\"steps\":100,\"sample_rate\":0.01,\"dataset_size\":5000,"
        "\"max_physical_batch_size\":8,\"whole_logical_batch\":false,\"methods\":["
        "{\"method\":\"vanilla\",\"probability\":0.01,\"per_step\":1e-04,"
        "\"cdf\":[{\"bytes\":200,\"p\":0},{\"bytes\":500,\"p\":0.5},{\"bytes\":1100,\"p\":1}]},"
        "{\"method\":\"ghost\",\"probability\":0.5,\"per_step\":7e-03,"
        "\"cdf\":[{\"bytes\":300,\"p\":0},{\"bytes\":900,\"p\":0.6},{\"bytes\":1400,\"p\":1}]},"
        "{\"method\":\"flash_clip\",\"probability\":0.01,\"per_step\":1e-04,"
        "\"cdf\":[{\"bytes\":200,\"p\":0},{\"bytes\":500,\"p\":0.5},{\"bytes\":1100,\"p\":1}]}]}";
    char err[512], note[512];
    int rc = dpplot_risk_chart_noted(doc, DPPLOT_TEST_OUT "/risk_coincide.png", 1200, 800, 1.0, note, sizeof note, err,
                                     sizeof err);
    tu_check(rc == 0, "coincide: drawn: %s", err);
    tu_check(strcmp(note, "vanilla coincides with flash_clip (drawn under it)") == 0, "coincide: the note: '%s'", note);
    rc = dpplot_risk_chart_noted(DOC, DPPLOT_TEST_OUT "/risk_distinct.png", 1200, 800, 1.0, note, sizeof note, err,
                                 sizeof err);
    tu_check(rc == 0 && note[0] == '\0', "distinct curves: no note ('%s')", note);
}

/* The subtitle names the configuration planned (issue 38.4: the charts left out what was not
 * swept): checkpoint, dtype, cut, LoRA (its default targets said as the default), optimizer,
 * device model; full fine-tuning said so. */
static void test_config_line(void) {
    char buf[1024];
    int rc = dpplot_risk_config("{\"kind\":\"dpprof.risk\",\"seq_len\":4096,\"device_model\":{\"name\":\"h100\"},"
                                "\"optimizer\":{\"name\":\"adamw\"},\"model\":{\"path\":\"tests/fixtures/llama3_8b\","
                                "\"dtype\":\"bf16\",\"lora\":{\"rank\":16}}}",
                                buf, sizeof buf);
    tu_check(rc == 0 && strcmp(buf, "llama3_8b  \xc2\xb7  bf16  \xc2\xb7  seq_len 4096  \xc2\xb7  LoRA rank 16 on qkv (the "
                                    "default)  \xc2\xb7  adamw  \xc2\xb7  h100 model") == 0,
             "the LoRA configuration: '%s'", buf);
    rc = dpplot_risk_config("{\"model\":{\"arch\":\"gpt\",\"lora\":{\"rank\":4,\"targets\":[\"qkv\",\"fc\"]}},"
                            "\"optimizer\":{\"name\":\"sgd\"}}",
                            buf, sizeof buf);
    tu_check(rc == 0 && strcmp(buf, "gpt  \xc2\xb7  LoRA rank 4 on qkv,fc  \xc2\xb7  sgd") == 0, "targets given: '%s'", buf);
    rc = dpplot_risk_config("{\"model\":{\"arch\":\"gpt\"}}", buf, sizeof buf);
    tu_check(rc == 0 && strcmp(buf, "gpt  \xc2\xb7  full fine-tuning") == 0, "full fine-tuning: '%s'", buf);
    tu_check(dpplot_risk_config("not json", buf, sizeof buf) == -1, "not JSON");
}

static void test_refusals(void) {
    char err[512];
    const char *path = DPPLOT_TEST_OUT "/risk_bad.png";
    int rc = dpplot_risk_chart("{\"kind\":\"results\"}", path, 1200, 800, 1.0, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "not \"dpprof.risk\"") != NULL, "another kind is refused: '%s'", err);
    rc =
        dpplot_risk_chart("{\"kind\":\"dpprof.risk\",\"budget_bytes\":\"80G\"}", path, 1200, 800, 1.0, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "'budget_bytes' is missing or not a number") != NULL, "a bad field is named: '%s'",
             err);
    rc = dpplot_risk_chart("{\"kind\":\"dpprof.risk\",\"budget_bytes\":1,\"steps\":1,\"sample_rate\":0.1,"
                           "\"dataset_size\":10,\"max_physical_batch_size\":1,\"methods\":[{\"method\":\"vanilla\","
                           "\"probability\":0.1,\"per_step\":0.1,\"cdf\":[{\"bytes\":1}]}]}",
                           path, 1200, 800, 1.0, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "methods[].cdf[]: 'p' is missing") != NULL, "a CDF point's field is named: '%s'",
             err);
    rc = dpplot_risk_chart("not json", path, 1200, 800, 1.0, err, sizeof err);
    tu_check(rc == -1 && strstr(err, "not JSON") != NULL && !strchr(err, '\n'), "not JSON: '%s'", err);
}

int main(void) {
    test_chart();
    test_refusals();
    test_coincide();
    test_config_line();
    return tu_finish("test_risk");
}
