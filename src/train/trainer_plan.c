/*
 * trainer_plan.c — the resolved plan of a run as its settings: every key's value as the run uses
 * it (the recipe's choices and the resolved LoRA layers included) with its origin (default,
 * caller, resume, config, flag, recipe), printed by `afinar check` and written to run.json.
 */
#include "train/settings_internal.h"
#include "train/trainer_internal.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

void af_tr_layers_text(const af_trainer *t, char *buf, size_t cap) {
    if (t->layer_list) { /* --layers-to-transform: the list */
        size_t at = 0;
        buf[0] = 0;
        for (int32_t i = 0; i < t->n_layer_list && at < cap; i++)
            at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "", (int)t->layer_list[i]);
        return;
    }
    const int32_t n = t->model->cfg.num_hidden_layers, end = t->layer_end > 0 ? t->layer_end : n;
    if (t->layer_min == 0 && end == n) snprintf(buf, cap, "all");
    else if (end == n) snprintf(buf, cap, "top%d", (int)(n - t->layer_min));
    else snprintf(buf, cap, "%d-%d", (int)t->layer_min, (int)end - 1);
}

/* Key i's value as the run uses it: the options' field, except the LoRA layers (the resolved
 * range; none when --layers-to-transform lists them) and the class weights of a classification run (the spec applied, "uniform" included). */
static const char *plan_value(const af_trainer *t, int32_t i, char *buf, size_t cap) {
    const char *name = af_train_setting_keys(NULL)[i].name;
    if (!strcmp(name, "lora-layers") && t->layer_list) snprintf(buf, cap, "none (layers-to-transform)");
    else if (!strcmp(name, "lora-layers") && t->model) af_tr_layers_text(t, buf, cap);
    else af_setting_format(i, t->o, buf, cap);
    return buf;
}

void af_tr_plan_print(const af_trainer *t, FILE *fp) {
    int32_t n;
    const af_setting_info *keys = af_train_setting_keys(&n);
    fprintf(fp, "settings (value, origin: default | caller | resume | config | flag | recipe):\n");
    const char *group = NULL;
    int col = 0;
    for (int32_t i = 0; i < n; i++) {
        if (t->o->check_only && keys[i].train_only) continue;
        char v[160], item[256];
        plan_value(t, i, v, sizeof v);
        const int len = snprintf(item, sizeof item, "%s %s (%s)", keys[i].name, v,
                                 af_setting_origin_name((af_setting_origin)t->o->origin[i]));
        if (!group || strcmp(group, keys[i].group) != 0) { /* a line per group, wrapped at 100 columns */
            if (group) fputc('\n', fp);
            group = keys[i].group;
            col = fprintf(fp, "  %s: %s", group, item);
        } else if (col + 2 + len > 100) {
            fprintf(fp, ",\n    %s", item);
            col = 4 + len;
        } else {
            col += fprintf(fp, ", %s", item);
        }
    }
    fputc('\n', fp);
}

cJSON *af_tr_plan_json(const af_trainer *t) {
    int32_t n;
    const af_setting_info *keys = af_train_setting_keys(&n);
    cJSON *j = cJSON_CreateObject();
    for (int32_t i = 0; j && i < n; i++) {
        if (t->o->origin[i] == AF_ORIGIN_DEFAULT) continue; /* a key left out: its default */
        char v[160], item[320];
        snprintf(item, sizeof item, "%s (%s)", plan_value(t, i, v, sizeof v),
                 af_setting_origin_name((af_setting_origin)t->o->origin[i]));
        if (!cJSON_AddStringToObject(j, keys[i].name, item)) {
            cJSON_Delete(j);
            return NULL;
        }
    }
    return j;
}
