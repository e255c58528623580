/*
 * fuzz_yaml.c — libFuzzer target for the YAML settings mapping (src/train/settings_yaml.c:
 * af_train_settings_parse_yaml over libyaml, the TRL / PEFT name table, the value translations).
 * Input: the YAML text. Oracles: on success every key of the settings is one of afinar's keys (the
 * alias table maps only to real keys), a boolean key never holds text, and the settings' JSON form
 * (af_train_settings_to_json, what a run stores and writes back as config.yaml) parses as an object
 * of known keys; on failure nothing is returned. Returns the parse status.
 */
#include "fuzz/fuzz_common.h"
#include "train/settings_yaml.h"

#include <cJSON.h>

af_status fz_yaml_one(const uint8_t *data, size_t size) {
    af_train_settings *s = NULL;
    af_status st = af_train_settings_parse_yaml("fuzz.yaml", "config file", (const char *)data, size, &s);
    if (st == AF_OK) {
        FZ_ASSERT(s != NULL);
        int32_t n = 0;
        const af_setting_info *keys = af_train_setting_keys(&n);
        for (int32_t i = 0; i < n; i++) {
            const char *v = af_train_settings_get(s, keys[i].name);
            if (v) FZ_ASSERT(keys[i].kind != AF_SETTING_BOOL);
        }
        char *json = NULL;
        if (af_train_settings_to_json(s, &json) == AF_OK && json) {
            cJSON *j = cJSON_Parse(json);
            FZ_ASSERT(cJSON_IsObject(j));
            const cJSON *e;
            cJSON_ArrayForEach(e, j) {
                int known = 0;
                for (int32_t i = 0; i < n && !known; i++) known = !strcmp(keys[i].name, e->string);
                FZ_ASSERT(known);
            }
            cJSON_Delete(j);
        }
        free(json);
    } else {
        FZ_ASSERT(s == NULL);
    }
    af_train_settings_free(s);
    af_clear_error();
    return st;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)fz_yaml_one(data, size);
    return 0;
}
#endif
