/* trainer_outputs.c — the run directory's files besides checkpoints: metrics.jsonl cut back to
 * the resumed step, the gnuplot curves (curves.png; a gnuplot that fails, hangs or is missing
 * never ends the run), run.json and config.yaml (the settings with their origins and the recipe),
 * eval.json (the last evaluation). Checkpoints: trainer_ckpt.c. */
#include "train/trainer_internal.h"
#include "train/settings_yaml.h"

#include "core/fsutil.h"
#include "train/metrics.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

af_status af_tr_truncate_metrics(const char *out_dir, int64_t step) {
    char *path = af_path_join(out_dir, "metrics.jsonl");
    if (!path) return af_fail(AF_ERR_NOMEM, "out of memory");
    size_t len;
    char *b = af_read_file(path, &len);
    if (!b) {
        free(path);
        return AF_OK;
    }
    size_t w = 0;
    for (char *line = b; *line;) {
        char *nl = strchr(line, '\n');
        if (!nl) break; /* an unterminated last line is a partial write: drop it */
        *nl = 0;
        cJSON *j = cJSON_Parse(line);
        const cJSON *s = j ? cJSON_GetObjectItemCaseSensitive(j, "step") : NULL;
        int keep = cJSON_IsNumber(s) && s->valuedouble <= (double)step;
        cJSON_Delete(j);
        size_t l = (size_t)(nl - line);
        if (keep) {
            memmove(b + w, line, l);
            w += l;
            b[w++] = '\n';
        }
        line = nl + 1;
    }
    af_status st = af_write_file_atomic(path, b, w);
    free(b);
    free(path);
    return st;
}

static int have_gnuplot(void) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[4096];
    for (const char *p = path; *p;) {
        const char *c = strchr(p, ':');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        snprintf(buf, sizeof buf, "%.*s/gnuplot", (int)l, p);
        if (l && access(buf, X_OK) == 0) return 1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

/* Seconds gnuplot may take (AFINAR_PLOT_TIMEOUT, default 60): a gnuplot that hangs is killed. */
static double plot_timeout(void) {
    const char *e = getenv("AFINAR_PLOT_TIMEOUT");
    char *end;
    double v = e ? strtod(e, &end) : 0;
    return e && end != e && !*end && v > 0 && v < 1e6 ? v : 60.0;
}

/* The gnuplot script of metrics.jsonl `b` (data inline) into fp. */
static void plot_script(FILE *gp, char *b, const char *tmp_png) {
    fprintf(gp, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 1000,760 } "
                "else { set terminal png size 1000,760 }\nset output '%s'\n", tmp_png);
    int n_eval = 0, lm = 0;
    for (int pass = 0; pass < 2; pass++) {
        fprintf(gp, "$%s << EOD\n", pass ? "E" : "T");
        for (char *line = b; *line;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            cJSON *j = cJSON_Parse(line);
            if (nl) *nl = '\n';
            const cJSON *ty = j ? cJSON_GetObjectItemCaseSensitive(j, "type") : NULL;
            double s = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "step"));
            if (cJSON_IsString(ty) && !strcmp(ty->valuestring, pass ? "eval" : "train")) {
                const char *k1 = pass ? "accuracy" : "acc";
                double l = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "loss"));
                double a = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, k1));
                if (!cJSON_GetObjectItemCaseSensitive(j, k1)) { /* causal LM: TRL's names */
                    lm = 1;
                    if (pass) l = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "eval_loss"));
                    a = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(
                        j, pass ? "eval_mean_token_accuracy" : "mean_token_accuracy"));
                }
                double f = pass ? cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "macro_f1")) : 0;
                if (isfinite(l) && isfinite(a)) fprintf(gp, "%g %g %g %g\n", s, l, a, isfinite(f) ? f : 0);
                n_eval += pass;
            }
            cJSON_Delete(j);
            if (!nl) break;
            line = nl + 1;
        }
        fprintf(gp, "EOD\n");
    }
    /* classification: accuracy and macro-F1; causal LM: mean token accuracy (no F1) */
    const char *acc = lm ? "token accuracy" : "accuracy";
    fprintf(gp, "set multiplot layout 2,1\nset grid\nset xlabel 'optimizer step'\nset ylabel 'loss'\n"
                "plot $T using 1:2 with lines lc rgb '#88aadd' title 'train loss (per step)'%s\n"
                "set ylabel '%s'\nset yrange [0:1.05]\nset key bottom right\n"
                "plot $T using 1:3 with lines lc rgb '#88aadd' title 'train %s (per step)'",
            n_eval ? ", $E using 1:2 with linespoints lw 2 lc rgb '#cc3333' title 'val loss'" : "", acc, acc);
    if (n_eval) fprintf(gp, ", $E using 1:3 with linespoints lw 2 lc rgb '#cc3333' title 'val %s'", acc);
    if (n_eval && !lm) fprintf(gp, ", $E using 1:4 with linespoints lw 2 lc rgb '#339933' title 'val macro-F1'");
    fprintf(gp, "\nunset multiplot\nset output\n");
}

/* The script goes to a hidden file and gnuplot runs on it as a child process (stdin /dev/null), so
 * a gnuplot that exits early cannot kill the run with SIGPIPE (nothing is piped to it), and one that
 * hangs is killed after plot_timeout() seconds: the run's result never depends on the plot. */
void af_tr_plot(const char *out_dir, FILE *log) {
    if (!have_gnuplot()) {
        if (log) fprintf(log, "plot: gnuplot not found, no curves.png (apt-get install gnuplot-nox)\n");
        return;
    }
    char *mp = af_path_join(out_dir, "metrics.jsonl"), *png = af_path_join(out_dir, "curves.png");
    char *tmp = af_path_join(out_dir, ".curves.png.tmp"), *gpf = af_path_join(out_dir, ".curves.gp.tmp");
    char *b = mp ? af_read_file(mp, NULL) : NULL;
    const int s_png = tmp ? af_temp_file_register(tmp) : -1, s_gp = gpf ? af_temp_file_register(gpf) : -1;
    FILE *gp = (b && png && tmp && gpf) ? fopen(gpf, "w") : NULL;
    int ok = gp != NULL;
    if (gp) {
        plot_script(gp, b, tmp);
        ok = !ferror(gp);
        ok = fclose(gp) == 0 && ok;
    }
    const char *why = ok ? NULL : "cannot write its script or read metrics.jsonl";
    int rc = -1;
    pid_t pid = -1;
    if (ok) {
        char *argv[] = {(char *)"gnuplot", gpf, NULL};
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawnattr_t at; /* its own process group: a hung gnuplot is stopped with its children */
        posix_spawnattr_init(&at);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&at, 0);
        if (posix_spawnp(&pid, "gnuplot", &fa, &at, argv, environ) != 0) {
            pid = -1;
            why = "cannot start gnuplot";
        }
        posix_spawnattr_destroy(&at);
        posix_spawn_file_actions_destroy(&fa);
    }
    if (pid > 0) {
        const double t0 = af_time_sec(), lim = plot_timeout();
        int status = 0;
        for (;;) {
            pid_t w = waitpid(pid, &status, WNOHANG);
            if (w == pid) {
                rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
                break;
            }
            if (w < 0 && errno != EINTR) break;
            if (af_time_sec() - t0 > lim) {
                kill(-pid, SIGKILL);
                while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
                }
                why = "gnuplot did not finish in time (AFINAR_PLOT_TIMEOUT) and was stopped";
                break;
            }
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (gpf) unlink(gpf);
    if (rc == 0 && rename(tmp, png) == 0) {
        if (log) fprintf(log, "plot: %s\n", png);
    } else {
        if (tmp) unlink(tmp);
        if (log) {
            if (why) fprintf(log, "plot: %s, no curves.png\n", why);
            else if (rc == 0) fprintf(log, "plot: gnuplot wrote no image, no curves.png\n");
            else fprintf(log, "plot: gnuplot failed (exit status %d), no curves.png\n", rc);
        }
    }
    af_temp_dir_unregister(s_png);
    af_temp_dir_unregister(s_gp);
    free(mp), free(png), free(tmp), free(gpf), free(b);
}

af_status af_tr_write_run_json(const af_trainer *t) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return af_fail(AF_ERR_NOMEM, "out of memory");
    cJSON *cfg = t->config_json ? cJSON_Parse(t->config_json) : NULL;
    cJSON_AddItemToObject(j, "config", cfg ? cfg : cJSON_CreateNull());
    cJSON_AddStringToObject(j, "afinar_version", af_version());
    if (t->o->model_path) cJSON_AddStringToObject(j, "model", t->o->model_path);
    cJSON_AddNumberToObject(j, "n_train", t->train->n);
    cJSON_AddNumberToObject(j, "n_val", t->val ? t->val->n : 0);
    cJSON_AddNumberToObject(j, "num_classes", t->num_classes);
    cJSON_AddBoolToObject(j, "multi_label", t->multi_label);
    if (t->label_names) {
        cJSON *a = cJSON_AddArrayToObject(j, "labels");
        for (int32_t i = 0; i < t->num_classes; i++) cJSON_AddItemToArray(a, cJSON_CreateString(t->label_names[i]));
    }
    cJSON_AddNumberToObject(j, "total_steps", (double)t->total);
    cJSON_AddNumberToObject(j, "steps_per_epoch", (double)t->spe);
    cJSON_AddNumberToObject(j, "warmup_steps", (double)t->warmup);
    cJSON_AddNumberToObject(j, "trainable_parameters", (double)t->lay.n_total);
    cJSON *pj = af_tr_plan_json(t); /* every setting as the run uses it, with its origin */
    if (pj) cJSON_AddItemToObject(j, "settings", pj);
    char *rj = af_tr_recipe_json(t); /* the automatic recipe's choices and reasons */
    if (rj) cJSON_AddItemToObject(j, "recipe", cJSON_Parse(rj));
    free(rj);
    char *s = cJSON_Print(j);
    cJSON_Delete(j);
    char *p = af_path_join(t->out_dir, "run.json");
    af_status st = (s && p) ? af_write_file_atomic(p, s, strlen(s)) : af_fail(AF_ERR_NOMEM, "out of memory");
    free(s);
    free(p);
    if (st == AF_OK && t->config_json) { /* the same settings as YAML (a --config file) */
        char *yp = af_path_join(t->out_dir, "config.yaml");
        st = yp ? af_train_settings_write_yaml(t->config_json, yp) : af_fail(AF_ERR_NOMEM, "out of memory");
        free(yp);
    }
    return st;
}

af_status af_tr_write_eval_json(const af_trainer *t, const af_metrics *m, int64_t step) {
    cJSON *j = af_metrics_to_json(m, (const char *const *)t->label_names);
    if (!j) return af_fail(AF_ERR_NOMEM, "out of memory");
    cJSON_AddStringToObject(j, "split", "val");
    cJSON_AddNumberToObject(j, "step", (double)step);
    cJSON_AddNumberToObject(j, "epoch", t->spe > 0 ? (double)step / (double)t->spe : 0.0);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    char *p = af_path_join(t->out_dir, "eval.json");
    af_status st = (s && p) ? af_write_file_atomic(p, s, strlen(s)) : af_fail(AF_ERR_NOMEM, "out of memory");
    free(s);
    free(p);
    return st;
}

